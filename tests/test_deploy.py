"""The deployment examples under deploy/ parse, hang together, and only set
variables the saver reads; the example app compiles and runs."""

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

import pytest
import yaml

import langgraph_durable
from langgraph_durable import DurableSaver
from langgraph_durable.model.backlog import WRITE_MODES
from langgraph_durable.saver import DEFAULT_DRAIN_TIMEOUT_S, ENV_SQLITE

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
STATEFULSET = DEPLOY / "kubernetes" / "statefulset.yaml"
APP = DEPLOY / "app.py"
PREFIX = "LANGGRAPH_DURABLE_"


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
    assert ENV_SQLITE in names
    assert all(n.startswith(PREFIX) for n in names), names


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


def drain_budget() -> float:
    """Seconds app.py may spend draining after SIGTERM: the handler's timeout,
    then (SystemExit leaves the ``with`` block) close()'s drain_timeout."""
    tree = app_tree()
    (handler,) = _calls(tree, "drain_on_sigterm")
    timeouts = [k.value for k in handler.keywords if k.arg == "timeout"]
    sigterm = _constant(tree, timeouts[0]) if timeouts else 20.0
    close = DEFAULT_DRAIN_TIMEOUT_S
    for call in _calls(tree, "from_env"):
        for k in call.keywords:
            if k.arg == "drain_timeout":
                close = _constant(tree, k.value)
    return sigterm + close


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
    needed |= {"LANGGRAPH_DURABLE_SIGNING_KEY"}
    assert needed <= set(compose_env("agent"))
    assert needed <= k8s_env_names()


def test_secrets_are_never_literal() -> None:
    secretish = re.compile(r"KEY|PASSWORD|SECRET|TOKEN")
    for service in load_compose()["services"]:
        for name, value in compose_env(service).items():
            if secretish.search(name):
                assert re.fullmatch(r"\$\{\w+:\?[^}]*\}", value), f"{service}: {name} must be ${{{name}:?...}}"
    assert "${LANGGRAPH_DURABLE_SIGNING_KEY:?" in compose_env("agent")["LANGGRAPH_DURABLE_SIGNING_KEY"]
    assert "${POSTGRES_PASSWORD:?" in compose_env("agent")["LANGGRAPH_DURABLE_POSTGRES_URL"]
    for entry in agent_container()["env"]:
        if secretish.search(entry["name"]) or entry["name"].endswith("_URL"):
            assert "secretKeyRef" in entry.get("valueFrom", {}), f"{entry['name']} must come from a Secret"
    assert not k8s_kind("Secret"), "the Secret is created out of band, not committed with values"
    assert all(v == "" for k, v in env_example().items() if secretish.search(k))


def test_the_saver_accepts_what_compose_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = {"LANGGRAPH_DURABLE_SIGNING_KEY": "k" * 32, "POSTGRES_PASSWORD": "pw"}
    env = {k: interpolate(v, given) for k, v in compose_env("agent").items()}
    for name in saver_env_names():
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # The file's own path is the container's; nothing connects until first use.
    saver = DurableSaver.from_env(sqlite=str(tmp_path / "c.sqlite"), drain_timeout=0)
    try:
        assert saver.redis_url == env["LANGGRAPH_DURABLE_REDIS_URL"]
        assert saver.postgres_url == env["LANGGRAPH_DURABLE_POSTGRES_URL"]
        assert saver.write == env["LANGGRAPH_DURABLE_WRITE"]
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
    mounts = {}
    for volume in agent["volumes"]:
        source, target = volume.split(":")[:2] if isinstance(volume, str) else (volume["source"], volume["target"])
        mounts[target] = source
    assert sqlite_dir in mounts, f"nothing mounted at {sqlite_dir}"
    assert mounts[sqlite_dir] in (compose.get("volumes") or {}), "the SQLite directory must be a named volume"

    # Redis: AOF on, fsynced every second.
    command = services["redis"]["command"]
    words = shlex.split(command) if isinstance(command, str) else [str(w) for w in command]
    joined = " ".join(words)
    assert "--appendonly yes" in joined
    assert "--appendfsync everysec" in joined

    # Postgres 15 or newer, with a healthcheck.
    tag = services["postgres"]["image"].rpartition(":")[2]
    assert re.match(r"\d+", tag) and int(re.match(r"\d+", tag).group()) >= 15, tag
    for name in ("redis", "postgres"):
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert agent["depends_on"][name]["condition"] == "service_healthy"


def test_compose_grace_period_covers_the_drain() -> None:
    grace = seconds(load_compose()["services"]["agent"]["stop_grace_period"])
    assert grace > drain_budget(), f"stop_grace_period {grace} s must exceed the drain budget {drain_budget()} s"


def test_compose_builds_the_dockerfile_and_it_copies_files_that_exist() -> None:
    build = load_compose()["services"]["agent"]["build"]
    context = COMPOSE.parent / (build if isinstance(build, str) else build.get("context", "."))
    dockerfile = context / ("Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile"))
    assert dockerfile.is_file()
    text = dockerfile.read_text()
    assert re.search(r"pip install [\"']?langgraph-durable", text)
    copies = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ")]
    assert copies, "the Dockerfile copies no app"
    for sources in copies:
        for source in sources:
            if not source.startswith("--"):
                assert (context / source).exists(), f"COPY {source}: no such file in the build context"
    assert any("app.py" in sources for sources in copies)
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
    # A preStop hook's time comes out of the same grace period.
    assert "lifecycle" not in agent_container() or grace > drain_budget() + 5
    assert grace > drain_budget(), (
        f"terminationGracePeriodSeconds {grace} must exceed the drain budget {drain_budget()} s"
    )


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
