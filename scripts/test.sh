#!/usr/bin/env bash
# The whole test suite, on a fresh machine of this project's kind with nothing installed by
# hand: PostgreSQL is started when it is installed and down (the harness also starts a
# throwaway cluster of its own when none answers), NATS (JetStream) and RabbitMQ are
# installed when missing and started when down (the broker destinations' tests publish to
# them, and start brokers of their own from the same packages to kill), Chromium and its WebDriver (Debian's
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

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_for_port() {
  for _ in $(seq 1 60); do
    port_open "$1" && return 0
    sleep 1
  done
  echo "test: nothing listens on port $1" >&2
  return 1
}

if ! command -v nats-server >/dev/null; then
  echo "test: installing nats-server"
  apt_install nats-server
fi
if ! port_open 4222; then
  echo "test: starting NATS with JetStream"
  as_root mkdir -p /var/lib/nats-server
  as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_for_port 4222
fi
if ! command -v rabbitmq-server >/dev/null; then
  echo "test: installing rabbitmq-server"
  apt_install rabbitmq-server
fi
if ! port_open 5672; then
  echo "test: starting RabbitMQ"
  as_root rabbitmq-server -detached
  wait_for_port 5672
fi

if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
  echo "test: installing chromium and chromium-driver"
  apt_install chromium chromium-driver
fi

exec cargo test --workspace "$@"
