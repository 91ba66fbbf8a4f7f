#!/usr/bin/env bash
# hack/vm/image.sh builds, once, the virtual machine the cgroup v2 tests
# boot (hack/vm, `make test-vm`): Debian 12's kernel (linux-image-amd64),
# systemd 252 on cgroup v2, dbus with the user session bus and
# libpam-systemd (a user's own manager), and a user "tester" (uid 1000,
# lingering), in a root file system made by debootstrap from Debian's
# packages. It prints the image's directory (kernel, initrd, rootfs.img)
# and caches it under ~/.cache/lardon3d/vm; a later call only prints it.
# Needs root (debootstrap), debootstrap, qemu-system-x86 and e2fsprogs
# (.ci/run installs them). Takes 2 to 10 minutes on two cores (the
# download). With --cached it builds nothing: it prints the directory of a
# built image, or exits 3 when there is none.
set -euo pipefail

# Bump when the recipe below changes: a new directory is built beside.
recipe=3
cache="${LARDON3D_CACHE:-$HOME/.cache/lardon3d}/vm"
out="$cache/debian12-r$recipe"
if [ -f "$out/ready" ]; then
  echo "$out"
  exit 0
fi
[ "${1:-}" != --cached ] || exit 3
for tool in debootstrap mke2fs; do
  command -v "$tool" >/dev/null || { echo "image.sh: $tool is not installed (apt-get install debootstrap e2fsprogs)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "image.sh: debootstrap needs root" >&2; exit 1; }

# The mirror this machine's apt uses, else Debian's.
mirror=$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null |
  grep -oE 'https?://[^ ]+' | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}

mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/root"
echo "image.sh: debootstrap bookworm from $mirror into $root" >&2
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,linux-image-amd64,initramfs-tools,procps,kmod,udev \
  bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -30 "$work/debootstrap.log" >&2; exit 1; }

# The root disk, the host's share (9p) where the guest finds its program
# and writes its results, and the user the non-root setups run as.
cat >"$root/etc/fstab" <<'FSTAB'
/dev/vda / ext4 rw,relatime 0 1
host /mnt/host 9p trans=virtio,version=9p2000.L,msize=262144,nofail 0 0
FSTAB
mkdir -p "$root/mnt/host"
echo lardon3d-vm >"$root/etc/hostname"
printf '9p\n9pnet_virtio\n' >>"$root/etc/initramfs-tools/modules"
printf '9p\n9pnet_virtio\n' >"$root/etc/modules-load.d/9p.conf"
chroot "$root" useradd --create-home --uid 1000 --shell /bin/bash tester
mkdir -p "$root/var/lib/systemd/linger"
touch "$root/var/lib/systemd/linger/tester"
chroot "$root" passwd -d root >/dev/null

# At boot the guest runs /mnt/host/guest.sh (written by the test) and
# powers off; its output goes to the console and to the share.
cat >"$root/etc/systemd/system/lardon3d-guest.service" <<'UNIT'
[Unit]
Description=lardon3d-controller VM test run
After=multi-user.target mnt-host.mount systemd-user-sessions.service user@1000.service
Wants=user@1000.service
RequiresMountsFor=/mnt/host

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'if [ -x /mnt/host/guest.sh ]; then /mnt/host/guest.sh >/mnt/host/guest.log 2>&1; echo "lardon3d-guest exit $?" >/dev/ttyS0; else echo "lardon3d-guest: no /mnt/host/guest.sh" >/dev/ttyS0; fi'
ExecStopPost=/bin/systemctl --no-block poweroff
StandardOutput=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
UNIT
chroot "$root" systemctl enable lardon3d-guest.service >/dev/null 2>&1
# Nothing the tests need waits on the network or a terminal login.
chroot "$root" systemctl mask systemd-networkd-wait-online.service getty@tty1.service serial-getty@ttyS0.service >/dev/null 2>&1 || true
chroot "$root" update-initramfs -u -k all >/dev/null 2>&1

mkdir -p "$work/img"
cp "$root"/boot/vmlinuz-* "$work/img/vmlinuz"
cp "$root"/boot/initrd.img-* "$work/img/initrd.img"
chmod 644 "$work/img/vmlinuz" "$work/img/initrd.img"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/boot/*
mke2fs -q -t ext4 -L root -d "$root" "$work/img/rootfs.img" 3G
touch "$work/img/ready"
rm -rf "$out"
mv "$work/img" "$out"
echo "$out"
