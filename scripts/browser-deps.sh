#!/usr/bin/env bash
# Installs what the dashboard's browser tests (tests/dashboard) need outside Python: Debian's
# headless-capable Chromium and its matching chromedriver
#   chromium         -> /usr/bin/chromium
#   chromium-driver  -> /usr/bin/chromedriver
# The tests pass both paths to Selenium, so nothing ever downloads a browser or a driver.
# Idempotent and quiet: does nothing when they are there; installs with apt-get only when it is
# available and we are root. Otherwise it prints what is missing and exits 0 (the browser tests
# then report it: skipped, or failed under CI=true).
set -euo pipefail

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "browser-deps: installing ${missing[*]} with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  # update only when the package lists do not know a package yet
  if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -qq >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  fi
  apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" \
    >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
else
  echo "browser-deps: missing ${missing[*]} (install them with apt-get as root for the dashboard tests)" >&2
fi
