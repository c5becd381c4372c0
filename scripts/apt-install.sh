#!/usr/bin/env bash
# Install Debian packages: `apt-get update`, then `apt-get install PACKAGE...`.
# Another apt or dpkg at work (unattended upgrades, a second build) holds their locks for a
# while: each step waits for them up to APT_LOCK_WAIT seconds (default 300). A step that
# fails otherwise (a download) is tried once more.
set -euo pipefail
(($#)) || exit 0

wait_s="${APT_LOCK_WAIT:-300}"
if [[ $(id -u) -ne 0 ]]; then sudo=(sudo); else sudo=(); fi
export DEBIAN_FRONTEND=noninteractive

# apt-get waits for the dpkg lock itself (DPkg::Lock::Timeout); `update` gives up at once
# on the package lists' lock, so a lock error is retried here until the deadline.
apt_get() {
  local deadline=$((SECONDS + wait_s)) retried=0 err
  err=$(mktemp)
  while true; do
    if "${sudo[@]}" apt-get -q -o DPkg::Lock::Timeout="$wait_s" "$@" 2>"$err"; then
      cat "$err" >&2
      rm -f "$err"
      return 0
    fi
    cat "$err" >&2
    if grep -q "Could not get lock\|Unable to lock\|Unable to acquire" "$err" &&
      ((SECONDS < deadline)); then
      echo "apt-get $1: another apt holds its lock; waiting ($((deadline - SECONDS)) s left)" >&2
      sleep 5
    elif ((retried == 0)); then
      retried=1
      echo "apt-get $1 failed; trying once more" >&2
    else
      rm -f "$err"
      return 1
    fi
  done
}

apt_get update
apt_get install -y "$@"
