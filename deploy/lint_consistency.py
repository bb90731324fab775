#!/usr/bin/env python3
"""Cross-file checks for deploy/ that no off-the-shelf linter makes.

Run by deploy/lint.sh (with PyYAML from its tool environment); exits 1 on any failure.
Checks that the Kubernetes manifests, the compose file, the systemd unit and the Dockerfile
agree with each other and with deploy/hookgate.toml: labels and selectors, probes,
securityContext, resources, grace periods longer than worker.shutdown_grace, the
migrate init container, every env:/file: secret of the config supplied everywhere, the
ConfigMap holding hookgate.toml verbatim, the build stage's Rust version and build inputs.
"""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
K8S = DEPLOY / "k8s"
SECRET_DIR = "/run/secrets/hookgate"
CONFIG_PATH = "/etc/hookgate/hookgate.toml"
UID = 10001

failures: list[str] = []
passed = 0


def check(cond: bool, what: str) -> None:
    global passed
    if cond:
        passed += 1
    else:
        failures.append(what)


def seconds(text: str) -> float:
    """The subset of humantime durations used in configs and manifests: 10s, 5m, 1h, 500ms."""
    total = 0.0
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    for num, unit in re.findall(r"(\d+)\s*([a-z]+)", text.strip()):
        if unit not in units:
            raise ValueError(f"unsupported duration unit in {text!r}")
        total += int(num) * units[unit]
    return total


def load_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


# --- the configuration ---------------------------------------------------------------------

toml_text = (DEPLOY / "hookgate.toml").read_text()
config = tomllib.loads(toml_text)
shutdown_grace = seconds(config.get("worker", {}).get("shutdown_grace", "10s"))
secret_refs = [s for src in config.get("sources", []) for s in src.get("secrets", [])]
secret_refs += [d["signing_secret"] for d in config.get("destinations", [])]
file_secrets = sorted({r[len("file:"):] for r in secret_refs if r.startswith("file:")})
env_secrets = sorted({r[len("env:"):] for r in secret_refs if r.startswith("env:")})
check(not [r for r in secret_refs if not r.startswith(("file:", "env:"))],
      "hookgate.toml: every secret is an env: or file: reference, not a literal")
for path in file_secrets:
    check(path.startswith(SECRET_DIR + "/"),
          f"hookgate.toml: file secret {path} lies under {SECRET_DIR}/")
check(config["database"]["url"].startswith(("postgres://", "postgresql://")),
      "hookgate.toml: database.url is a PostgreSQL URL")
check(":" not in config["database"]["url"].split("//", 1)[1].split("@", 1)[0],
      "hookgate.toml: database.url holds no password")
check(config["server"]["listen"].startswith("0.0.0.0:"),
      "hookgate.toml: server.listen binds all interfaces (a container needs it)")
port = int(config["server"]["listen"].rsplit(":", 1)[1])

# --- Kubernetes ----------------------------------------------------------------------------

docs = {p.name: load_docs(p) for p in sorted(K8S.glob("*.yaml"))}
objects = [(name, d) for name, ds in docs.items() for d in ds]
by_kind: dict[str, list[dict]] = {}
for _, d in objects:
    by_kind.setdefault(d["kind"], []).append(d)
secret_example = load_docs(K8S / "examples" / "secret.yaml")
check(not [d for d in by_kind.get("Secret", [])],
      "k8s/: no Secret in the applied directory (the template lives in k8s/examples/)")
check(len(secret_example) == 1 and secret_example[0]["kind"] == "Secret",
      "k8s/examples/secret.yaml: one Secret")
secret = secret_example[0]
secret_name = secret["metadata"]["name"]
secret_keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))

cms = by_kind.get("ConfigMap", [])
check(len(cms) == 1, "k8s: exactly one ConfigMap")
cm = cms[0]
check(cm["data"].get("hookgate.toml") == toml_text,
      "k8s/configmap.yaml: data.hookgate.toml is deploy/hookgate.toml byte for byte "
      "(fix: deploy/lint.sh --write-configmap)")


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


deployments = {d["metadata"]["name"]: d for d in by_kind.get("Deployment", [])}
check(set(deployments) == {"hookgate-api", "hookgate-worker"},
      "k8s: Deployments hookgate-api and hookgate-worker")
images = set()
for name, dep in deployments.items():
    role = name.removeprefix("hookgate-")
    spec = dep["spec"]
    tmpl = spec["template"]
    labels = tmpl["metadata"]["labels"]
    sel = spec["selector"]["matchLabels"]
    pod = tmpl["spec"]
    where = f"k8s Deployment {name}"
    check(matches(sel, labels), f"{where}: selector matches the pod template labels")
    check(sel.get("app.kubernetes.io/component") == role,
          f"{where}: selector has app.kubernetes.io/component={role}")
    check(spec.get("replicas", 1) >= 2, f"{where}: at least 2 replicas (the PDB needs them)")
    check(spec.get("strategy", {}).get("rollingUpdate", {}).get("maxUnavailable") == 0,
          f"{where}: rolling update keeps every old pod until a new one is ready")
    check(pod.get("automountServiceAccountToken") is False,
          f"{where}: no service account token mounted")
    psc = pod.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True and psc.get("runAsUser") == UID
          and psc.get("runAsGroup") == UID,
          f"{where}: pod runs as non-root UID/GID {UID}")
    check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
          f"{where}: RuntimeDefault seccomp profile")
    prestop = 0.0
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    inits = pod.get("initContainers", [])
    mains = pod.get("containers", [])
    check(len(mains) == 1, f"{where}: one container")
    check([c["name"] for c in inits] == ["migrate"], f"{where}: one init container, migrate")
    for c in inits + mains:
        cw = f"{where} container {c['name']}"
        images.add(c["image"])
        args = c.get("args", [])
        check(CONFIG_PATH in args, f"{cw}: --config {CONFIG_PATH}")
        res = c.get("resources", {})
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                check(r in res.get(kind, {}), f"{cw}: resources.{kind}.{r} set")
        sc = c.get("securityContext", {})
        check(sc.get("runAsNonRoot") is True, f"{cw}: runAsNonRoot")
        check(sc.get("readOnlyRootFilesystem") is True, f"{cw}: readOnlyRootFilesystem")
        check(sc.get("allowPrivilegeEscalation") is False, f"{cw}: no privilege escalation")
        check("ALL" in sc.get("capabilities", {}).get("drop", []), f"{cw}: drops ALL capabilities")
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        check(all(m.get("readOnly") for p, m in mounts.items() if p != "/tmp"),
              f"{cw}: config and secret mounts are read-only")
        cfg = mounts.get("/etc/hookgate")
        check(cfg is not None and volumes.get(cfg["name"], {}).get("configMap", {}).get("name")
              == cm["metadata"]["name"], f"{cw}: /etc/hookgate is the ConfigMap")
        sec = mounts.get(SECRET_DIR)
        svol = volumes.get(sec["name"], {}).get("secret", {}) if sec else {}
        check(svol.get("secretName") == secret_name, f"{cw}: {SECRET_DIR} is the Secret")
        items = {i["key"]: i["path"] for i in svol.get("items", [])}
        for item_key in items:
            check(item_key in secret_keys, f"{cw}: Secret item {item_key} is in the Secret template")
        for path in file_secrets:
            fname = path[len(SECRET_DIR) + 1:]
            check(fname in items.values() if items else fname in secret_keys,
                  f"{cw}: hookgate.toml's file:{path} is mounted from the Secret")
        env = {e["name"]: e for e in c.get("env", [])}
        for var in env_secrets + ["HOOKGATE__DATABASE__URL"]:
            ref = env.get(var, {}).get("valueFrom", {}).get("secretKeyRef", {})
            check(ref.get("name") == secret_name and ref.get("key") in secret_keys,
                  f"{cw}: env {var} comes from a key of Secret {secret_name}")
        if c in inits:
            check(args[:1] == ["migrate"], f"{cw}: runs `hookgate migrate`")
            continue
        check(args[:1] == ["serve"] and args[args.index("--role") + 1] == role,
              f"{cw}: runs `hookgate serve --role {role}`")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        check(ports.get("http") == port, f"{cw}: container port http is {port} (server.listen)")
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                            ("startupProbe", "/healthz")):
            get = c.get(probe, {}).get("httpGet", {})
            check(get.get("path") == path and get.get("port") in ("http", port),
                  f"{cw}: {probe} is GET {path} on the http port")
        cmd = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        if cmd[:1] == ["sleep"]:
            prestop = float(cmd[1])
    grace = pod.get("terminationGracePeriodSeconds", 30)
    check(grace > prestop + shutdown_grace,
          f"{where}: terminationGracePeriodSeconds {grace} > preStop {prestop:g}s "
          f"+ worker.shutdown_grace {shutdown_grace:g}s")
check(len(images) == 1, f"k8s: every container uses one image (found {sorted(images)})")

api_labels = deployments["hookgate-api"]["spec"]["template"]["metadata"]["labels"]
worker_labels = deployments["hookgate-worker"]["spec"]["template"]["metadata"]["labels"]
services = by_kind.get("Service", [])
check(len(services) == 1, "k8s: one Service")
for svc in services:
    sel = svc["spec"]["selector"]
    check(matches(sel, api_labels) and not matches(sel, worker_labels),
          f"k8s Service {svc['metadata']['name']}: selects the api pods and not the workers")
    check(all(p.get("targetPort") in ("http", port) for p in svc["spec"]["ports"]),
          f"k8s Service {svc['metadata']['name']}: targets the http port")
pdbs = by_kind.get("PodDisruptionBudget", [])
covered = []
for pdb in pdbs:
    sel = pdb["spec"]["selector"]["matchLabels"]
    hits = [n for n, d in deployments.items()
            if matches(sel, d["spec"]["template"]["metadata"]["labels"])]
    check(len(hits) == 1, f"k8s PDB {pdb['metadata']['name']}: selects exactly one Deployment")
    covered += hits
check(sorted(covered) == sorted(deployments), "k8s: a PodDisruptionBudget for each Deployment")

# --- docker compose ------------------------------------------------------------------------

compose_text = (DEPLOY / "docker-compose.yml").read_text()
compose = yaml.safe_load(compose_text)
hg = compose["services"]["hookgate"]
check(seconds(hg.get("stop_grace_period", "10s")) > shutdown_grace,
      "compose hookgate: stop_grace_period > worker.shutdown_grace")
check(hg.get("user") == f"{UID}:{UID}", f"compose hookgate: runs as {UID}:{UID}")
check(hg.get("read_only") is True, "compose hookgate: read-only root filesystem")
check("ALL" in hg.get("cap_drop", []), "compose hookgate: drops ALL capabilities")
check(any(v.get("source") == "./hookgate.toml" and v.get("target") == CONFIG_PATH
          for v in hg.get("volumes", []) if isinstance(v, dict)),
      f"compose hookgate: mounts ./hookgate.toml at {CONFIG_PATH}")
targets = {s["target"]: s["source"] for s in hg.get("secrets", []) if isinstance(s, dict)}
for path in file_secrets:
    check(path in targets and targets[path] in compose.get("secrets", {}),
          f"compose hookgate: hookgate.toml's file:{path} is a mounted secret")
for var in env_secrets + ["HOOKGATE__DATABASE__URL"]:
    check(var in hg.get("environment", {}), f"compose hookgate: environment sets {var}")
check(str(hg["environment"]["HOOKGATE__DATABASE__URL"]).startswith("postgres://")
      and "@postgres:5432/" in str(hg["environment"]["HOOKGATE__DATABASE__URL"]),
      "compose hookgate: the database URL points at the postgres service")
env_example = (DEPLOY / ".env.example").read_text()
documented = set(re.findall(r"^([A-Z0-9_]+)=", env_example, re.M))
for var in sorted(set(re.findall(r"\$\{([A-Z0-9_]+)", compose_text))):
    check(var in documented, f"compose: ${{{var}}} is documented in deploy/.env.example")
hc = hg.get("healthcheck", {}).get("test", [])
check(f"http://127.0.0.1:{port}/readyz" in hc, "compose hookgate: health check probes /readyz")

# --- systemd -------------------------------------------------------------------------------

unit = (DEPLOY / "hookgate.service").read_text()
stop = re.search(r"^TimeoutStopSec=(\S+)", unit, re.M)
check(stop is not None and seconds(stop.group(1) if not stop.group(1).isdigit()
                                   else stop.group(1) + "s") > shutdown_grace,
      "hookgate.service: TimeoutStopSec > worker.shutdown_grace")

# The SQLite checkpoint thread lowers its own priority (src/store/sqlite/checkpoints.rs:
# SCHED_IDLE through pthread_setschedparam, then a nice value): the system call filter, read
# in order as systemd merges it, must let those calls through or it silently runs at normal
# priority.
PRIORITY_SYSCALLS = {"sched_setscheduler", "setpriority"}


def syscall_groups() -> dict[str, list[str]]:
    proc = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"],
                          capture_output=True, text=True)
    groups: dict[str, list[str]] = {}
    current = None
    for line in proc.stdout.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    out: set[str] = set()
    for name in names:
        out |= expand(groups.get(name, []), groups) if name.startswith("@") else {name}
    return out


filters = re.findall(r"^SystemCallFilter=(.*)$", unit, re.M)
groups = syscall_groups()
check("@resources" in groups, "systemd-analyze syscall-filter lists the system call groups")
# The first assignment decides: an allow list (later ~ lines remove, others add) or a deny
# list (later ~ lines add to it, others remove from it).
listed: set[str] = set()
allow_list = bool(filters) and not filters[0].startswith("~")
for value in filters:
    names = expand(value.lstrip("~").split(), groups)
    adds = value.startswith("~") != allow_list
    listed = listed | names if adds else listed - names
for call in sorted(PRIORITY_SYSCALLS):
    check((call in listed) == allow_list, f"hookgate.service: SystemCallFilter allows {call} "
          "(the checkpoint thread's SCHED_IDLE and nice)")

# --- Dockerfile ----------------------------------------------------------------------------

dockerfile = (DEPLOY / "Dockerfile").read_text()
check(re.search(rf"^USER {UID}:{UID}$", dockerfile, re.M) is not None,
      f"Dockerfile: USER {UID}:{UID} (numeric, so runAsNonRoot can verify it)")
check(re.search(r"^HEALTHCHECK ", dockerfile, re.M) is not None, "Dockerfile: has a HEALTHCHECK")
check(f"127.0.0.1:{port}/healthz" in dockerfile and f"EXPOSE {port}" in dockerfile
      and f"HOOKGATE__SERVER__LISTEN=0.0.0.0:{port}" in dockerfile,
      f"Dockerfile: listen address, EXPOSE and HEALTHCHECK agree on port {port}")
check("--bin hookgate" in dockerfile and "--locked" in dockerfile,
      "Dockerfile: builds only `--bin hookgate`, --locked")

# Build inputs: every path the build stage copies exists and passes the .dockerignore
# allow-list, and every file the crate embeds at compile time lies under a copied path.
copied = []
for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile, re.M):
    copied += line.split()[:-1]
ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
allowed = {p[1:].rstrip("/") for p in ignore if p.startswith("!")}
for path in copied:
    check((ROOT / path).exists(), f"Dockerfile: COPY {path} exists in the repository")
    check(path.rstrip("/") in allowed, f"Dockerfile.dockerignore: allows {path}")
embedded = {Path("build.rs")}
for src in (ROOT / "src").rglob("*.rs"):
    text = src.read_text()
    here = src.parent.relative_to(ROOT)
    for rel in re.findall(r'include_(?:str|bytes)!\(\s*"([^"]+)"', text):
        embedded.add(Path(os.path.normpath(here / rel)))
    for rel in re.findall(r'migrate!\(\s*"([^"]+)"', text):
        embedded.add(Path(os.path.normpath(rel)))
for rel in sorted(embedded):
    check(any(rel == Path(c.rstrip("/")) or Path(c.rstrip("/")) in rel.parents for c in copied),
          f"Dockerfile: compile-time input {rel} is copied into the build stage")

# cargo loads every workspace member's manifest and targets, even to build only `--bin hookgate`,
# so the members (tools/) must be in the build stage too.
members = re.search(r"^\[workspace\][^\[]*?^members\s*=\s*\[([^\]]*)\]",
                    (ROOT / "Cargo.toml").read_text(), re.M | re.S)
for member in re.findall(r'"([^"]+)"', members.group(1) if members else ""):
    check(any(Path(member) == Path(c.rstrip("/")) or Path(c.rstrip("/")) in Path(member).parents
              for c in copied),
          f"Dockerfile: workspace member {member} is copied into the build stage")

# The builder image's Rust must be new enough for every crate `cargo build --bin hookgate`
# compiles (normal and build dependencies in Cargo.lock).
rust_arg = re.search(r"^ARG RUST_VERSION=(\d+)\.(\d+)", dockerfile, re.M)
check(rust_arg is not None, "Dockerfile: ARG RUST_VERSION=MAJOR.MINOR")
meta = None
for offline in (["--offline"], []):
    proc = subprocess.run(["cargo", "metadata", "--format-version", "1", "--locked", *offline],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode == 0:
        meta = json.loads(proc.stdout)
        break
check(meta is not None, "Cargo.lock is current (`cargo metadata --locked`; the image builds "
      f"with --locked): {proc.stderr.strip()[-300:]}")
need = None
if meta is not None:
    pkgs = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root_id = next(i for i, p in pkgs.items() if p["name"] == "hookgate" and p["source"] is None)
    seen, todo = set(), [root_id]
    while todo:
        node = nodes[todo.pop()]
        for dep in node["deps"]:
            if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]) and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    need = max((tuple(int(x) for x in (pkgs[i].get("rust_version") or "0").split(".")[:2]),
                pkgs[i]["name"]) for i in seen | {root_id})
if need:
    print(f"Cargo.lock: hookgate's build dependencies need Rust >= {need[0][0]}.{need[0][1]} ({need[1]})")
if rust_arg and need:
    have = (int(rust_arg.group(1)), int(rust_arg.group(2)))
    check(have >= need[0], f"Dockerfile: RUST_VERSION {have[0]}.{have[1]} >= {need[0][0]}.{need[0][1]}, "
          f"the newest rust-version among hookgate's build dependencies ({need[1]})")

# --- report --------------------------------------------------------------------------------

for f in failures:
    print(f"FAIL {f}")
print(f"consistency: {passed} checks passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
