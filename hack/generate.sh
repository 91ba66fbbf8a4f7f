#!/usr/bin/env bash
# generate.sh runs controller-gen (pinned below, through `go run`, so nothing
# is installed and go.mod is untouched) to write the files generated from the
# Go types:
#   pkg/apis/v1alpha1/zz_generated.deepcopy.go   deep copies of the spool types
#   pkg/kubeapi/zz_generated.deepcopy.go         deep copies of the Kubernetes form
#   deploy/crd/lardon3d.io_tasks.yaml            the CRD tasks.lardon3d.io
# With an argument OUT, writes them under OUT/ (same relative paths) instead
# of the work tree: TestGeneratedFilesAreFresh compares the two.
set -euo pipefail
cd "$(dirname "$0")/.."

CONTROLLER_GEN=sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
out=${1:-.}
mkdir -p "$out/pkg/apis/v1alpha1" "$out/pkg/kubeapi" "$out/deploy/crd"

gen() { go run "$CONTROLLER_GEN" "$@"; }
gen object paths=./pkg/apis/v1alpha1 output:object:dir="$out/pkg/apis/v1alpha1"
gen object paths=./pkg/kubeapi output:object:dir="$out/pkg/kubeapi"
gen crd paths=./pkg/kubeapi output:crd:dir="$out/deploy/crd"
