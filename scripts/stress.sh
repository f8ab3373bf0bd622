#!/usr/bin/env bash
# Runs the packages most exposed to timing (Raft, ZooKeeper, the plugin
# boundary, the coordinator) many times on a machine kept busy by CPU hogs,
# to find flaky tests (`make stress`). A flake found here is fixed at its
# cause: a wait on a condition instead of a fixed margin, a bound that
# scales with the configured timeouts.
#
#   COUNT       runs of each test (default 10, at least 10)
#   PKGS        packages (default: raft, zookeeper, plugins, coordinator)
#   RACE        0 skips the second pass, under -race (default 1)
#   RACE_PKGS   packages of the -race pass (default: raft, plugins)
#   RACE_COUNT  runs of each test in the -race pass (default COUNT)
#   HOGS        CPU hogs to run beside the tests (default: one per core)
#   RUN, SKIP   go test -run / -skip patterns for both passes (default:
#               every test), e.g. SKIP=TestConformance to leave out the
#               conformance suites (two thirds of the Raft package's time)
#
# The hogs run through both passes; the first failing pass ends the run.
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT=${COUNT:-10}
PKGS=${PKGS:-./backends/raft/ ./backends/zookeeper/ ./plugins/ ./coordinator/}
HOGS=${HOGS:-$(nproc)}
RACE=${RACE:-1}
RACE_PKGS=${RACE_PKGS:-./backends/raft/ ./plugins/}
RACE_COUNT=${RACE_COUNT:-$COUNT}
if [ "$COUNT" -lt 10 ] || [ "$RACE_COUNT" -lt 10 ]; then
	echo "stress: COUNT and RACE_COUNT must be at least 10 (a flake seen once in ten runs hides in fewer)" >&2
	exit 2
fi

hogs=()
cleanup() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq "$HOGS"); do
	(while :; do :; done) &
	hogs+=("$!")
done
sel=()
if [ -n "${RUN:-}" ]; then sel+=(-run "$RUN"); fi
if [ -n "${SKIP:-}" ]; then sel+=(-skip "$SKIP"); fi
flags=(-count="$COUNT" -timeout 240m -p 1 "${sel[@]}")
echo "stress: ${HOGS} CPU hogs; go test ${flags[*]} ${PKGS}" >&2
# shellcheck disable=SC2086
go test "${flags[@]}" $PKGS
if [ "$RACE" != 0 ]; then
	rflags=(-race -count="$RACE_COUNT" -timeout 480m -p 1 "${sel[@]}")
	echo "stress: ${HOGS} CPU hogs; go test ${rflags[*]} ${RACE_PKGS}" >&2
	# shellcheck disable=SC2086
	go test "${rflags[@]}" $RACE_PKGS
fi
