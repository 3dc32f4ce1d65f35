#!/usr/bin/env bash
# The before/after check of a refactoring: replays of the bundled excerpt for each layout, with and
# without --lookahead 2, must stay byte-identical (`--no-wall --json`), and so must the Chrome
# traces of a short replay under memory pressure for vtensor and paged. The doctest suite
# "replay_identity" runs the same comparison in CI.
#
#   tools/replay-identity.sh check [BINARY]   compare BINARY's replays with tests/data/golden/
#   tools/replay-identity.sh write BINARY     rewrite the goldens (a change that means to alter
#                                             replays does this and says why in its commit)
# BINARY defaults to build/bin/vtensor. Exit 0 when identical, 1 when a replay differs.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-check}
bin=${2:-build/bin/vtensor}
golden=tests/data/golden
trace=traces/data/mooncake_conversation_excerpt.jsonl
case "$mode" in check|write) ;; *) echo "usage: $0 check|write [BINARY]" >&2; exit 2 ;; esac
[ -x "$bin" ] || { echo "replay-identity: $bin is not an executable" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
settle() {  # settle NAME: $tmp/NAME against the golden (check), or into it (write)
  local name=$1
  if [ "$mode" = write ]; then
    cp "$tmp/$name" "$golden/$name"
  elif cmp -s "$tmp/$name" "$golden/$name"; then
    echo "identical: $name"
  else
    echo "DIFFERS:   $name"; diff "$golden/$name" "$tmp/$name" | head -20; status=1
  fi
}
for layout in kv-split kv-fused token-major; do
  for lookahead in 0 2; do
    name=replay-$layout-lookahead$lookahead.json
    "$bin" replay --trace "$trace" --layout "$layout" --lookahead "$lookahead" --no-wall --json "$tmp/$name" >/dev/null
    settle "$name"
  done
done
for policy in vtensor paged; do  # Chrome traces (tests/sim/replay_identity_test.cpp)
  "$bin" replay --trace "$trace" --max-requests 20 --memory 1GiB --policy "$policy" --no-wall --json /dev/null \
    --chrome-trace "$tmp/chrome-$policy.json" >/dev/null
  settle "chrome-$policy.json"
done
exit $status
