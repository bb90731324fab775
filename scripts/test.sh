#!/usr/bin/env bash
# The whole test suite, on a fresh machine of this project's kind with nothing installed by
# hand: PostgreSQL is started when it is installed and down (the harness also starts a
# throwaway cluster of its own when none answers), Chromium and its WebDriver (Debian's
# packages) are installed for the console's browser test, then `cargo test --workspace` runs
# every test: the gateway's, and the tools' own (the chaos checker's and the benchmark
# suite's unit tests, which CI needs too; a plain `cargo test` at the root runs only the
# gateway's). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "${APT_UPDATED:-}" ]; then
    as_root apt-get update -qq
    APT_UPDATED=1
  fi
  as_root apt-get install -y -qq "$@" >/dev/null
}

if ! command -v pg_isready >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "test: installing postgresql"
  apt_install postgresql
fi
if command -v pg_isready >/dev/null && ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    echo "test: starting PostgreSQL"
    as_root pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main start || true
    for _ in $(seq 1 30); do
      pg_isready -h 127.0.0.1 -p 5432 -q && break
      sleep 1
    done
  fi
fi

if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
  echo "test: installing chromium and chromium-driver"
  apt_install chromium chromium-driver
fi

exec cargo test --workspace "$@"
