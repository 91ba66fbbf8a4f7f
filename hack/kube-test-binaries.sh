#!/usr/bin/env bash
# kube-test-binaries.sh builds the control plane the Kubernetes tests start
# (kube-apiserver and etcd), and the kubelet of their test node, from Go
# modules through the Go module proxy, once, into a cache outside the
# repository, and prints the directory that holds the three (what
# controller-runtime's envtest calls KUBEBUILDER_ASSETS) as the last line of
# its standard output. Everything else goes to standard error.
#
# No cluster and no download other than Go modules: kube-apiserver and the
# kubelet are built from k8s.io/kubernetes (its staging modules pinned by
# replace directives, as k8s.io/kubernetes' own go.mod points them at
# ./staging), etcd from go.etcd.io/etcd/server/v3. The kubelet needs
# containerd and runc to run Pods (Debian's packages; .ci/run installs them).
#
# A binary is rebuilt only when its version is not in the cache yet, so a
# second run costs nothing. Builds are written under a temporary name and
# renamed into place, so an interrupted build leaves no half binary.
#
# Environment:
#   LARDON3D_KUBE_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/lardon3d/kube)
#   KUBE_VERSION         k8s.io/kubernetes version (default below)
#   ETCD_VERSION         go.etcd.io/etcd/server/v3 version (default below)
#   NICE                 niceness of the builds (default 10)
#
# Measured (2 cores, loaded machine, empty Go build cache for these
# modules): see README.md "Running on Kubernetes".
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.34.2}
# The etcd client k8s.io/kubernetes $KUBE_VERSION is built against.
ETCD_VERSION=${ETCD_VERSION:-v3.6.4}
NICE=${NICE:-10}
CACHE=${LARDON3D_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lardon3d/kube}

command -v go >/dev/null || { echo "kube-test-binaries: go is not on PATH" >&2; exit 1; }

log() { echo "kube-test-binaries: $*" >&2; }

WORK=$(mktemp -d -t lardon3d-kube-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# build_in_module DIR OUT PKG: builds package PKG of the throwaway module in
# DIR into OUT (atomically).
build_in_module() {
  local dir=$1 out=$2 pkg=$3
  (cd "$dir" && nice -n "$NICE" go mod tidy >&2 &&
    CGO_ENABLED=0 nice -n "$NICE" go build -trimpath -ldflags=-s -o "$out.tmp.$$" "$pkg" >&2)
  mv -f "$out.tmp.$$" "$out"
}

# build_kube_cmd CMD OUT: builds k8s.io/kubernetes/cmd/CMD (kube-apiserver,
# kubelet) in a throwaway module that imports it, with every k8s.io staging
# module replaced by its published v0.X.Y.
build_kube_cmd() {
  local cmd=$1 out=$2 dir staging gomod
  dir="$WORK/$cmd"
  mkdir -p "$dir"
  staging="v0${KUBE_VERSION#v1}"   # v1.34.2 -> v0.34.2
  cat >"$dir/go.mod" <<EOF
module lardon3d.invalid/${cmd//-/}

go 1.24
EOF
  cat >"$dir/tools.go" <<EOF
//go:build tools

package ${cmd//-/}

import _ "k8s.io/kubernetes/cmd/$cmd"
EOF
  # k8s.io/kubernetes' go.mod says which staging modules it replaces.
  gomod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$gomod" ] || { log "no go.mod for k8s.io/kubernetes@$KUBE_VERSION"; return 1; }
  (
    cd "$dir"
    go mod edit -require="k8s.io/kubernetes@$KUBE_VERSION"
    for m in $(sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\1|p' "$gomod"); do
      go mod edit -replace="$m=$m@$staging"
    done
  )
  build_in_module "$dir" "$out" "k8s.io/kubernetes/cmd/$cmd"
}
build_apiserver() { build_kube_cmd kube-apiserver "$1"; }
build_kubelet() { build_kube_cmd kubelet "$1"; }

# etcd: the server module's own main package.
build_etcd() {
  local out=$1 dir
  dir="$WORK/etcd"
  mkdir -p "$dir"
  cat >"$dir/go.mod" <<EOF
module lardon3d.invalid/etcd

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
  cat >"$dir/tools.go" <<'EOF'
//go:build tools

package etcd

import _ "go.etcd.io/etcd/server/v3"
EOF
  build_in_module "$dir" "$out" go.etcd.io/etcd/server/v3
}

# ensure NAME VERSION BUILDER: the cached binary, built first if missing.
ensure() {
  local name=$1 version=$2 builder=$3 dir start
  dir="$CACHE/$name-$version"
  if [ ! -x "$dir/$name" ]; then
    mkdir -p "$dir"
    log "building $name $version into $dir (once)"
    start=$(date +%s)
    "$builder" "$dir/$name"
    log "built $name $version in $(($(date +%s) - start)) s"
  fi
  log "$name: $dir/$name"
}

ensure kube-apiserver "$KUBE_VERSION" build_apiserver
ensure etcd "$ETCD_VERSION" build_etcd
ensure kubelet "$KUBE_VERSION" build_kubelet

# One directory holding both, as envtest wants it.
assets="$CACHE/assets-kube-$KUBE_VERSION-etcd-$ETCD_VERSION"
mkdir -p "$assets"
ln -sfn "$CACHE/kube-apiserver-$KUBE_VERSION/kube-apiserver" "$assets/kube-apiserver"
ln -sfn "$CACHE/etcd-$ETCD_VERSION/etcd" "$assets/etcd"
ln -sfn "$CACHE/kubelet-$KUBE_VERSION/kubelet" "$assets/kubelet"
echo "$assets"
