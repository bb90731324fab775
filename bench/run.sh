#!/usr/bin/env bash
# The benchmark suite (tools/bench, crate hookgate-bench), in one command. Builds the gateway and the bench in release mode, runs
# every scenario against a throwaway PostgreSQL cluster of its own (configured for
# production, see bench/README.md; --pg URL for an existing server) and SQLite, then writes
# the results:
#
#   bash bench/run.sh           full run: bench/results/latest.json and bench/RESULTS.md
#   bash bench/run.sh --quick   every scenario, short and small (a smoke check, a few minutes):
#                               bench/results/quick.json and bench/results/quick.md
#
# Further arguments go to `hookgate-bench all` (e.g. --pg URL, --pool N, --seconds N);
# see bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v pgbench >/dev/null || {
  echo "run.sh: pgbench is needed for the PostgreSQL ceiling (apt-get install postgresql-client)" >&2
  exit 1
}

cargo build --release --bin hookgate
cargo build --release -p hookgate-bench
target="${CARGO_TARGET_DIR:-target}/release"
exec "$target/hookgate-bench" all --hookgate "$target/hookgate" "$@"
