#!/usr/bin/env bash
# Builds kube-apiserver and kubectl v1.37.2 (the k8s.io/kubernetes module, its
# staging modules replaced by their published v0.37.2 releases in .ci/kube/go.mod)
# and helm v3.22.0 (the separate module .ci/kube/helm), once, into a cache dir
# that survives between runs, and prints that dir on stdout:
#
#   KUBE_BIN=$(bash .ci/kube.sh) && "$KUBE_BIN/kube-apiserver" --version
#   HELM=$(bash .ci/kube.sh helm)/helm     # helm alone (a few minutes cold)
#
# Arguments name the binaries to build (kube-apiserver, kubectl, helm); none
# means all three. Cache root: $CELFLOW_CACHE, else $XDG_CACHE_HOME/celflow,
# else ~/.cache/celflow; the binaries are <root>/kube-v1.37.2-helm-v3.22.0/.
# A cold build of all three takes about 15 minutes on 2 cores (thousands of
# packages); later runs only check the files. Build output goes to stderr so
# that stdout is the dir.
set -euo pipefail

kube_version=v1.37.2
helm_version=v3.22.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${CELFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/celflow}"
dir="$root/kube-$kube_version-helm-$helm_version"

build() { # build <module dir> <binary name> <package> [ldflags]
  local bin="$dir/$2" tmp start
  [[ -x "$bin" ]] && return 0
  mkdir -p "$dir"
  tmp="$bin.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  start=$(date +%s)
  echo "kube.sh: building $3 into $bin (first run: minutes)" >&2
  # The tool lines in the go.mod pin the versions; -mod=readonly keeps go.sum
  # authoritative. Stripped: the binaries are only run, never debugged.
  (cd "$1" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="-s -w ${4:-}" -o "$tmp" "$3") >&2
  mv -f "$tmp" "$bin" # atomic: a concurrent run sees no half-written binary
  trap - EXIT
  echo "kube.sh: $2 built in $(($(date +%s) - start))s, $(du -h "$bin" | cut -f1)" >&2
}

# What helm's own Makefile stamps: its version, and the Kubernetes version its
# client-go (v0.37) speaks, which `helm template`/`lint` assume without a cluster
# (unstamped, helm claims v1.20 and refuses the chart's kubeVersion).
helm_ldflags="-X helm.sh/helm/v3/internal/version.version=$helm_version"
for p in chartutil lint/rules; do
  helm_ldflags+=" -X helm.sh/helm/v3/pkg/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/$p.k8sVersionMinor=37"
done

# What Kubernetes' hack/lib/version.sh stamps: without it the binaries report
# v0.0.0-master, and helm refuses the chart's kubeVersion against such a server.
kube_ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $p.gitVersion=$kube_version -X $p.gitMajor=1 -X $p.gitMinor=37"
  kube_ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=(kube-apiserver kubectl helm)
for w in "${want[@]}"; do
  case "$w" in
    kube-apiserver) build "$here/kube" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags" ;;
    kubectl) build "$here/kube" kubectl k8s.io/kubernetes/cmd/kubectl "$kube_ldflags" ;;
    helm) build "$here/kube/helm" helm helm.sh/helm/v3/cmd/helm "$helm_ldflags" ;;
    *) echo "kube.sh: unknown binary $w (kube-apiserver, kubectl, helm)" >&2; exit 2 ;;
  esac
done
echo "$dir"
