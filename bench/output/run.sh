#!/usr/bin/env bash
# Peak memory of a run whose tool prints SIZE (default 1G) of output: the output streams to
# the role's log file and only a bounded head and tail stay in memory and in the records.
# Needs SIZE of free disk for the log (deleted afterwards). Results go to RESULTS.md by hand.
# RONDO_BIN=path runs that binary instead of building one.
set -euo pipefail
[ -x /usr/bin/time ] || bash "$(dirname "$0")/../../scripts/apt-install.sh" time
cd "$(dirname "$0")/../.."
PROFILE="${PROFILE:-dev}"   # PROFILE=release for optimised figures
SIZE="${SIZE:-1G}"
bin=${RONDO_BIN:-}
if [ -z "$bin" ]; then
  cargo build -q --profile "$PROFILE" --bin rondo
  bin=${CARGO_TARGET_DIR:-target}/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")/rondo
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/spew.rondo" <<'RONDO'
workflow spew {
  input size: string
}

role spew: tool {
  command = ["sh", "-c", "head -c {{ input.size }} /dev/zero | tr '\\0' 'y'; echo; echo done"]
  log = "spew.log"
  show = tail(5)
}

start -> spew
spew -> success when spew.ok
spew -> failed otherwise
exit success
exit failed { code = 1 }
RONDO
/usr/bin/time -f "wall %e s, peak RSS %M KB" \
  "$bin" run "$work/spew.rondo" -i size="$SIZE" --run-dir "$work/runs" --run-id r -q
ls -l "$work/runs/r"
