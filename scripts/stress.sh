#!/usr/bin/env bash
# Runs the packages most exposed to timing (Raft, ZooKeeper, the plugin
# boundary, the coordinator) many times on a machine kept busy by CPU hogs,
# to find flaky tests (`make stress`). A flake found here is fixed at its
# cause: a wait on a condition instead of a fixed margin, a bound that
# scales with the configured timeouts.
#
#   COUNT  runs of each test (default 10)
#   PKGS   packages (default: raft, zookeeper, plugins, coordinator)
#   RACE   set to 1 to add -race
#   HOGS   CPU hogs to run beside the tests (default: one per core)
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT=${COUNT:-10}
PKGS=${PKGS:-./backends/raft/ ./backends/zookeeper/ ./plugins/ ./coordinator/}
HOGS=${HOGS:-$(nproc)}
flags=(-count="$COUNT" -timeout 180m -p 1)
if [ "${RACE:-}" = 1 ]; then flags+=(-race); fi

hogs=()
cleanup() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq "$HOGS"); do
	(while :; do :; done) &
	hogs+=("$!")
done
echo "stress: ${HOGS} CPU hogs; go test ${flags[*]} ${PKGS}" >&2
# shellcheck disable=SC2086
go test "${flags[@]}" $PKGS
