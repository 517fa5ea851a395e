#!/usr/bin/env bash
# Installs Debian's PgBouncer for the tests that run the client, the workers, the CLI and the
# dashboard through a transaction pooler (tests/pgbouncer). The tests start their own pgbouncer
# process on a free loopback port in a temp dir; the package's own service is not used (and on a
# machine without systemd it is not started).
# Idempotent and quiet: does nothing when /usr/sbin/pgbouncer is there; installs with apt-get only
# when it is available and we are root. Otherwise it prints what is missing and exits 0 (the
# PgBouncer tests then report it: skipped, or failed under CI=true).
set -euo pipefail

[ -x /usr/sbin/pgbouncer ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "pgbouncer-deps: installing pgbouncer with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  # update only when the package lists do not know the package yet
  if ! apt-cache show pgbouncer >/dev/null 2>&1; then
    apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  fi
  apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 pgbouncer \
    >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
else
  echo "pgbouncer-deps: missing pgbouncer (install it with apt-get as root for tests/pgbouncer)" >&2
fi
