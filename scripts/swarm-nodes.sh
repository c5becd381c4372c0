#!/usr/bin/env bash
# Functions that start a throwaway Docker Swarm on this machine: N dockerd nodes, each in
# its own network namespace (joined with `nsenter --net=`: `ip netns exec` remounts /sys
# and dockerd then fails) with its own data and exec roots, wired to a bridge in the host
# namespace, plus a local registry (Debian's docker-registry). Source it, then:
#   swarm_up 3        # nodes rondo-sw1..3, node 1 the manager; registry on the bridge
#   swarm_down        # stops and removes everything swarm_up started (safe to call twice)
# Each node's engine API listens on TCP with TLS and verifies its clients (dockerd
# --tlsverify): certificates made by openssl at start under $SWARM_DIR/tls, the driver's in
# $SWARM_DIR/tls/client (ca.pem, cert.pem, key.pem: RONDO_SWARM_TLS_DIR), and a client
# certificate of another CA in $SWARM_DIR/tls/rogue, which every node must refuse.
# Needs root. Everything lives under $SWARM_DIR and is named rondo-sw*: nothing of the
# machine's own Docker engine is touched but the one image pushed to the registry.

SWARM_DIR=${SWARM_DIR:-/tmp/rondo-swarm}
SWARM_NET=${SWARM_NET:-10.251.25}      # the bridge is .1, node i is .(10+i)
SWARM_BRIDGE=${SWARM_BRIDGE:-rondo-sw0}
SWARM_ENGINE_PORT=${SWARM_ENGINE_PORT:-2376}
SWARM_REGISTRY_PORT=${SWARM_REGISTRY_PORT:-5025}
# The registry as the nodes reach it, and as this machine's engine pushes to it (a registry
# on 127.0.0.0/8 is trusted without TLS; the nodes list the bridge address as insecure).
SWARM_REGISTRY="$SWARM_NET.1:$SWARM_REGISTRY_PORT"
SWARM_PUSH_REGISTRY="127.0.0.1:$SWARM_REGISTRY_PORT"
SWARM_NODES=0

swarm_log() { echo "swarm: $*" >&2; }

swarm_node_ip() { echo "$SWARM_NET.$((10 + $1))"; }
swarm_node_host() { echo "tcp://$(swarm_node_ip "$1"):$SWARM_ENGINE_PORT"; }
swarm_docker() {
  local i=$1
  shift
  docker -H "unix://$SWARM_DIR/node$i/docker.sock" "$@"
}

# The bridge every node's veth is plugged into; bridged traffic passes the host's FORWARD
# chain (br_netfilter), whose policy Docker sets to DROP, hence the ACCEPT rule.
swarm_bridge_up() {
  ip link add "$SWARM_BRIDGE" type bridge
  ip addr add "$SWARM_NET.1/24" dev "$SWARM_BRIDGE"
  ip link set "$SWARM_BRIDGE" up
  iptables -I FORWARD -i "$SWARM_BRIDGE" -o "$SWARM_BRIDGE" -j ACCEPT
  echo bridge >>"$SWARM_DIR/started"
}

swarm_netns_up() {
  local i=$1 ns="rondo-sw$i" ip
  ip=$(swarm_node_ip "$i")
  ip netns add "$ns"
  echo "netns $ns" >>"$SWARM_DIR/started"
  ip link add "rsw${i}h" type veth peer name "rsw${i}c"
  ip link set "rsw${i}c" netns "$ns"
  ip link set "rsw${i}h" master "$SWARM_BRIDGE" up
  local in=(nsenter "--net=/run/netns/$ns")
  "${in[@]}" ip link set lo up
  "${in[@]}" ip link set "rsw${i}c" name eth0
  "${in[@]}" ip addr add "$ip/24" dev eth0
  "${in[@]}" ip link set eth0 up
  "${in[@]}" ip route add default via "$SWARM_NET.1"
}

# A CA and a certificate it signs: swarm_cert DIR NAME CA_DIR EXTENSIONS (key NAME-key.pem).
swarm_cert() {
  local dir=$1 name=$2 ca=$3 ext=$4
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
    -keyout "$dir/$name-key.pem" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$ca/ca.pem" -CAkey "$ca/ca-key.pem" \
    -CAcreateserial -days 2 -out "$dir/$name.pem" -extfile <(printf '%s\n' "$ext") 2>/dev/null
  rm -f "$dir/$name.csr"
  chmod 600 "$dir/$name-key.pem"
}

swarm_ca() {
  local dir=$1 name=$2
  mkdir -p "$dir"
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=$name" -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" 2>/dev/null
  chmod 600 "$dir/ca-key.pem"
}

# The test CA, a server certificate per node naming its address, the driver's client
# certificate; and a rogue CA with a client certificate of its own.
swarm_certs_up() {
  local n=$1 tls="$SWARM_DIR/tls" i
  command -v openssl >/dev/null || bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" openssl >&2
  swarm_ca "$tls" rondo-swarm-test-ca
  local leaf="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature"
  for ((i = 1; i <= n; i++)); do
    swarm_cert "$tls" "node$i" "$tls" "$leaf
extendedKeyUsage=serverAuth
subjectAltName=IP:$(swarm_node_ip "$i")"
  done
  mkdir -p "$tls/client" "$tls/rogue"
  swarm_cert "$tls/client" driver "$tls" "$leaf
extendedKeyUsage=clientAuth"
  cp "$tls/ca.pem" "$tls/client/ca.pem"
  mv "$tls/client/driver.pem" "$tls/client/cert.pem"
  mv "$tls/client/driver-key.pem" "$tls/client/key.pem"
  swarm_ca "$tls/rogue-ca" rondo-swarm-rogue-ca
  swarm_cert "$tls/rogue" driver "$tls/rogue-ca" "$leaf
extendedKeyUsage=clientAuth"
  cp "$tls/ca.pem" "$tls/rogue/ca.pem"
  mv "$tls/rogue/driver.pem" "$tls/rogue/cert.pem"
  mv "$tls/rogue/driver-key.pem" "$tls/rogue/key.pem"
}

# One dockerd in node i's namespace: its own data, exec root, pid file and socket; the
# engine API also on TCP, TLS only, for clients whose certificate the test CA signed.
swarm_dockerd_up() {
  local i=$1 dir="$SWARM_DIR/node$i" ip
  ip=$(swarm_node_ip "$i")
  mkdir -p "$dir/data" "$dir/exec"
  # A file of its own: the machine's /etc/docker/daemon.json is not for the nodes.
  cat >"$dir/daemon.json" <<EOF
{"data-root": "$dir/data", "exec-root": "$dir/exec", "pidfile": "$dir/dockerd.pid",
 "hosts": ["unix://$dir/docker.sock", "tcp://$ip:$SWARM_ENGINE_PORT"],
 "tls": true, "tlsverify": true, "tlscacert": "$SWARM_DIR/tls/ca.pem",
 "tlscert": "$SWARM_DIR/tls/node$i.pem", "tlskey": "$SWARM_DIR/tls/node$i-key.pem",
 "storage-driver": "fuse-overlayfs", "cgroup-parent": "rondo-sw$i",
 "insecure-registries": ["$SWARM_REGISTRY"], "no-new-privileges": true, "mtu": 1400,
 "log-driver": "json-file", "log-opts": {"max-size": "1m"}}
EOF
  nsenter "--net=/run/netns/rondo-sw$i" dockerd --config-file "$dir/daemon.json" \
    >"$dir/dockerd.log" 2>&1 &
  local pid=$!
  echo "dockerd $i $pid" >>"$SWARM_DIR/started"
  local deadline=$((SECONDS + 60))
  until swarm_docker "$i" info >/dev/null 2>&1; do
    if ((SECONDS > deadline)) || ! kill -0 "$pid" 2>/dev/null; then
      swarm_log "node $i: dockerd did not answer in 60 s"
      tail -20 "$dir/dockerd.log" >&2
      return 1
    fi
    sleep 0.5
  done
}

swarm_registry_up() {
  local dir="$SWARM_DIR/registry"
  mkdir -p "$dir/data"
  cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: :$SWARM_REGISTRY_PORT
EOF
  docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
  echo "registry $!" >>"$SWARM_DIR/started"
  local deadline=$((SECONDS + 30))
  until curl -fsS "http://127.0.0.1:$SWARM_REGISTRY_PORT/v2/" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      swarm_log "the registry did not answer in 30 s"
      cat "$dir/registry.log" >&2
      return 1
    fi
    sleep 0.3
  done
}

# Pushes a local image of this machine's engine; prints its name as the nodes pull it.
swarm_push() {
  local image=$1 name=${1%%:*} tag
  tag=${1#*:}
  [ "$tag" != "$image" ] || tag=latest
  docker tag "$image" "$SWARM_PUSH_REGISTRY/$name:$tag"
  docker push -q "$SWARM_PUSH_REGISTRY/$name:$tag" >/dev/null
  docker rmi "$SWARM_PUSH_REGISTRY/$name:$tag" >/dev/null
  echo "$SWARM_REGISTRY/$name:$tag"
}

swarm_up() {
  local n=${1:-3} i token
  command -v docker-registry >/dev/null || bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" docker-registry >&2
  swarm_down
  mkdir -p "$SWARM_DIR"
  : >"$SWARM_DIR/started"
  SWARM_NODES=$n
  echo "$n" >"$SWARM_DIR/nodes"
  swarm_certs_up "$n"
  swarm_bridge_up
  swarm_registry_up
  local starting=()
  for ((i = 1; i <= n; i++)); do
    swarm_netns_up "$i"
    swarm_dockerd_up "$i" &
    starting+=($!)
  done
  wait "${starting[@]}"
  for ((i = 1; i <= n; i++)); do
    swarm_docker "$i" info >/dev/null 2>&1 || return 1
  done
  swarm_docker 1 swarm init --advertise-addr "$(swarm_node_ip 1)" >/dev/null
  token=$(swarm_docker 1 swarm join-token -q worker)
  for ((i = 2; i <= n; i++)); do
    swarm_docker "$i" swarm join --token "$token" "$(swarm_node_ip 1):2377" >/dev/null
  done
  swarm_log "$n nodes up: manager $(swarm_node_host 1), registry $SWARM_REGISTRY"
}

# Stops node i's daemon (what a lost machine looks like to the rest of the swarm).
swarm_node_stop() {
  local i=$1 pid
  pid=$(awk -v i="$i" '$1 == "dockerd" && $2 == i { print $3 }' "$SWARM_DIR/started" | tail -1)
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS > deadline)); then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.3
  done
}

# Whatever a node left mounted under its roots (overlay mounts, the netns bind of its
# containers, shm).
swarm_unmount_under() {
  local root=$1 m
  for m in $(awk -v r="$root" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
}

swarm_down() {
  [ -f "$SWARM_DIR/started" ] || return 0
  local kind a b i pid
  # Daemons first (newest first), then the namespaces and the bridge.
  tac "$SWARM_DIR/started" | while read -r kind a b; do
    case $kind in
    dockerd) swarm_node_stop "$a" ;;
    registry) kill -TERM "$a" 2>/dev/null || true ;;
    esac
  done
  # containerd shims a killed daemon left behind.
  for pid in $(pgrep -f "containerd-shim.*$SWARM_DIR" 2>/dev/null); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in $(pgrep -f "containerd --config $SWARM_DIR" 2>/dev/null); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  swarm_unmount_under "$SWARM_DIR"
  tac "$SWARM_DIR/started" | while read -r kind a b; do
    case $kind in
    netns) ip netns delete "$a" 2>/dev/null || true ;;
    bridge)
      iptables -D FORWARD -i "$SWARM_BRIDGE" -o "$SWARM_BRIDGE" -j ACCEPT 2>/dev/null || true
      ip link delete "$SWARM_BRIDGE" 2>/dev/null || true
      ;;
    esac
  done
  for i in 1 2 3 4 5 6 7 8 9; do ip link delete "rsw${i}h" 2>/dev/null || true; done
  rm -rf "$SWARM_DIR"
}

# Stops the node whose address is $1 (as the nodes' engines listen on it).
swarm_node_stop_addr() {
  local addr=${1#tcp://} i
  addr=${addr%%:*}
  for ((i = 1; i <= $(cat "$SWARM_DIR/nodes"); i++)); do
    if [ "$(swarm_node_ip "$i")" = "$addr" ]; then
      swarm_log "stopping node $i ($addr)"
      swarm_node_stop "$i"
      return 0
    fi
  done
  swarm_log "no node at $addr"
  return 1
}

# Starts again every node whose daemon is stopped, and waits for the swarm to see each
# one ready.
swarm_nodes_restart() {
  local n i deadline
  n=$(cat "$SWARM_DIR/nodes")
  for ((i = 1; i <= n; i++)); do
    swarm_docker "$i" info >/dev/null 2>&1 && continue
    swarm_log "restarting node $i"
    swarm_dockerd_up "$i"
  done
  deadline=$((SECONDS + 90))
  while (($(swarm_docker 1 node ls --format '{{.Status}}' | grep -c '^Ready$') < n)); do
    if ((SECONDS > deadline)); then
      swarm_log "not every node is ready after 90 s"
      swarm_docker 1 node ls >&2
      return 1
    fi
    sleep 1
  done
}
