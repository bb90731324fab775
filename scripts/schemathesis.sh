#!/usr/bin/env bash
# Tests the admin API against its own OpenAPI document with schemathesis: builds the gateway,
# starts it on SQLite on a free port with an admin token made here, stores a few events (which
# become dead letters), runs every schemathesis check against
# /admin/v1/openapi.json, stops the gateway, and exits non-zero on any failure.
#
#   bash scripts/schemathesis.sh
#
# Environment: SCHEMATHESIS_MAX_EXAMPLES (default 100 per operation and phase),
# SCHEMATHESIS_SEED (default fixed, so a CI run is reproducible; "random" for a new one).
# Needs python3 (its venv module is installed with apt-get when missing) and cargo, not curl;
# installs schemathesis from PyPI into target/schemathesis-venv on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

ST_VERSION=4.32.5
VENV=target/schemathesis-venv
MAX_EXAMPLES=${SCHEMATHESIS_MAX_EXAMPLES:-100}
SEED=${SCHEMATHESIS_SEED:-20261206}
started=$SECONDS

log() { echo "schemathesis.sh: $*" >&2; }

# --- schemathesis, pinned, in a virtualenv under target/ ---------------------------------
if [ "$("$VENV/bin/schemathesis" --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -n 1)" != "$ST_VERSION" ]; then
  log "installing schemathesis $ST_VERSION into $VENV"
  rm -rf "$VENV"
  mkdir -p target
  if ! python3 -m venv "$VENV" 2>/dev/null; then
    log "python3 -m venv failed; installing python3-venv"
    rm -rf "$VENV"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$ST_VERSION"
fi

# --- the gateway ---------------------------------------------------------------------------
cargo build --quiet --bin hookgate
work=$(mktemp -d)
gateway_pid=
stop() {
  if [ -n "$gateway_pid" ] && kill -0 "$gateway_pid" 2>/dev/null; then
    kill "$gateway_pid" 2>/dev/null || true
    wait "$gateway_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap stop EXIT

read -r port dead_port token digest < <(python3 - <<'EOF'
import hashlib, secrets, socket
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
token = "hg_st_" + secrets.token_hex(24)
print(free_port(), free_port(), token, hashlib.sha256(token.encode()).hexdigest())
EOF
)
base="http://127.0.0.1:$port"
cat >"$work/hookgate.toml" <<EOF
[server]
listen = "127.0.0.1:$port"

[database]
url = "sqlite://$work/hookgate.db"

[worker]
poll_interval = "100ms"

# schemathesis sends many requests with wrong tokens (its auth checks) from this one address;
# the limit on failed authentications would then answer 429 to its valid requests too.
[admin]
auth_failure_burst = 1000000

[[admin.tokens]]
tenant = "acme"
token_sha256 = "$digest"

# Nothing listens there: deliveries fail, and after one retry the jobs are dead letters.
[[destinations]]
name = "billing"
url = "http://127.0.0.1:$dead_port/hook"
signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
retry_schedule = ["1s"]
timeout = "1s"

[[sources]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_schemathesis_stripe_secret"]
tenant = "acme"
destinations = ["billing"]

# Reconciled against an API that refuses connections: each run is recorded with its error.
[sources.reconcile]
api_key = "sk_test_schemathesis"
api_base = "http://127.0.0.1:9"
timeout = "1s"
EOF

# GET with an optional bearer token; fails on a non-2xx answer (no curl on a fresh machine).
http_get() {
  python3 - "$@" <<'PY'
import sys, urllib.request
request = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    request.add_header("Authorization", "Bearer " + sys.argv[2])
with urllib.request.urlopen(request, timeout=10) as response:
    sys.stdout.buffer.write(response.read())
PY
}

log "starting the gateway on $base"
RUST_LOG=${RUST_LOG:-warn} target/debug/hookgate serve --config "$work/hookgate.toml" \
  >"$work/gateway.log" 2>&1 &
gateway_pid=$!
for _ in $(seq 1 120); do
  http_get "$base/readyz" >/dev/null 2>&1 && break
  kill -0 "$gateway_pid" 2>/dev/null || { cat "$work/gateway.log" >&2; log "the gateway exited"; exit 1; }
  sleep 0.5
done
http_get "$base/readyz" >/dev/null || { cat "$work/gateway.log" >&2; log "the gateway is not ready"; exit 1; }

# A few events, so that lists have items and links lead to real ones; they fail to deliver
# and become dead letters.
for event in invoice.paid invoice.payment_failed customer.created; do
  target/debug/hookgate send --config "$work/hookgate.toml" --source stripe --event "$event" \
    --url "$base" >/dev/null
done
admin_get() { http_get "$base/admin/v1/$1" "$token"; }
count() { python3 -c 'import json, sys; print(len(json.load(sys.stdin)["data"]))'; }
for _ in $(seq 1 60); do
  [ "$(admin_get dead-letters | count)" -ge 3 ] && break
  sleep 0.5
done
[ "$(admin_get dead-letters | count)" -ge 3 ] || { log "the events did not become dead letters"; exit 1; }

# Two requests with a wrong signature, which the quarantine keeps, so that its list has items.
for n in 1 2; do
  python3 - "$base/webhooks/stripe" "$n" <<'PY'
import sys, urllib.error, urllib.request
body = ('{"id":"evt_refused_%s","type":"invoice.paid"}' % sys.argv[2]).encode()
request = urllib.request.Request(sys.argv[1], data=body, method="POST")
request.add_header("Stripe-Signature", "t=1,v1=" + "00" * 32)
try:
    urllib.request.urlopen(request, timeout=10)
except urllib.error.HTTPError as e:
    assert e.code == 401, e.code
PY
done
for _ in $(seq 1 60); do
  [ "$(admin_get quarantine | count)" -ge 2 ] && break
  sleep 0.5
done
[ "$(admin_get quarantine | count)" -ge 2 ] || { log "the refused requests were not quarantined"; exit 1; }

# A cursor each list returned (after its first item), for the lists' `cursor` parameter.
next_cursor() { admin_get "$1?limit=1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["next_cursor"])'; }
events_cursor=$(next_cursor events)
dead_letters_cursor=$(next_cursor dead-letters)
undelivered_cursor=$(next_cursor undelivered)
quarantine_cursor=$(next_cursor quarantine)

# --- schemathesis ---------------------------------------------------------------------------
# The document itself needs the token too; it is fetched here, and the run goes to $base.
admin_get openapi.json >"$work/openapi.json"
seed_args=(--seed "$SEED")
[ "$SEED" = random ] && seed_args=()
mkdir -p target/schemathesis-report
status=0
# One worker: with two, Python 3.11's ast (which hypothesis uses to describe lambdas) can fail
# with "AST constructor recursion depth mismatch", an error of the tool, not of the API.
HOOKGATE_ST_TOKEN=$token HOOKGATE_ST_EVENTS_CURSOR=$events_cursor \
  HOOKGATE_ST_DEAD_LETTERS_CURSOR=$dead_letters_cursor \
  HOOKGATE_ST_UNDELIVERED_CURSOR=$undelivered_cursor \
  HOOKGATE_ST_QUARANTINE_CURSOR=$quarantine_cursor "$VENV/bin/schemathesis" --config-file scripts/schemathesis.toml --no-color \
  run "$work/openapi.json" --url "$base" \
  --max-examples "$MAX_EXAMPLES" \
  "${seed_args[@]}" \
  --workers 1 \
  --request-timeout 10 \
  --report junit --report-junit-path target/schemathesis-report/junit.xml \
  || status=$?

if [ "$status" -ne 0 ]; then
  log "gateway log (last 50 lines):"
  tail -n 50 "$work/gateway.log" >&2
fi
log "finished in $((SECONDS - started)) s with status $status"
exit "$status"
