#!/usr/bin/env bash
# Sandboxes on a real Docker Swarm, on this machine: three throwaway dockerd nodes in
# their own network namespaces and a local registry (scripts/swarm-nodes.sh), then
#   1. the Swarm tests of rondo-env (crates/rondo-env/tests/swarm.rs), the node-loss one
#      last and alone;
#   2. batches across the nodes (scripts/swarm-batch.sh), when its phase is given.
# Everything started is stopped on exit. Needs root and the test image
# (scripts/build-test-image.sh). Usage: scripts/swarm-test.sh [tests|batch|all|serve] (all;
# serve: only the `rondo serve` node-loss run, which `batch` runs last).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
phase=${1:-all}
source scripts/swarm-nodes.sh

if [[ $(id -u) -ne 0 ]]; then
  echo "swarm-test: needs root (it starts dockerd daemons and network namespaces)" >&2
  exit 1
fi
docker image inspect rondo-test-base:latest >/dev/null 2>&1 || scripts/build-test-image.sh

# Logs outlive the swarm's folder.
SWARM_LOGS=${SWARM_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/rondo-swarm-logs.XXXXXX")}
export SWARM_LOGS
trap 'swarm_down; echo "swarm-test: logs in $SWARM_LOGS" >&2' EXIT INT TERM
started=$SECONDS
swarm_up 3
echo "swarm-test: swarm up in $((SECONDS - started)) s" >&2
swarm_push rondo-test-base:latest >/dev/null

export RONDO_SWARM_MANAGER RONDO_SWARM_REGISTRY RONDO_SWARM_PUSH_REGISTRY RONDO_SWARM_NODES
export RONDO_SWARM_STOP_NODE RONDO_SWARM_TLS_DIR RONDO_SWARM_TEST_ROGUE_TLS_DIR
RONDO_SWARM_TLS_DIR=$SWARM_DIR/tls/client
RONDO_SWARM_TEST_ROGUE_TLS_DIR=$SWARM_DIR/tls/rogue
RONDO_SWARM_MANAGER=$(swarm_node_host 1)
RONDO_SWARM_REGISTRY=$SWARM_REGISTRY
RONDO_SWARM_PUSH_REGISTRY=$SWARM_PUSH_REGISTRY
RONDO_SWARM_NODES="$(swarm_node_host 1),$(swarm_node_host 2),$(swarm_node_host 3)"
RONDO_SWARM_STOP_NODE="bash $root/scripts/swarm-stop-node.sh"

# Nothing of the swarm may outlive it: no service, network or container on any node. A
# node removes the container of a removed service a moment later: up to 60 s are given.
check_nothing_left() {
  local i left=0 n deadline=$((SECONDS + 60))
  for ((i = 1; i <= SWARM_NODES; i++)); do
    swarm_docker "$i" info >/dev/null 2>&1 || continue
    while n=$(swarm_docker "$i" ps -aq --filter label=rondo.managed=true | wc -l) &&
      ((n > 0 && SECONDS < deadline)); do
      sleep 1
    done
    if ((n)); then
      echo "swarm-test: $n rondo containers left on node $i:" >&2
      swarm_docker "$i" ps -a --filter label=rondo.managed=true \
        --format '{{.Names}} {{.Status}} {{.Label "rondo.batch"}} {{.Label "rondo.run_id"}}' >&2
      left=1
    fi
  done
  n=$(swarm_docker 1 service ls -q | wc -l)
  if ((n)); then
    echo "swarm-test: $n services left on the swarm" >&2
    swarm_docker 1 service ls >&2
    left=1
  fi
  n=$(swarm_docker 1 network ls -q --filter label=rondo.managed=true | wc -l)
  if ((n)); then
    echo "swarm-test: $n rondo networks left on the swarm" >&2
    left=1
  fi
  return $left
}

if [[ $phase == tests || $phase == all ]]; then
  # One test at a time: the round-trip figures are taken alone.
  cargo test -p rondo-env --test swarm -- --include-ignored --skip a_lost_node --nocapture \
    --test-threads 1 \
    2>&1 | tee "$SWARM_LOGS/tests.log"
  cargo test -p rondo-env --test swarm -- --include-ignored --exact \
    a_lost_node_ends_its_sandbox_with_sandbox_lost_and_another_node_takes_over --nocapture \
    2>&1 | tee -a "$SWARM_LOGS/tests.log"
  grep '^FIGURE' "$SWARM_LOGS/tests.log" | tee "${SWARM_FIGURES:-/dev/null}" >&2 || true
  check_nothing_left
fi

if [[ $phase == batch || $phase == all ]]; then
  # A node stopped by the tests comes back for the batches.
  swarm_nodes_restart
  [ -f scripts/swarm-batch.sh ] && source scripts/swarm-batch.sh && swarm_batches
  check_nothing_left
fi
if [[ $phase == serve ]]; then
  source scripts/swarm-batch.sh
  cargo build -q --bin rondo
  swarm_batch_serve
  check_nothing_left
fi
echo "swarm-test: passed in $((SECONDS - started)) s" >&2
