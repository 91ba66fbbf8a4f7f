#!/usr/bin/env bash
# hack/vm/boot.sh IMAGE SHARE [KERNEL-ARGS...] boots the image hack/vm/image.sh
# built, with the folder SHARE as /mnt/host in the guest. The guest runs
# SHARE/guest.sh as root at the end of its boot (its output in
# SHARE/guest.log) and powers off. The root disk is a throwaway overlay of
# the image (the image is never written). The console goes to
# SHARE/console.log. Exits with the status guest.sh wrote to
# SHARE/guest.status, 125 when none was written (the guest did not get that
# far), 124 past LARDON3D_VM_TIMEOUT seconds (default 1500).
# Software emulation (TCG): on two cores a boot takes 2 to 3 minutes.
# LARDON3D_VM_KVM=1 tries /dev/kvm (a KVM guest hung at boot on this
# project's CI machines, so it is not the default).
set -euo pipefail
image=$1 share=$2
shift 2
command -v qemu-system-x86_64 >/dev/null || { echo "boot.sh: qemu-system-x86_64 is not installed (apt-get install qemu-system-x86 qemu-utils)" >&2; exit 1; }
[ -f "$image/ready" ] || { echo "boot.sh: no image in $image (run hack/vm/image.sh)" >&2; exit 1; }
overlay=$(mktemp -d)
trap 'rm -rf "$overlay"' EXIT
qemu-img create -q -f qcow2 -F raw -b "$image/rootfs.img" "$overlay/root.qcow2"
rm -f "$share/guest.status" "$share/console.log"
accel=(-accel tcg,thread=multi -cpu max)
if [ "${LARDON3D_VM_KVM:-0}" = 1 ] && [ -w /dev/kvm ]; then
  accel=(-accel kvm -cpu host)
fi
timeout --foreground -k 10 "${LARDON3D_VM_TIMEOUT:-1500}" \
  qemu-system-x86_64 "${accel[@]}" -smp 2 -m 3072 -nographic -no-reboot \
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0 panic=-1 quiet systemd.show_status=0 $*" \
  -drive "file=$overlay/root.qcow2,if=virtio,format=qcow2,cache=unsafe" \
  -virtfs "local,path=$share,mount_tag=host,security_model=none,id=host" \
  -nic none -serial "file:$share/console.log" -monitor none -display none </dev/null
[ -f "$share/guest.status" ] || { echo "boot.sh: the guest wrote no status; the console's end:" >&2; tail -40 "$share/console.log" >&2; exit 125; }
exit "$(cat "$share/guest.status")"
