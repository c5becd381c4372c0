#!/usr/bin/env bash
# The batches of scripts/swarm-test.sh (sourced by it, after scripts/swarm-nodes.sh, with
# the swarm up): a 12-case `rondo eval` and a 12-instance `rondo swebench`, each run once
# on this machine's engine (--engine docker) and once across the swarm (--engine swarm)
# with a worker node's daemon stopped in the middle, and checks that
#   - every case completed (a result for each, none left unfinished);
#   - the sandboxes ran on at least two nodes;
#   - the results equal the single-machine run's (timing fields aside);
#   - in the eval, a case whose sandbox was lost went on from its checkpoint in a new one.
#   - at each batch's end, the nodes keep no stale Rondo tool image (the clean-up policy,
#     RONDO_SWARM_KEEP_IMAGES=1: images planted before are removed, but for the newest
#     unused one and one a container uses).
# Then one run of `rondo serve --engine swarm` whose node is stopped under it: it resumes.
# Figures (wall times, the loss) go to $SWARM_FIGURES when set.

swarm_batch_rondo() {
  local target=${CARGO_TARGET_DIR:-target}
  [[ $target == /* ]] || target=$root/$target
  echo "$target/debug/rondo"
}

swarm_batch_fail() {
  echo "swarm-batch: FAILED: $*" >&2
  return 1
}

# A workflow whose two tool steps run in a Docker environment (a checkpoint between
# them), then a scripted reply; its 12 cases; all in the folder $1.
swarm_batch_eval_project() {
  local dir=$1 i
  mkdir -p "$dir/prompts"
  cat >"$dir/w.rondo" <<'EOF'
workflow spread {
  prompts = "prompts"
  script = "script.yaml"
  provider = mock
  input word: string
}
provider mock {
  kind = "scripted"
}
environment box {
  kind = "docker"
  image = "rondo-test-base:latest"
  workdir = "/work"
  memory = "512m"
  cpus = 0.5
}
role first: tool {
  env = box
  command = ["python3", "-c", "import hashlib, sys, time; time.sleep(3); w = sys.argv[1]; open('/work/first.txt', 'w').write(w); print(hashlib.sha256(w.encode()).hexdigest()[:12])", "{{ input.word }}"]
}
role second: tool {
  env = box
  command = ["python3", "-c", "import hashlib, sys, time; time.sleep(3); print(len(open('/work/first.txt').read()) * 7, sys.argv[1])", "{{ first.stdout | trim }}"]
}
role reply: llm {
  prompt = "reply.tera"
  output text
}
start -> first
first -> second
second -> reply
reply -> done
exit done
EOF
  echo 'Say {{ input.word }}.' >"$dir/prompts/reply.tera"
  printf "replies:\n  reply: 'done'\n" >"$dir/script.yaml"
  : >"$dir/cases.jsonl"
  for ((i = 1; i <= 12; i++)); do
    local word="word$i$(printf '%*s' "$i" '' | tr ' ' x)"
    local sum
    sum=$(printf '%s' "$word" | sha256sum | cut -c1-12)
    printf '{"id": "c%02d", "inputs": {"word": "%s"}, "expect": {"contains": "done", "checks": ["first.stdout == \\"%s\\\\n\\"", "second.stdout == \\"%d %s\\\\n\\""]}}\n' \
      "$i" "$word" "$sum" $((${#word} * 7)) "$sum" >>"$dir/cases.jsonl"
  done
}

# The fields of a results file that must not depend on where the sandboxes ran.
swarm_batch_comparable() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
path, kind = sys.argv[1], sys.argv[2]
drop = {"latency_sec", "eval_sec", "eval_dir", "workspace", "run_id", "started_at",
        "ended_at", "duration_ms", "cost_usd"}
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in sorted(v.items()) if k not in drop}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
rows = [json.loads(l) for l in open(path) if l.strip()]
key = "id" if kind == "eval" else "instance_id"
for r in sorted(rows, key=lambda r: r[key]):
    print(json.dumps(clean(r), sort_keys=True))
EOF
}

# Nodes that ran a sandbox of the batch: the swarm tasks' nodes are gone with their
# services, so every node's engine is asked for its events (container starts).
swarm_batch_nodes_used() {
  local since=$1 i n=0 used=""
  for ((i = 1; i <= SWARM_NODES; i++)); do
    if swarm_docker "$i" info >/dev/null 2>&1; then
      n=$(swarm_docker "$i" events --since "$since" --until "$(date +%s)" \
        --filter type=container --filter event=start --filter label=rondo.managed=true \
        --format '{{.ID}}' | wc -l)
    else
      # The stopped node: it had sandboxes when it stopped.
      n=$(cat "$SWARM_DIR/node$i/sandboxes-at-stop" 2>/dev/null || echo 0)
    fi
    if ((n > 0)); then used="$used node$i:$n"; fi
  done
  echo "$used"
}

# Runs `$@` (a rondo batch on the swarm) and stops a worker node's daemon as soon as the
# batch has a sandbox running on one (the worker with the most); prints the seconds the
# batch took. The stopped node's number goes to $SWARM_DIR/victim.
swarm_batch_with_node_loss() {
  local t0=$SECONDS i n best=0 victim=""
  "$@" >"$PWD/multi.out" &
  local pid=$! deadline=$((SECONDS + 180))
  while [ -z "$victim" ] && ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
    for ((i = 2; i <= SWARM_NODES; i++)); do
      n=$(swarm_docker "$i" ps -q --filter label=rondo.managed=true 2>/dev/null | wc -l)
      if ((n > best)); then best=$n victim=$i; fi
    done
    [ -n "$victim" ] || sleep 0.2
  done
  if [ -n "$victim" ]; then
    # Past its start (a sandbox lost while starting is placed elsewhere, unseen).
    sleep 1
    echo "$victim" >"$SWARM_DIR/victim"
    echo "$best" >"$SWARM_DIR/node$victim/sandboxes-at-stop"
    echo "swarm-batch: stopping node $victim with $best sandboxes on it" >&2
    swarm_node_stop "$victim"
  fi
  local rc=0
  wait "$pid" || rc=$?
  echo $((SECONDS - t0))
  return $rc
}

swarm_batch_eval() {
  local dir="$SWARM_DIR/eval" rondo t single multi since
  rondo=$(swarm_batch_rondo)
  swarm_batch_eval_project "$dir"
  cd "$dir"
  t=$SECONDS
  "$rondo" eval w.rondo --dataset cases.jsonl --out single -c 6 --engine docker -q \
    >single.out 2>single.err || swarm_batch_fail "the single-machine eval: $(tail -5 single.err)"
  single=$((SECONDS - t))
  since=$(date +%s)
  multi=$(swarm_batch_with_node_loss "$rondo" eval w.rondo --dataset cases.jsonl --out multi \
    -c 6 --engine swarm -q 2>multi.err) || { tail -20 multi.err >&2; swarm_batch_fail "the swarm eval"; }
  cd "$root"
  cp "$dir"/*.err "$SWARM_LOGS/" 2>/dev/null || true
  swarm_batch_check eval "$dir/single/cases.jsonl" "$dir/multi/cases.jsonl" "$since" 12
  swarm_batch_losses eval "$dir/multi.err"
  echo "FIGURE eval batch, 12 cases, -c 6: single machine ${single} s, 3 swarm nodes with node $(cat "$SWARM_DIR/victim") stopped mid-batch ${multi} s; sandboxes lost and resumed: $(grep -c 'sandbox was lost' "$dir/multi.err")" |
    tee -a "${SWARM_FIGURES:-/dev/null}" >&2
}

# The three fixture instances four times over (ids and run ids of their own).
swarm_batch_swebench_project() {
  local dir=$1
  mkdir -p "$dir"
  cp -R "$root/tests/fixtures/swebench/repos" "$dir/"
  cp "$root/tests/fixtures/swebench/fix.yaml" "$dir/"
  python3 - "$root/tests/fixtures/swebench/instances.jsonl" "$dir/instances.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
with open(sys.argv[2], "w") as out:
    for k in range(4):
        for r in rows:
            r = dict(r, instance_id=f"{r['instance_id']}-{k}")
            out.write(json.dumps(r) + "\n")
EOF
}

swarm_batch_swebench() {
  local dir="$SWARM_DIR/swebench" rondo t single multi since
  rondo=$(swarm_batch_rondo)
  swarm_batch_swebench_project "$dir"
  cd "$dir"
  local args=(instances.jsonl --workflow "$root/workflows/llm_ide.rondo" --provider scripted
    --script fix.yaml -c 6 -q)
  t=$SECONDS
  "$rondo" swebench "${args[@]}" --out single --engine docker >single.out 2>single.err || true
  single=$((SECONDS - t))
  [ -s single/results.jsonl ] || swarm_batch_fail "the single-machine swebench: $(tail -5 single.err)"
  since=$(date +%s)
  multi=$(swarm_batch_with_node_loss "$rondo" swebench "${args[@]}" --out multi --engine swarm \
    2>multi.err) || true
  cd "$root"
  for f in "$dir"/*.err; do cp "$f" "$SWARM_LOGS/swebench-${f##*/}"; done
  swarm_batch_check swebench "$dir/single/results.jsonl" "$dir/multi/results.jsonl" "$since" 12
  echo "FIGURE swebench batch, 12 instances, -c 6: single machine ${single} s, 3 swarm nodes with node $(cat "$SWARM_DIR/victim") stopped mid-batch ${multi} s; sandboxes lost and run again: $(grep -c 'sandbox was lost' "$dir/multi.err")" |
    tee -a "${SWARM_FIGURES:-/dev/null}" >&2
}

# The node stopped with sandboxes on it: at least one was lost and went on elsewhere (the
# eval's tool steps are long enough for that; a swebench sandbox may end first).
swarm_batch_losses() {
  grep -q 'sandbox was lost' "$2" ||
    swarm_batch_fail "$1: no sandbox was lost (the node stopped with none running?)"
}

swarm_batch_check() {
  local kind=$1 single=$2 multi=$3 since=$4 want=$5 n used
  n=$(grep -c . "$multi" 2>/dev/null || echo 0)
  ((n == want)) || swarm_batch_fail "$kind: $n results of $want on the swarm"
  diff <(swarm_batch_comparable "$single" "$kind") <(swarm_batch_comparable "$multi" "$kind") >&2 ||
    swarm_batch_fail "$kind: the swarm's results differ from the single machine's"
  used=$(swarm_batch_nodes_used "$since")
  (($(wc -w <<<"$used") >= 2)) || swarm_batch_fail "$kind: sandboxes ran on fewer than two nodes ($used)"
  echo "swarm-batch: $kind: $n results equal to the single machine's; sandboxes per node:$used" >&2
}

# Stale tool images on every node, as earlier batches leave them (label rondo.tools_hash,
# built a second apart, oldest first): stale1, stale2, stale-used (a container of the node
# uses it), stale3.
swarm_batch_images_plant() {
  local name i
  for name in stale1 stale2 stale-used stale3; do
    for ((i = 1; i <= SWARM_NODES; i++)); do
      tar -cf - -T /dev/null |
        swarm_docker "$i" import -c "LABEL rondo.tools_hash=$name" - "rondo-tools:$name" >/dev/null
    done
    sleep 1.1
  done
  for ((i = 1; i <= SWARM_NODES; i++)); do
    swarm_docker "$i" create --name rondo-stale-user rondo-tools:stale-used /none >/dev/null
  done
}

# After a batch, on every node that answers: stale1 and stale2 gone; stale3 (the newest
# unused, RONDO_SWARM_KEEP_IMAGES=1) and stale-used (in use) kept; any other tool image
# is one the batch pulled from the registry.
swarm_batch_images_check() {
  local kind=$1 i tags checked=0 tag
  for ((i = 1; i <= SWARM_NODES; i++)); do
    swarm_docker "$i" info >/dev/null 2>&1 || continue
    checked=$((checked + 1))
    tags=$(swarm_docker "$i" images --filter label=rondo.tools_hash --format '{{.Repository}}:{{.Tag}}')
    for tag in rondo-tools:stale1 rondo-tools:stale2; do
      ! grep -qx "$tag" <<<"$tags" || swarm_batch_fail "$kind: node $i still has $tag: ${tags//$'\n'/ }"
    done
    for tag in rondo-tools:stale3 rondo-tools:stale-used; do
      grep -qx "$tag" <<<"$tags" || swarm_batch_fail "$kind: node $i lost $tag, which it keeps: ${tags//$'\n'/ }"
    done
    while read -r tag; do
      case $tag in
      "" | rondo-tools:stale3 | rondo-tools:stale-used | "$SWARM_REGISTRY"/*) ;;
      *) swarm_batch_fail "$kind: node $i has the stale tool image $tag" ;;
      esac
    done <<<"$tags"
    echo "swarm-batch: $kind: node $i's tool images after the batch: ${tags//$'\n'/ }" >&2
  done
  ((checked >= 2)) || swarm_batch_fail "$kind: fewer than two nodes answer after the batch"
}

# `rondo serve --engine swarm`: one run of the eval's workflow (its first tool step 10 s
# long) with its sandbox on a worker, whose daemon is stopped during that step. The run
# must end at `done`, resumed from its checkpoint in a new sandbox.
swarm_batch_serve() {
  local dir="$SWARM_DIR/serve" rondo port=18925 pid id status="" i victim="" deadline t0
  rondo=$(swarm_batch_rondo)
  swarm_batch_eval_project "$dir"
  sed -i 's/time.sleep(3); w = sys.argv\[1\]/time.sleep(10); w = sys.argv[1]/' "$dir/w.rondo"
  grep -q 'time.sleep(10)' "$dir/w.rondo" || swarm_batch_fail "serve: the workflow was not lengthened"
  cd "$dir"
  RONDO_SWARM_CONSTRAINTS=node.role==worker "$rondo" serve w.rondo --port "$port" \
    --engine swarm >serve.out 2>serve.err &
  pid=$!
  cd "$root"
  deadline=$((SECONDS + 60))
  until curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
    if ((SECONDS > deadline)) || ! kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      swarm_batch_fail "serve: the server did not answer: $(tail -5 "$dir/serve.err")"
    fi
    sleep 0.3
  done
  t0=$SECONDS
  id=$(curl -fsS -X POST "http://127.0.0.1:$port/runs" -H 'content-type: application/json' \
    -d '{"workflow": "spread", "inputs": {"word": "served"}}' |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])') || id=""
  if [ -z "$id" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    swarm_batch_fail "serve: POST /runs failed: $(tail -5 "$dir/serve.err")"
  fi
  # The node holding this run's sandbox, found by the run's label: an earlier batch's
  # containers may still be going away on another node.
  deadline=$((SECONDS + 120))
  while [ -z "$victim" ] && ((SECONDS < deadline)); do
    for ((i = 2; i <= SWARM_NODES; i++)); do
      if (($(swarm_docker "$i" ps -q --filter "label=rondo.run_id=$id" 2>/dev/null | wc -l) > 0)); then
        victim=$i
      fi
    done
    [ -n "$victim" ] || sleep 0.2
  done
  if [ -z "$victim" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    swarm_batch_fail "serve: the run's sandbox never ran on a worker"
  fi
  # Inside the 10 s step (the sandbox's start and hardening check take a few seconds).
  sleep 5
  echo "swarm-batch: serve: stopping node $victim under run $id" >&2
  swarm_node_stop "$victim"
  deadline=$((SECONDS + 300))
  while ((SECONDS < deadline)); do
    status=$(curl -fsS "http://127.0.0.1:$port/runs/$id" |
      python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["status"], r.get("exit"))') ||
      status="unreadable"
    case $status in running* | queued*) sleep 1 ;; *) break ;; esac
  done
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || true
  cp "$dir/serve.err" "$SWARM_LOGS/serve.err"
  [[ $status == *" done" ]] || swarm_batch_fail "serve: run $id ended as '$status': $(tail -5 "$dir/serve.err")"
  grep -q "run $id: its sandbox was lost; resuming it" "$dir/serve.err" ||
    swarm_batch_fail "serve: run $id was not resumed after its node stopped: $(tail -5 "$dir/serve.err")"
  echo "FIGURE serve, one run, its worker node stopped in its first tool step: ended '$status' after $((SECONDS - t0)) s; resumed $(grep -c "run $id: its sandbox was lost" "$dir/serve.err") time(s)" |
    tee -a "${SWARM_FIGURES:-/dev/null}" >&2
}

swarm_batches() {
  cargo build -q --bin rondo
  export RONDO_SWARM_KEEP_IMAGES=1
  swarm_batch_images_plant
  swarm_batch_eval
  swarm_batch_images_check eval
  swarm_nodes_restart
  swarm_batch_swebench
  swarm_batch_images_check swebench
  swarm_nodes_restart
  swarm_batch_serve
  swarm_nodes_restart
}
