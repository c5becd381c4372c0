#!/usr/bin/env bash
# Stops the daemon of the swarm node at the address given (tcp://ip:port or ip), as a
# lost machine: used by the Swarm tests (RONDO_SWARM_STOP_NODE).
set -euo pipefail
source "$(dirname "$0")/swarm-nodes.sh"
SWARM_NODES=$(cat "$SWARM_DIR/nodes")
swarm_node_stop_addr "$1"
