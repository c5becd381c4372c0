#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need (Debian packages,
# the locally built Docker test image), then runs every test. `.ci/run` calls this.
# Each phase starts with a `==> [elapsed] name` line; the last lines give each phase's time.
set -euo pipefail
cd "$(dirname "$0")/.."

phases=()
phase_name=""
phase_start=$SECONDS

end_phase() {
  if [[ -n $phase_name ]]; then
    phases+=("$(printf '%5ds  %s' "$((SECONDS - phase_start))" "$phase_name")")
  fi
  phase_name=""
}

phase() {
  end_phase
  phase_name=$1
  phase_start=$SECONDS
  printf '\n==> [%4ds] %s\n' "$SECONDS" "$1" >&2
}

summary() {
  local rc=$?
  end_phase
  printf '\n==> [%4ds] %s; time per phase:\n' "$SECONDS" "$( ((rc == 0)) && echo done || echo "failed ($rc)")" >&2
  printf '%s\n' "${phases[@]}" >&2
}
trap summary EXIT

# Cargo's progress bar (units built / total, the crates in progress) is drawn on one line
# with carriage returns; this turns it into plain lines: each `Compiling` line gets the
# elapsed time and the count, and 30 s without such a line get one saying what is building.
cargo_progress() {
  local chunk pending="" status bar line count="" doing="" printed=$SECONDS
  while true; do
    status=0
    IFS= read -r -t 30 -d $'\r' chunk || status=$?
    if ((status > 128)); then
      pending+=$chunk
      chunk=""
    else
      chunk=$pending$chunk
      pending=""
    fi
    bar=${chunk##*$'\n'}
    if [[ $chunk == *$'\n'* ]]; then chunk=${chunk%$'\n'*}; else chunk=""; fi
    if [[ -n $bar && $bar != *"Building ["* ]]; then
      chunk+=${chunk:+$'\n'}$bar
      bar=""
    fi
    if [[ $bar =~ \]\ ([0-9]+/[0-9]+):\ (.*[^ ]) ]]; then
      count=${BASH_REMATCH[1]}
      doing=${BASH_REMATCH[2]}
    fi
    if [[ -n $chunk ]]; then
      while IFS= read -r line; do
        if [[ $line == *"Compiling "* ]]; then
          printf '%s  [%ds%s]\n' "$line" "$SECONDS" "${count:+, $count}"
        else
          printf '%s\n' "$line"
        fi
      done <<<"$chunk"
      printed=$SECONDS
    elif [[ -n $count ]] && ((SECONDS - printed >= 30)); then
      printf '    Building %s: %s  [%ds]\n' "$count" "$doing" "$SECONDS"
      printed=$SECONDS
    fi
    ((status == 0 || status > 128)) || break
  done
}

# Cargo with its progress shown as lines, whatever stderr is (cargo's status if it fails).
cargo_shown() {
  { CARGO_TERM_PROGRESS_WHEN=always CARGO_TERM_PROGRESS_WIDTH=160 cargo "$@" 2>&1 1>&3 3>&- |
    cargo_progress >&2; } 3>&1
}

phase "Debian packages"
need=()
# Graph texts are measured for DejaVu Sans (rondo::render::scene::text_width); the viewer
# tests check in Chromium that they fit their shapes.
fc-list 2>/dev/null | grep -q "DejaVu Sans" || need+=(fonts-dejavu-core)
# The viewer tests (tests/viewer.rs) run the page in a headless Chromium.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
# The unprivileged pass of the hostile-tool tests reads cargo's JSON messages.
command -v jq >/dev/null 2>&1 || need+=(jq)
# Iter's demo runs its default build command, `go build ./... && go test ./...`.
command -v go >/dev/null 2>&1 || need+=(golang-go)
# scripts/long-functions.py, the first check below, is Python.
command -v python3 >/dev/null 2>&1 || need+=(python3)
# Local tool installs run pip offline against Debian's wheelhouse; setuptools < 70
# needs the `wheel` wheel there to build a tool.
compgen -G "/usr/share/python-wheels/wheel-*.whl" >/dev/null || need+=(python3-wheel-whl)
# The Swarm phase's nodes pull from a local registry.
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
if ((${#need[@]})); then
  echo "installing ${need[*]}" >&2
  bash scripts/apt-install.sh "${need[@]}"
else
  echo "all present" >&2
fi

# Issue 23: no function in src/ over 100 lines without a sentence saying why. Before any
# build: it reads the sources only.
phase "long functions (scripts/long-functions.py src)"
python3 scripts/long-functions.py src

# The Docker tests need the local base image (no registry is reachable).
phase "Docker test image"
bash scripts/build-test-image.sh

export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
phase "build (cargo build --workspace)"
cargo_shown build --workspace
phase "test build (cargo test --workspace --no-run)"
cargo_shown test --workspace --no-run
phase "tests (cargo test --workspace)"
cargo test --workspace

# The hostile-tool suites once more as an ordinary user (uid 65534, no groups). Run as root
# above, each of their tests already starts `rondo` as that user too; here the tests
# themselves are that user, so the sandbox's unprivileged paths (a user namespace,
# RLIMIT_NPROC) run in-process as well (crates/rondo-env/tests/confined.rs). Docker stays
# out: an ordinary user cannot reach the engine.
unprivileged_tests() {
  local home pkg_test pkg test dir exe
  home=$(mktemp -d "${TMPDIR:-/tmp}/rondo-nobody.XXXXXX")
  chmod 755 "$home"
  chown 65534:65534 "$home"
  for pkg_test in rondo-env:confined rondo:hostile_local rondo:secrets_forms rondo:run_secrets; do
    pkg=${pkg_test%%:*}
    test=${pkg_test#*:}
    # Cargo runs a test in its package's folder, with its CARGO_* variables: so do we.
    IFS=$'\t' read -r dir exe < <(cargo test -p "$pkg" --test "$test" --no-run --message-format=json 2>/dev/null |
      jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
             | "\(.manifest_path | sub("/Cargo.toml$"; ""))\t\(.executable)"')
    echo "--- $test as uid 65534" >&2
    (cd "$dir" && setpriv --reuid=65534 --regid=65534 --clear-groups \
      env HOME="$home" TMPDIR="$home" RONDO_TEST_SKIP=docker \
      CARGO_MANIFEST_DIR="$dir" CARGO_PKG_NAME="$pkg" "$exe")
  done
  rm -rf "$home"
}
if ((EUID == 0)); then
  phase "hostile-tool tests as uid 65534"
  unprivileged_tests
fi
# The `test` blocks inside the five reference workflows.
phase "workflow tests (rondo test workflows/*.rondo)"
"${CARGO_TARGET_DIR:-target}/debug/rondo" test workflows/*.rondo
# Sandboxes placed by Docker Swarm: three throwaway dockerd nodes on this machine, the
# Swarm tests of rondo-env and 12-case eval and swebench batches with a node stopped
# mid-batch (docs/scale.md). Starting daemons needs root.
if ((EUID == 0)); then
  phase "Docker Swarm (scripts/swarm-test.sh)"
  bash scripts/swarm-test.sh
fi
