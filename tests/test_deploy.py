"""The deployment examples under deploy/ parse, hang together, and only set
variables the saver (and its archive's object store) reads; the example app
compiles and runs. No container is run: the files are read."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import pkgutil
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

import langgraph_durable
import langgraph_durable.archive.store_async
from langgraph_durable import DurableSaver, Tiers
from langgraph_durable.archive import parse_archive_url
from langgraph_durable.environment import ENV_ARCHIVE_URL
from langgraph_durable.model.backlog import WRITE_MODES
from langgraph_durable.saver import ENV_SQLITE

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
STATEFULSET = DEPLOY / "kubernetes" / "statefulset.yaml"
README = DEPLOY / "README.md"
APP = DEPLOY / "app.py"
PREFIX = "LANGGRAPH_DURABLE_"
AWS = "AWS_"
# URLs that cannot carry a password, so a ConfigMap may hold them: the
# archive's is s3://BUCKET/PREFIX (credentials come from AWS_*), and the
# object store's endpoint is a plain address.
CREDENTIAL_FREE_URLS = {ENV_ARCHIVE_URL, "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"}


# -- what the saver reads ---------------------------------------------------------


def saver_env_names() -> set[str]:
    """Every module-level ``ENV_*`` string constant of the package."""
    names: set[str] = set()
    for info in pkgutil.walk_packages(langgraph_durable.__path__, langgraph_durable.__name__ + "."):
        if info.name.endswith(".__main__"):  # runs the command line when imported
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency is missing: read the source instead
            names |= _env_constants_in_source(info.name)
            continue
        for attr, value in vars(module).items():
            if attr.startswith("ENV_") and isinstance(value, str):
                names.add(value)
    return names


def _env_constants_in_source(module_name: str) -> set[str]:
    spec = importlib.util.find_spec(module_name)
    assert spec and spec.origin
    tree = ast.parse(Path(spec.origin).read_text())
    found = set()
    for stmt in tree.body:
        targets = (
            stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        )
        value = getattr(stmt, "value", None)
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found |= {value.value for t in targets if isinstance(t, ast.Name) and t.id.startswith("ENV_")}
    return found


def test_saver_env_names_come_from_the_code() -> None:
    names = saver_env_names()
    assert {ENV_SQLITE, ENV_ARCHIVE_URL} <= names
    assert all(n.startswith(PREFIX) for n in names), names


def archive_env_names() -> set[str]:
    """The ``AWS_*`` variables the archive's object store names: those it
    reads itself (endpoint, region) and those it leaves to its S3 client
    (credentials), as its source names them."""
    source = Path(langgraph_durable.archive.store_async.__file__).read_text()
    return set(re.findall(r"\bAWS_[A-Z0-9_]*[A-Z0-9]\b", source))


def test_archive_env_names_come_from_the_code() -> None:
    names = archive_env_names()
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL"} <= names, names


# -- loading the files -------------------------------------------------------------


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def load_k8s() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(STATEFULSET.read_text()) if d]


def k8s_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in load_k8s() if d["kind"] == kind]


def statefulset() -> dict[str, Any]:
    (sts,) = k8s_kind("StatefulSet")
    return sts


def agent_container() -> dict[str, Any]:
    (container,) = statefulset()["spec"]["template"]["spec"]["containers"]
    return container


def compose_env(service: str) -> dict[str, str]:
    env = load_compose()["services"][service].get("environment", {})
    if isinstance(env, list):  # the `- NAME=value` spelling
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


SUBST = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: str, given: dict[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?message}``,
    with `given` standing for the .env file."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        if name in given:
            return given[name]
        if op.endswith("-"):
            return arg
        if op.endswith("?"):
            raise AssertionError(f"${{{name}}} is required: {arg}")
        return ""

    return SUBST.sub(one, value)


def dot_env() -> dict[str, str]:
    """A filled-in .env: every name .env.example lists, blanks given a value
    (long enough for a signing key, URL-safe for a password)."""
    return {name: value or f"example-{name.lower().replace('_', '-')}" for name, value in env_example().items()}


def compose_values(service: str) -> dict[str, str]:
    """A service's environment as the container gets it, from `dot_env`."""
    given = dot_env()
    return {k: interpolate(v, given) for k, v in compose_env(service).items()}


def compose_words(value: str | list[Any] | None) -> list[str]:
    """A compose command / entrypoint / healthcheck test as words."""
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(w) for w in value]


def compose_mounts(service: str) -> dict[str, str]:
    """Mount target -> source of a service's volumes."""
    mounts = {}
    for volume in load_compose()["services"][service].get("volumes", []):
        source, target = volume.split(":")[:2] if isinstance(volume, str) else (volume["source"], volume["target"])
        mounts[target] = source
    return mounts


def services_of_image(image: str) -> list[str]:
    """The compose services running `image` (any tag)."""
    services = load_compose()["services"]
    return [name for name, svc in services.items() if str(svc.get("image", "")).partition(":")[0] == image]


def k8s_env_names() -> set[str]:
    """Names the manifest sets: container env, and every ConfigMap / Secret key."""
    names = {e["name"] for e in agent_container().get("env", [])}
    for doc in load_k8s():
        if doc["kind"] in ("ConfigMap", "Secret"):
            names |= set(doc.get("data") or {}) | set(doc.get("stringData") or {})
    for source in agent_container().get("envFrom", []):
        assert "prefix" not in source, "an envFrom prefix hides which names are set"
    return names


def k8s_env_value(name: str) -> str:
    """A variable's value in the manifest, following configMapKeyRef."""
    (entry,) = [e for e in agent_container()["env"] if e["name"] == name]
    if "value" in entry:
        return str(entry["value"])
    ref = entry["valueFrom"]["configMapKeyRef"]
    (config_map,) = [d for d in k8s_kind("ConfigMap") if d["metadata"]["name"] == ref["name"]]
    return str(config_map["data"][ref["key"]])


def k8s_secret_refs() -> list[dict[str, Any]]:
    """The container's ``secretKeyRef`` entries."""
    env = agent_container().get("env", [])
    return [e["valueFrom"]["secretKeyRef"] for e in env if "secretKeyRef" in e.get("valueFrom", {})]


def created_secret_keys(text: str) -> dict[str, set[str]]:
    """Secret name -> the keys the ``kubectl create secret generic`` commands
    in `text` (a shell block, or comment lines) give it."""
    lines = [line.lstrip("#").strip() for line in text.splitlines()]
    joined = " ".join(line.removesuffix("\\").strip() for line in lines)
    found: dict[str, set[str]] = {}
    for m in re.finditer(r"kubectl create secret generic (\S+)((?:\s+--from-literal=\w+=\S*)+)", joined):
        found.setdefault(m.group(1), set()).update(re.findall(r"--from-literal=(\w+)=", m.group(2)))
    return found


def env_example() -> dict[str, str]:
    """The names the .env example sets, commented-out ones included."""
    out = {}
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        m = re.match(r"#?\s*([A-Z][A-Z0-9_]*)=(.*)", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


# -- the drain budget, read from app.py ----------------------------------------------


def app_tree() -> ast.Module:
    return ast.parse(APP.read_text(), filename=str(APP))


def _constant(tree: ast.Module, node: ast.expr) -> float:
    if isinstance(node, ast.Name):
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets):
                return _constant(tree, stmt.value)
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == node.id:
                assert stmt.value is not None
                return _constant(tree, stmt.value)
    value = ast.literal_eval(node)
    assert isinstance(value, (int, float)), ast.dump(node)
    return float(value)


def _calls(tree: ast.Module, name: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if called == name:
                yield node


def drain_budget(archive: bool = False) -> float:
    """Seconds app.py may spend draining after SIGTERM: the handler's timeout,
    then (SystemExit leaves the ``with`` block) close()'s drain_timeout, and
    with an `archive` as long again for close() to ship to it."""
    tree = app_tree()
    (handler,) = _calls(tree, "drain_on_sigterm")
    timeouts = [k.value for k in handler.keywords if k.arg == "timeout"]
    sigterm = _constant(tree, timeouts[0]) if timeouts else 20.0
    close = Tiers().drain_timeout
    for call in _calls(tree, "from_env"):
        for k in call.keywords:
            if k.arg == "drain_timeout":
                close = _constant(tree, k.value)
    return sigterm + close * (2 if archive else 1)


def seconds(duration: str | int | float) -> float:
    """A compose duration: 45s, 1m30s, 500ms."""
    if isinstance(duration, (int, float)):
        return float(duration)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
    return sum(float(n) * scale[u] for n, u in parts)


# -- both files: variables ------------------------------------------------------------


def test_every_saver_variable_the_files_set_is_read_by_the_saver() -> None:
    known = saver_env_names()
    for where, names in (
        ("docker-compose.yml agent", set(compose_env("agent"))),
        ("kubernetes/statefulset.yaml", k8s_env_names()),
        (".env.example", set(env_example())),
    ):
        unknown = {n for n in names if n.startswith(PREFIX)} - known
        assert not unknown, f"{where} sets {sorted(unknown)}, which the saver does not read (it reads {sorted(known)})"
    # ... and the ones a deployment needs are there.
    needed = {"LANGGRAPH_DURABLE_SQLITE", "LANGGRAPH_DURABLE_REDIS_URL", "LANGGRAPH_DURABLE_POSTGRES_URL"}
    needed |= {"LANGGRAPH_DURABLE_SIGNING_KEY", ENV_ARCHIVE_URL}
    assert needed <= set(compose_env("agent"))
    assert needed <= k8s_env_names()


def test_the_aws_variables_are_the_archive_stores_and_the_same_in_both_files() -> None:
    known = archive_env_names()
    compose = {n for n in compose_env("agent") if n.startswith(AWS)}
    k8s = {e["name"] for e in agent_container()["env"] if e["name"].startswith(AWS)}
    for where, names in (("docker-compose.yml agent", compose), ("kubernetes/statefulset.yaml", k8s)):
        unknown = names - known
        assert not unknown, f"{where} sets {sorted(unknown)}, which the archive store does not read ({sorted(known)})"
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} <= names, f"{where}: {sorted(names)}"
    assert compose == k8s, f"compose sets {sorted(compose)}, the StatefulSet {sorted(k8s)}"
    # The archive is the agent's alone: no other service is handed the saver's settings.
    for service in load_compose()["services"]:
        if service != "agent":
            assert not {n for n in compose_env(service) if n.startswith((PREFIX, AWS))}, service


def test_both_files_name_an_archive_the_saver_accepts() -> None:
    for where, url in (
        ("docker-compose.yml", compose_values("agent")[ENV_ARCHIVE_URL]),
        ("kubernetes/statefulset.yaml", k8s_env_value(ENV_ARCHIVE_URL)),
    ):
        bucket, _ = parse_archive_url(url)
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket), f"{where}: {bucket!r} is no S3 bucket name"


def test_secrets_are_never_literal() -> None:
    secretish = re.compile(r"KEY|PASSWORD|SECRET|TOKEN")
    for service in load_compose()["services"]:
        for name, value in compose_env(service).items():
            if secretish.search(name):
                assert re.fullmatch(r"\$\{\w+:\?[^}]*\}", value), f"{service}: {name} must be ${{{name}:?...}}"
    assert "${LANGGRAPH_DURABLE_SIGNING_KEY:?" in compose_env("agent")["LANGGRAPH_DURABLE_SIGNING_KEY"]
    assert "${POSTGRES_PASSWORD:?" in compose_env("agent")["LANGGRAPH_DURABLE_POSTGRES_URL"]
    for entry in agent_container()["env"]:
        name = entry["name"]
        if secretish.search(name) or (name.endswith("_URL") and name not in CREDENTIAL_FREE_URLS):
            assert "secretKeyRef" in entry.get("valueFrom", {}), f"{name} must come from a Secret"
        elif name in CREDENTIAL_FREE_URLS:
            assert "value" not in entry, f"{name}: from the ConfigMap or a Secret, not written in the StatefulSet"
    for config_map in k8s_kind("ConfigMap"):
        for name in CREDENTIAL_FREE_URLS & set(config_map.get("data") or {}):
            assert not urlsplit(config_map["data"][name]).username, f"{name} in a ConfigMap must hold no credentials"
    assert not k8s_kind("Secret"), "the Secret is created out of band, not committed with values"
    assert all(v == "" for k, v in env_example().items() if secretish.search(k))


def test_the_saver_accepts_what_compose_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = compose_values("agent")
    for name in saver_env_names() | {n for n in os.environ if n.startswith(AWS)}:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # The file's own path is the container's; nothing connects until first use.
    saver = DurableSaver.from_env(sqlite=str(tmp_path / "c.sqlite"), tiers=Tiers(drain_timeout=0))
    try:
        assert saver.redis_url == env["LANGGRAPH_DURABLE_REDIS_URL"]
        assert saver.postgres_url == env["LANGGRAPH_DURABLE_POSTGRES_URL"]
        assert saver.write == env["LANGGRAPH_DURABLE_WRITE"]
        assert saver.archive_url == env[ENV_ARCHIVE_URL]
    finally:
        saver.close()
    assert k8s_env_value("LANGGRAPH_DURABLE_WRITE") in WRITE_MODES


# -- docker-compose.yml ---------------------------------------------------------------


def test_compose_services_volume_and_health() -> None:
    compose = load_compose()
    services = compose["services"]
    assert {"agent", "redis", "postgres"} <= set(services)
    agent = services["agent"]

    # The local tier on a named volume, mounted at the SQLite file's directory.
    sqlite_dir = os.path.dirname(compose_env("agent")["LANGGRAPH_DURABLE_SQLITE"])
    mounts = compose_mounts("agent")
    assert sqlite_dir in mounts, f"nothing mounted at {sqlite_dir}"
    assert mounts[sqlite_dir] in (compose.get("volumes") or {}), "the SQLite directory must be a named volume"

    # Redis: AOF on, fsynced every second.
    joined = " ".join(compose_words(services["redis"]["command"]))
    assert "--appendonly yes" in joined
    assert "--appendfsync everysec" in joined

    # Postgres 15 or newer, with a healthcheck.
    tag = services["postgres"]["image"].rpartition(":")[2]
    assert re.match(r"\d+", tag) and int(re.match(r"\d+", tag).group()) >= 15, tag
    for name in ("redis", "postgres"):
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert agent["depends_on"][name]["condition"] == "service_healthy"


def test_compose_archive_is_minio_on_the_compose_network(monkeypatch: pytest.MonkeyPatch) -> None:
    compose = load_compose()
    services = compose["services"]
    (minio,) = services_of_image("minio/minio")
    server = services[minio]
    env = compose_values("agent")

    # MinIO: the server on a named volume, its console on :9001, a healthcheck.
    words = compose_words(server.get("entrypoint")) + compose_words(server["command"])
    assert words[words.index("server") + 1] == "/data", words
    assert words[words.index("--console-address") + 1] == ":9001", words
    assert compose_mounts(minio).get("/data") in (compose.get("volumes") or {}), "MinIO's /data must be a named volume"
    assert compose_words(server.get("healthcheck", {}).get("test")), "MinIO has no healthcheck"

    # The agent's endpoint is that service, on the port its API listens on.
    endpoint = urlsplit(env["AWS_ENDPOINT_URL"])
    port = words[words.index("--address") + 1].rpartition(":")[2] if "--address" in words else "9000"
    assert endpoint.scheme == "http" and endpoint.hostname == minio, env["AWS_ENDPOINT_URL"]
    assert str(endpoint.port) == port, f"MinIO's API listens on {port}, the agent calls {endpoint.port}"
    # ... with the credentials MinIO is started with.
    server_env = compose_values(minio)
    assert env["AWS_ACCESS_KEY_ID"] == server_env["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == server_env["MINIO_ROOT_PASSWORD"]

    # The archive store takes these settings (making it sends no request;
    # obstore comes with the test extra).
    from langgraph_durable.archive.store import ArchiveStore

    for name in [n for n in os.environ if n.startswith(AWS)]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith(AWS):
            monkeypatch.setenv(name, value)
    store = ArchiveStore(env[ENV_ARCHIVE_URL], env=env)
    assert (store.bucket, store.prefix) == parse_archive_url(env[ENV_ARCHIVE_URL])


def test_compose_makes_the_bucket_before_the_agent_starts() -> None:
    services = load_compose()["services"]
    (minio,) = services_of_image("minio/minio")
    (maker,) = services_of_image("minio/mc")
    job = services[maker]
    env = compose_values("agent")
    bucket, _ = parse_archive_url(env[ENV_ARCHIVE_URL])

    # One shot: made once MinIO is healthy, never restarted (a finished
    # container that restarts would never count as completed).
    assert job["depends_on"][minio]["condition"] == "service_healthy"
    assert str(job.get("restart", "no")) in ("no", "on-failure"), job.get("restart")
    # It makes the archive's bucket, on the agent's endpoint, idempotently.
    script = " ".join(compose_words(job.get("entrypoint")) + compose_words(job.get("command")))
    script = script.replace("$$", "$")  # compose's escape: the container's shell expands these
    aliases = dict(re.findall(r"mc alias set (\S+) (\S+)", script))
    made = re.findall(r"mc mb (?:--\S+ )*(\S+)/(\S+)", script)
    assert made, f"{maker} makes no bucket: {script}"
    assert "--ignore-existing" in script or "-p" in script.split(), "making the bucket again must not fail"
    assert any(b == bucket and aliases.get(a) == env["AWS_ENDPOINT_URL"] for a, b in made), (
        f"{maker} must make {bucket!r} at {env['AWS_ENDPOINT_URL']}: {script}"
    )
    # With MinIO's credentials, from the same .env variables.
    job_env = compose_env(maker)
    for name in ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"):
        assert job_env[name] == compose_env(minio)[name], name
        assert f"${name}" in script or f"${{{name}}}" in script, f"{maker} does not use {name}"

    # The agent starts after both, and stops before MinIO.
    depends = services["agent"]["depends_on"]
    assert depends.get(maker, {}).get("condition") == "service_completed_successfully", f"agent: {maker} first"
    assert depends.get(minio, {}).get("condition") == "service_healthy", f"agent: {minio} first"


def test_compose_publishes_no_ports() -> None:
    for name, service in load_compose()["services"].items():
        assert not service.get("ports"), f"{name} publishes ports: everything stays on the compose network"
        assert service.get("network_mode") is None, name


def test_every_variable_compose_requires_is_in_the_env_example() -> None:
    required = set(re.findall(r"(?<!\$)\$\{(\w+):?\?", COMPOSE.read_text()))
    assert {"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"} <= required
    missing = required - set(env_example())
    assert not missing, f".env.example does not list {sorted(missing)}, which compose requires"


def test_compose_grace_period_covers_the_drain() -> None:
    grace = seconds(load_compose()["services"]["agent"]["stop_grace_period"])
    budget = drain_budget(archive=bool(compose_env("agent").get(ENV_ARCHIVE_URL)))
    assert grace > budget, f"stop_grace_period {grace} s must exceed the drain budget {budget} s"


def test_compose_builds_the_dockerfile_and_it_copies_files_that_exist() -> None:
    build = load_compose()["services"]["agent"]["build"]
    context = (COMPOSE.parent / (build if isinstance(build, str) else build.get("context", "."))).resolve()
    dockerfile = context / ("Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile"))
    assert dockerfile.is_file()
    text = dockerfile.read_text()
    # The package from the checkout it is built from (it need not be on an
    # index): its sources copied in, then installed from there.
    install = re.search(r"pip install [\"']?(/\S+?)(?:\[([^\]]*)\])?[\"']?(?:\s|$)", text)
    assert install, "the Dockerfile installs no package from a path"
    copied = {line.split()[-1].rstrip("/") for line in text.splitlines() if line.startswith("COPY ")}
    assert install.group(1).rstrip("/") in copied or f"{install.group(1).rstrip('/')}/langgraph_durable" in copied
    assert (context / "pyproject.toml").is_file() and (context / "langgraph_durable").is_dir()
    extras = {e.strip() for e in (install.group(2) or "").split(",")}
    if compose_env("agent").get(ENV_ARCHIVE_URL) or ENV_ARCHIVE_URL in k8s_env_names():
        assert "s3" in extras, "the archive needs the s3 extra: pip install 'langgraph-durable[s3]'"
    copies = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ")]
    assert copies, "the Dockerfile copies no app"
    for sources in copies:
        for source in sources:
            if not source.startswith("--"):
                assert (context / source).exists(), f"COPY {source}: no such file in the build context"
    assert any(source.endswith("app.py") for sources in copies for source in sources)
    # The context's .dockerignore starts by leaving everything out (no
    # virtualenv or database file in the image): each source is let back in.
    ignore = context / ".dockerignore"
    if ignore.is_file():
        kept = {line[1:].rstrip("/") for line in ignore.read_text().splitlines() if line.startswith("!")}
        for sources in copies:
            for source in sources:
                if not source.startswith("--"):
                    assert source.rstrip("/") in kept, f"COPY {source}: left out of the build context by .dockerignore"
    cmd = [line for line in text.splitlines() if line.startswith("CMD ")]
    assert cmd and cmd[-1].startswith("CMD ["), "exec-form CMD, so python itself gets SIGTERM"


# -- kubernetes/statefulset.yaml ------------------------------------------------------


def test_statefulset_claims_the_sqlite_directory() -> None:
    sts = statefulset()
    claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    sqlite_dir = os.path.dirname(k8s_env_value("LANGGRAPH_DURABLE_SQLITE"))
    mounted = {m["mountPath"]: m["name"] for m in agent_container()["volumeMounts"]}
    assert mounted.get(sqlite_dir) in claims, f"{sqlite_dir} must be a volumeClaimTemplates mount"
    (service,) = k8s_kind("Service")
    assert service["spec"]["clusterIP"] == "None"
    assert sts["spec"]["serviceName"] == service["metadata"]["name"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()


def test_statefulset_grace_period_covers_the_drain() -> None:
    spec = statefulset()["spec"]["template"]["spec"]
    grace = spec["terminationGracePeriodSeconds"]
    budget = drain_budget(archive=ENV_ARCHIVE_URL in k8s_env_names())
    # A preStop hook's time comes out of the same grace period.
    assert "lifecycle" not in agent_container() or grace > budget + 5
    assert grace > budget, f"terminationGracePeriodSeconds {grace} must exceed the drain budget {budget} s"


def test_statefulset_archive_settings() -> None:
    env = {e["name"]: e for e in agent_container()["env"]}
    # Credentials from the Secret, where and which region from the ConfigMap.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert "secretKeyRef" in env[name]["valueFrom"], name
    for name in (ENV_ARCHIVE_URL, "AWS_REGION"):
        assert "configMapKeyRef" in env[name]["valueFrom"], name
        assert k8s_env_value(name)
    # The endpoint is optional: AWS S3 needs none.
    if "AWS_ENDPOINT_URL" in env:
        ref = env["AWS_ENDPOINT_URL"]["valueFrom"]["configMapKeyRef"]
        assert ref.get("optional") is True, "AWS_ENDPOINT_URL must be optional (AWS S3 needs none)"
        (config_map,) = [d for d in k8s_kind("ConfigMap") if d["metadata"]["name"] == ref["name"]]
        if ref["key"] in (config_map.get("data") or {}):
            assert urlsplit(config_map["data"][ref["key"]]).scheme in ("http", "https")


def test_the_kubectl_commands_create_every_key_the_statefulset_needs() -> None:
    refs = k8s_secret_refs()
    needed: dict[str, set[str]] = {}
    for ref in refs:
        if not ref.get("optional"):
            needed.setdefault(ref["name"], set()).add(ref["key"])
    assert "AWS_SECRET_ACCESS_KEY" in set().union(*needed.values())
    readme = README.read_text().partition("## Kubernetes")[2]
    for where, text in (("kubernetes/statefulset.yaml", STATEFULSET.read_text()), ("README.md", readme)):
        created = created_secret_keys(text)
        for secret, keys in needed.items():
            missing = keys - created.get(secret, set())
            assert not missing, f"{where}: `kubectl create secret generic {secret}` does not set {sorted(missing)}"
        # ... and sets nothing the StatefulSet does not read.
        for secret, keys in created.items():
            read = {r["key"] for r in refs if r["name"] == secret}
            assert keys <= read, f"{where}: {secret} gets {sorted(keys - read)}, which no container reads"


def test_statefulset_probes_watch_the_apps_heartbeat(app: ModuleType) -> None:
    container = agent_container()
    for probe in ("readinessProbe", "livenessProbe"):
        command = " ".join(container[probe]["exec"]["command"])
        assert str(app.HEARTBEAT) in command, f"{probe} must read the heartbeat app.py touches"
        assert "doctor" not in command


# -- app.py ---------------------------------------------------------------------------


def test_app_compiles_and_uses_the_env_and_the_drain() -> None:
    compile(APP.read_text(), str(APP), "exec")
    tree = app_tree()
    assert list(_calls(tree, "from_env")), "app.py must build its saver with DurableSaver.from_env()"
    assert list(_calls(tree, "drain_on_sigterm"))


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    for name in ("AGENT_THREAD_ID", "AGENT_STEPS", "AGENT_STEP_SECONDS", "AGENT_HEARTBEAT"):
        monkeypatch.delenv(name, raising=False)
    spec = importlib.util.spec_from_file_location("deploy_app", APP)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    # Registered first: LangGraph resolves the state's annotations through it.
    monkeypatch.setitem(sys.modules, "deploy_app", module)
    spec.loader.exec_module(module)
    return module


def test_app_runs_and_resumes_a_thread(app: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "STEP_SECONDS", 0)
    monkeypatch.setattr(app, "HEARTBEAT", tmp_path / "heartbeat")
    with DurableSaver(sqlite=str(tmp_path / "app.sqlite")) as saver:
        graph = app.build_graph().compile(checkpointer=saver)
        first = app.advance(graph, "t")
        assert (first["run"], first["step"], len(first["log"])) == (1, app.STEPS, app.STEPS)
        assert (tmp_path / "heartbeat").exists()

    # A new process on the same file: a run cut short after two steps ...
    with DurableSaver(sqlite=str(tmp_path / "app.sqlite")) as saver:
        graph = app.build_graph().compile(checkpointer=saver, interrupt_after=["work"])
        config = {"configurable": {"thread_id": "t"}, "recursion_limit": 50}
        graph.invoke({"run": 2, "step": 0}, config)
        graph.invoke(None, config)
        assert graph.get_state(config).values["step"] == 2

    # ... is resumed where it stopped, not started again.
    with DurableSaver(sqlite=str(tmp_path / "app.sqlite")) as saver:
        graph = app.build_graph().compile(checkpointer=saver)
        second = app.advance(graph, "t")
        assert (second["run"], second["step"], len(second["log"])) == (2, app.STEPS, 2 * app.STEPS)
        third = app.advance(graph, "t")
        assert third["run"] == 3


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        assert proc.poll() is None, f"app.py exited with {proc.returncode}:\n{path.read_text()}"
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise AssertionError(f"no {text!r} from app.py within {timeout} s:\n{path.read_text()}")


def test_app_drains_on_sigterm_and_a_restart_goes_on(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith((PREFIX, "AGENT_"))}
    env |= {
        "LANGGRAPH_DURABLE_SQLITE": str(tmp_path / "data" / "checkpoints.sqlite"),
        "AGENT_THREAD_ID": "t",
        "AGENT_STEPS": "5",
        "AGENT_STEP_SECONDS": "0.05",
        "AGENT_HEARTBEAT": str(tmp_path / "heartbeat"),
    }
    for attempt, expect in ((1, "run 1 done"), (2, " done, ")):
        log = tmp_path / f"app{attempt}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, str(APP)], env=env, stdout=out, stderr=subprocess.STDOUT)
            try:
                _wait_for(log, expect, proc)
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=60) == 128 + signal.SIGTERM, log.read_text()
            finally:
                proc.kill()  # a no-op once it exited; a failed test leaves no process behind
                proc.wait()
        assert "signal 15: the shared tiers are caught up" in log.read_text()
    # The second process went on with the thread instead of starting it over.
    second = (tmp_path / "app2.log").read_text()
    done = re.search(r"run (\d+) done, (\d+) steps so far", second)
    assert done and int(done.group(1)) >= 2 and int(done.group(2)) > 5, second
