#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME each, one after the
# other (go test -fuzz takes one target per invocation). Targets are found
# by their declaration (func FuzzX(f *testing.F) in a _test.go file), so a
# new one is picked up without editing this list.
#
# A failing target leaves its input in <package>/testdata/fuzz/FuzzX/<id>:
# this script prints that path and the input itself, so a crasher found in
# CI survives the CI machine. Commit the file: plain `go test` then replays
# it as a regression case. Exit status: 1 when any target failed (Go 1.26's
# spurious "context deadline exceeded" at the end of -fuzztime, with no
# failing input, is reported but is not a failure: go.dev/issue/75804).
set -uo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-15s}"
failed=()
flaked=()
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
while IFS=: read -r file target; do
  dir="$(dirname "$file")"
  printf '== fuzz %-28s %-24s %s\n' "./$dir" "$target" "$FUZZTIME"
  if "$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "./$dir" >"$log" 2>&1; then
    continue
  fi
  # Go 1.26's fuzz coordinator can report a bare "context deadline exceeded"
  # when -fuzztime ends while a starved worker is mid-call (go.dev/issue/75804,
  # fixed in Go 1.27). No input was found then: note it, do not fail.
  if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written\|failure while testing seed corpus\|panic:' "$log"; then
    flaked+=("./$dir $target")
    echo "fuzz: $target stopped with Go's fuzztime race (go.dev/issue/75804), no failing input; not a failure"
    continue
  fi
  failed+=("./$dir $target")
  grep -v '^fuzz: elapsed' "$log" | tail -n 40
  kept="$(sed -n 's/.*Failing input written to \(testdata\/fuzz\/[^ ]*\).*/\1/p' "$log" | tail -n 1)"
  if [ -n "$kept" ] && [ -f "$dir/$kept" ]; then
    echo "fuzz: CRASHER KEPT at $dir/$kept — commit it; it is now a regression case of plain go test"
    echo "fuzz: reproduce with: $GO test -run '^${target}/$(basename "$kept")\$' ./$dir"
    echo "----- $dir/$kept"
    cat "$dir/$kept"
    echo "-----"
  fi
done < <(grep -rEo --include='*_test.go' --exclude-dir=.ci --exclude-dir=node_modules '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . \
          | sed -E 's#^\./##; s#:func (Fuzz[A-Za-z0-9_]+)\(.*#:\1#' | sort)
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "fuzz: all targets passed${flaked[*]:+ (${#flaked[@]} stopped by go.dev/issue/75804: ${flaked[*]})}"
