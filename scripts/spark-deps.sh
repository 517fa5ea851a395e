#!/usr/bin/env bash
# Installs what the Spark parts of pyspark-sql need outside Python: a Java
# runtime (17+) and the JDBC drivers from Debian's packages
#   libpostgresql-jdbc-java  -> /usr/share/java/postgresql.jar
#   libmariadb-java          -> /usr/share/java/mariadb-java-client.jar
# Idempotent and quiet: does nothing when they are there; installs with
# apt-get only when it is available and we are root. Otherwise it prints what
# is missing and exits 0 (the Spark tests then report it: skipped, or failed
# under CI=true). The pip side (the `spark` extra) is the Makefile's job.
set -euo pipefail

# where Debian's packages put the jars (PYQUEUE_JDBC_DIR: another place, for the tests)
jars=${PYQUEUE_JDBC_DIR:-/usr/share/java}
missing=()
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
[ -e "$jars/postgresql.jar" ] || missing+=(libpostgresql-jdbc-java)
[ -e "$jars/mariadb-java-client.jar" ] || missing+=(libmariadb-java)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "spark-deps: installing ${missing[*]} with apt-get (the JDBC drivers Spark reads and writes the queue with)" >&2
  export DEBIAN_FRONTEND=noninteractive
  # update only when the package lists do not know a package yet
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  fi
  apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" \
    >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
else
  echo "spark-deps: missing ${missing[*]} (install them with apt-get as root for the Spark tests)" >&2
fi
