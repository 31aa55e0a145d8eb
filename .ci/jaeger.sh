#!/usr/bin/env bash
# Builds Jaeger v1.76.0 (cmd/jaeger, the OpenTelemetry-collector based
# binary) from the separate tools module .ci/tools, once, into a cache dir
# that survives between runs, and prints the binary's path on stdout.
#
#   JAEGER=$(bash .ci/jaeger.sh) && "$JAEGER" --config .ci/jaeger-config.yaml
#
# Cache root: $CELFLOW_CACHE, else $XDG_CACHE_HOME/celflow, else
# ~/.cache/celflow; the binary is <root>/jaeger-v1.76.0/jaeger. A cold build
# takes minutes (hundreds of packages); later runs only check the file.
# Build output goes to stderr so that stdout is the path alone.
set -euo pipefail

version=v1.76.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${CELFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/celflow}"
dir="$root/jaeger-$version"
bin="$dir/jaeger"

if [[ ! -x "$bin" ]]; then
  mkdir -p "$dir"
  tmp="$bin.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  start=$(date +%s)
  echo "jaeger.sh: building jaeger $version into $bin (first run: several minutes)" >&2
  # The tool line in .ci/tools/go.mod pins the version; -mod=readonly keeps
  # go.sum authoritative. Stripped: the binary is only run, never debugged.
  (cd "$here/tools" && go build -mod=readonly -trimpath -ldflags='-s -w' -o "$tmp" \
    github.com/jaegertracing/jaeger/cmd/jaeger) >&2
  mv -f "$tmp" "$bin" # atomic: a concurrent run sees no half-written binary
  echo "jaeger.sh: built in $(($(date +%s) - start))s, $(du -h "$bin" | cut -f1)" >&2
fi
echo "$bin"
