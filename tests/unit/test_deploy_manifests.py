"""The deployment files (Dockerfile, compose, Kubernetes/kustomize) agree with the code.

Every YAML document under deploy/compose and deploy/k8s is parsed; the checks are on what the
services actually read: the command each container runs, the ENGRAM_* variables (each one a real
settings field, each settings field documented with the services that read it), the stream
replicas of the 3-node NATS cluster, the gateway's and auth's HTTP ports and health endpoints, and
the one public origin on which the proxy (compose) and the Ingress (production) serve MCP and the
auth service's OAuth paths (taken from the auth app's own routes). When `kubectl` (or `kustomize`)
is on the PATH the kustomizations are also rendered and checked; otherwise those tests are skipped
(nothing is downloaded).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "deploy" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
K8S_DIR = ROOT / "deploy" / "k8s"
K8S_BASE = K8S_DIR / "base"
K8S_PROD = K8S_DIR / "overlays" / "production"

SERVICES = {"gateway", "auth", "memory", "extractor", "graph"}

#: The documented ENGRAM_* environment contract (docs/deployment.md). A manifest may use nothing
#: else; it is exactly the fields of the settings classes (both directions are checked below).
ALLOWED_ENV = {
    # common
    "ENGRAM_ENV",
    "ENGRAM_HOME",
    "ENGRAM_NATS_URL",
    "ENGRAM_DATABASE_URL",
    "ENGRAM_NAMESPACE",
    "ENGRAM_STREAM_REPLICAS",
    "ENGRAM_LOG_LEVEL",
    "ENGRAM_STALL_WARNING_MS",
    "ENGRAM_EXPIRY_INTERVAL_S",
    "ENGRAM_METRICS_HOST",  # /metrics of every service (kit/metrics.py), with each service's port:
    "ENGRAM_GATEWAY_METRICS_PORT",
    "ENGRAM_AUTH_METRICS_PORT",
    "ENGRAM_MEMORY_METRICS_PORT",
    "ENGRAM_EXTRACTOR_METRICS_PORT",
    "ENGRAM_GRAPH_METRICS_PORT",
    # memory
    "ENGRAM_TRUTH_LLM_URL",
    "ENGRAM_TRUTH_LLM_MODEL",
    "ENGRAM_TRUTH_LLM_API_KEY",
    "ENGRAM_QDRANT_URL",
    "ENGRAM_QDRANT_COLLECTION",
    "ENGRAM_QDRANT_API_KEY",
    "ENGRAM_MEMORY_REPLICA",
    "ENGRAM_VECTOR_SEARCH_THREADS",
    "ENGRAM_EMBEDDER",
    "ENGRAM_EMBEDDER_URL",
    "ENGRAM_EMBEDDER_MODEL",
    "ENGRAM_EMBEDDER_DIM",
    "ENGRAM_EMBEDDER_API_KEY",
    "ENGRAM_EMBEDDER_THREADS",
    "ENGRAM_EMBEDDER_COMPUTE",
    "ENGRAM_EMBEDDING_CACHE_MAX_ENTRIES",
    "ENGRAM_RERANKER",
    "ENGRAM_RERANK_CANDIDATES",
    "ENGRAM_LATE_INTERACTION",
    "ENGRAM_LATE_CANDIDATES",
    "ENGRAM_KEYWORD_FEEDBACK",
    "ENGRAM_MEMORY_SCHEMA",
    "ENGRAM_LOG_RETENTION_DAYS",  # extractor and graph too
    # graph
    "ENGRAM_GRAPH_SCHEMA",
    "ENGRAM_GRAPH_SIMILAR",
    "ENGRAM_GRAPH_SIMILAR_LIMIT",
    "ENGRAM_GRAPH_SIMILAR_MIN_SCORE",
    # extractor
    "ENGRAM_EXTRACTOR_SCHEMA",
    "ENGRAM_EXTRACTOR_ENGINE",
    "ENGRAM_EXTRACTION",  # auto | agent | handoff (docs/daily-logs.md)
    "ENGRAM_EXTRACTION_HANDOFF_MINUTES",
    "ENGRAM_EXTRACTION_SWEEP_INTERVAL_S",
    "ENGRAM_EXTRACTOR_TASK_ID",
    "ENGRAM_EXTRACTOR_LLM_URL",
    "ENGRAM_EXTRACTOR_LLM_MODEL",
    "ENGRAM_EXTRACTOR_LLM_API_KEY",
    "ENGRAM_EXTRACTOR_LLM_TIMEOUT_S",
    "ENGRAM_EXTRACTOR_LLM_ATTEMPTS",
    "ENGRAM_EXTRACTOR_LLM_MAX_CHARS",
    "ENGRAM_EXTRACTOR_LLM_MAX_TOKENS",
    "ENGRAM_EXTRACTOR_CONCURRENCY",
    "ENGRAM_EXTRACTOR_ACK_WAIT_S",
    "ENGRAM_LOG_RECOVER_INTERVAL_S",
    "ENGRAM_LOG_STUCK_MINUTES",
    "ENGRAM_LOG_RETENTION_INTERVAL_S",
    "ENGRAM_EXTRACTOR_CONSOLIDATE_INTERVAL_S",
    # gateway (ENGRAM_GATEWAY_HOST/PORT and ENGRAM_PUBLIC_URL are read by auth too)
    "ENGRAM_GATEWAY_HOST",
    "ENGRAM_GATEWAY_PORT",
    "ENGRAM_PUBLIC_URL",
    "ENGRAM_ALLOWED_HOSTS",
    "ENGRAM_COMMAND_TIMEOUT_S",
    "ENGRAM_TOKEN_CACHE_TTL_S",
    "ENGRAM_RATE_LIMIT_PER_MINUTE",
    "ENGRAM_RATE_LIMIT_BURST",
    "ENGRAM_ANONYMOUS_RATE_LIMIT_PER_MINUTE",
    "ENGRAM_MAX_BODY_BYTES",
    "ENGRAM_AUTH_METADATA_URL",
    "ENGRAM_RATE_LIMIT_BYTES_PER_TOKEN",
    "ENGRAM_HEADER_TIMEOUT_S",
    "ENGRAM_BODY_IDLE_TIMEOUT_S",
    "ENGRAM_KEEP_ALIVE_TIMEOUT_S",
    "ENGRAM_TRUSTED_PROXIES",  # auth too
    # auth (ENGRAM_AUTH_PUBLIC_URL is read by the gateway too)
    "ENGRAM_AUTH_SCHEMA",
    "ENGRAM_AUTH_HOST",
    "ENGRAM_AUTH_PORT",
    "ENGRAM_AUTH_PUBLIC_URL",
    "ENGRAM_RESOURCE_URL",
    "ENGRAM_ALLOW_SIGNUP",
    "ENGRAM_AUTH_RATE_LIMIT_PER_MINUTE",
    "ENGRAM_AUTH_RATE_LIMIT_BURST",
    "ENGRAM_AUTH_REGISTER_PER_HOUR",
    "ENGRAM_AUTH_REGISTER_BURST",
    "ENGRAM_OAUTH_MAX_REDIRECT_URIS",
    "ENGRAM_OAUTH_MAX_URI_CHARS",
    "ENGRAM_OAUTH_MAX_TEXT_CHARS",
    "ENGRAM_OAUTH_APP_SCHEMES",
    "ENGRAM_AUTH_PURGE_INTERVAL_S",
    "ENGRAM_AUTH_UNUSED_CLIENT_DAYS",
    "ENGRAM_AUTH_HEADER_TIMEOUT_S",
    "ENGRAM_AUTH_KEEP_ALIVE_S",
}
ENV_NAME = re.compile(r"\bENGRAM_[A-Z0-9_]+\b")

AUTH_PORT = 8081
METRICS_PORT = 9100  # every service's /metrics in the manifests
AS_METADATA_PATH = "/.well-known/oauth-authorization-server"


# --- loading ---------------------------------------------------------------------------------------


def yaml_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in (".yml", ".yaml") and p.is_file())


class ComposeLoader(yaml.SafeLoader):
    """YAML with Compose's merge tags: `!override X` is X (it replaces what the file below set),
    `!reset` is None (it removes it)."""


def _override(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


ComposeLoader.add_constructor("!override", _override)
ComposeLoader.add_constructor("!reset", lambda loader, node: None)


def load_all(path: Path) -> list[Any]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=ComposeLoader) if doc is not None]  # noqa: S506


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def base_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in yaml_files(K8S_BASE):
        if path.name != "kustomization.yaml":
            objects.extend(load_all(path))
    return objects


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o.get("kind") == kind}


def engram_compose_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in compose["services"].items()
        if "build" in svc or image_of(svc).split(":")[0] == "engram"
    }


def image_of(svc: dict[str, Any]) -> str:
    """The image a Docker user runs: `${IMAGE_X:-default}` is its default (make compose-test sets
    IMAGE_X to a stand-in built here, deploy/images/)."""
    image = str(svc.get("image", ""))
    found = re.fullmatch(r"\$\{(IMAGE_[A-Z]+):-([^}]+)\}", image)
    return found.group(2) if found else image


def mounted_file(svc: dict[str, Any], target: str) -> str:
    """The text of the file next to docker-compose.yml that a service mounts read-only at target."""
    (source,) = [v.split(":")[0] for v in svc["volumes"] if v.split(":")[1:] == [target, "ro"]]
    assert source.startswith("./"), source
    return (COMPOSE_DIR / source).read_text()


def compose_proxy_conf(compose: dict[str, Any]) -> str:
    return mounted_file(compose["services"]["proxy"], "/etc/nginx/templates/default.conf.template")


def container_env(container: dict[str, Any], config: dict[str, str]) -> dict[str, str | None]:
    """The variables a container gets: envFrom the ConfigMap, then env (None = from a Secret)."""
    env: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(config)
    for item in container.get("env", []):
        env[item["name"]] = item.get("value")
    return env


def engram_containers(objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    found = []
    for deployment in by_kind(objects, "Deployment").values():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            if container["image"].split(":")[0].rsplit("/", 1)[-1] == "engram":
                found.append((deployment, container))
    return found


def nats_cluster_routes(args: list[str]) -> list[str]:
    routes = args[args.index("--routes") + 1]
    return [r.strip() for r in routes.split(",")]


def settings_classes() -> dict[str, Any]:
    from services.auth.config import AuthSettings
    from services.extractor.config import ExtractorSettings
    from services.gateway.config import GatewaySettings
    from services.graph.config import GraphSettings
    from services.memory.config import MemorySettings

    return {"gateway": GatewaySettings, "auth": AuthSettings, "memory": MemorySettings,
            "extractor": ExtractorSettings, "graph": GraphSettings}


def readers() -> dict[str, set[str]]:
    """ENGRAM_* variable -> the services whose settings read it."""
    found: dict[str, set[str]] = {}
    for service, settings in settings_classes().items():
        for field in settings.model_fields:
            found.setdefault("ENGRAM_" + field.upper(), set()).add(service)
    return found


@pytest.fixture(scope="module")
def oauth_paths() -> set[str]:
    """The paths the auth service answers over HTTP, from its own app (not a copy of the list):
    the proxy and the Ingress must send exactly these to auth. /healthz stays internal."""
    from services.auth.entrypoints.http import create_app
    from services.auth.oauth.pages import Pages

    issuer = "https://engram.example.com"
    class NoProvider:  # the routes need no provider; create_app only configures its limits
        def configure(self, **_: object) -> None:
            return None

    app = create_app(NoProvider(), Pages(None, issuer=issuer, allow_signup=True), issuer)  # type: ignore[arg-type]
    while not hasattr(app, "routes"):  # below the address/limits middleware
        app = app.app  # type: ignore[attr-defined]
    paths = {getattr(route, "path", "") for route in app.routes} - {"/healthz", ""}
    assert AS_METADATA_PATH in paths and "/token" in paths
    return paths


def nginx_routes(conf: str) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """(variables set, {(modifier, path): upstream URL, or ``return <status>``}) of the compose
    proxy's nginx server."""
    variables = dict(re.findall(r"^\s*set \$(\w+) (\S+);", conf, re.MULTILINE))
    routes: dict[tuple[str, str], str] = {}
    for modifier, path, body in re.findall(r"location\s+(=\s+)?(\S+)\s*\{([^}]*)\}", conf):
        targets = re.findall(r"proxy_pass \$(\w+);", body)
        answers = re.findall(r"(return \d+);", body)
        assert len(targets) + len(answers) == 1, body
        routes[(modifier.strip(), path)] = variables[targets[0]] if targets else answers[0]
    return variables, routes


def nginx_destination(routes: dict[tuple[str, str], str], path: str) -> str | None:
    """Where nginx sends ``path``: an exact location first, else the longest prefix location
    (the proxy has no regex locations)."""
    if ("=", path) in routes:
        return routes[("=", path)]
    prefixes = [p for (modifier, p) in routes if modifier == "" and path.startswith(p)]
    return routes[("", max(prefixes, key=len))] if prefixes else None


def ingress_destination(paths: list[dict[str, Any]], path: str) -> str | None:
    """The backend Service an Ingress sends ``path`` to (Kubernetes path matching: Exact, then the
    longest Prefix matched element by element), or None."""
    for entry in paths:
        if entry["pathType"] == "Exact" and entry["path"] == path:
            return str(entry["backend"]["service"]["name"])
    best: tuple[int, str] | None = None
    for entry in paths:
        prefix = entry["path"].rstrip("/")
        if entry["pathType"] == "Prefix" and (path == prefix or path.startswith(prefix + "/") or not prefix):
            if best is None or len(prefix) > best[0]:
                best = (len(prefix), str(entry["backend"]["service"]["name"]))
    return best[1] if best else None


#: the gateway's paths that stay inside (Prometheus scrapes the metrics port; the orchestrator
#: probes the pod): never routed by the proxy or the Ingress
GATEWAY_INTERNAL = {"/metrics", "/healthz", "/readyz"}


def gateway_routes() -> set[str]:
    """Every path the gateway's app answers (a mount: its path and one below it), from the app."""
    from services.gateway.config import GatewaySettings
    from services.gateway.main import create_app

    paths: set[str] = set()

    def walk(routes: list[Any]) -> None:
        for route in routes:
            inner = getattr(route, "original_router", None)
            if inner is not None:
                walk(inner.routes)
            elif type(route).__name__ == "Mount":
                paths.update({route.path, route.path + "/x.js"})
            elif getattr(route, "path", None):
                paths.add(route.path)

    walk(create_app(GatewaySettings(public_url="https://engram.example.com")).routes)
    assert GATEWAY_INTERNAL <= paths and "/mcp" in paths and "/docs" in paths
    return paths


# --- every file parses -----------------------------------------------------------------------------


def test_every_yaml_document_parses() -> None:
    files = yaml_files(COMPOSE_DIR) + yaml_files(K8S_DIR)
    assert COMPOSE_FILE in files
    assert K8S_BASE / "kustomization.yaml" in files
    assert K8S_PROD / "kustomization.yaml" in files
    for path in files:
        docs = load_all(path)
        assert docs, f"{path.relative_to(ROOT)} has no YAML document"
        for doc in docs:
            assert isinstance(doc, dict), f"{path.relative_to(ROOT)}: a document is not a mapping"
            if path.parent.name != "compose" and path.name != "kustomization.yaml":
                assert {"apiVersion", "kind", "metadata"} <= doc.keys(), (
                    f"{path.relative_to(ROOT)}: not a k8s object"
                )


# --- the environment contract ----------------------------------------------------------------------


def deployment_text_files() -> list[Path]:
    return [*yaml_files(COMPOSE_DIR), *yaml_files(K8S_DIR), COMPOSE_DIR / ".env.example", ROOT / "Dockerfile"]


def test_only_documented_engram_variables_are_used() -> None:
    for path in deployment_text_files():
        unknown = set(ENV_NAME.findall(path.read_text())) - ALLOWED_ENV
        assert not unknown, f"{path.relative_to(ROOT)} uses undocumented variables {sorted(unknown)}"


def test_documented_variables_exist_in_the_settings() -> None:
    """The allowed list itself names real settings fields (catches typos and renames)."""
    known = set(readers())
    assert ALLOWED_ENV <= known, f"not settings fields: {sorted(ALLOWED_ENV - known)}"


def test_every_setting_is_documented() -> None:
    """A new settings field must be added to the list (and so to docs/deployment.md)."""
    known = set(readers())
    assert known <= ALLOWED_ENV, f"settings fields missing from ALLOWED_ENV and the guide: {sorted(known - ALLOWED_ENV)}"


def test_deployment_guide_documents_each_variable_with_its_readers() -> None:
    """The guide's variable table lists every variable once, with the services that read it."""
    guide = (ROOT / "docs" / "deployment.md").read_text()
    table = guide[guide.index("## Environment variables"):]
    documented: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`(ENGRAM_[A-Z0-9_]+)`", cells[0]) if line.startswith("|") else None
        if match:
            assert match[1] not in documented, f"{match[1]} is documented twice"
            used_by = cells[1]
            documented[match[1]] = set(SERVICES) if used_by == "all" else {s.strip() for s in used_by.split(",")}
    assert set(documented) == ALLOWED_ENV, (
        f"undocumented {sorted(ALLOWED_ENV - set(documented))}, unknown {sorted(set(documented) - ALLOWED_ENV)}"
    )
    actual = readers()
    wrong = {name: (used, actual[name]) for name, used in documented.items() if used != actual[name]}
    assert not wrong, f"'used by' (documented, actual) differs: {wrong}"


def test_env_example_keys_are_used_by_compose() -> None:
    text = COMPOSE_FILE.read_text()
    for line in (COMPOSE_DIR / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key = line.split("=", 1)[0].strip()
            assert "${" + key in text, f".env.example sets {key}, which docker-compose.yml never reads"


# --- Dockerfile ------------------------------------------------------------------------------------


def test_dockerfile_runs_engram_as_non_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    # python:3.11-slim unless BASE_IMAGE names another (make compose-test: deploy/images/build.py)
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", text, re.MULTILINE)
    assert re.findall(r"^FROM (.+)$", text, re.MULTILINE) == ["${BASE_IMAGE}"]
    assert 'ENTRYPOINT ["engram"]' in text
    assert 'CMD ["serve", "gateway"]' in text
    assert re.search(r"^EXPOSE 8080$", text, re.MULTILINE)
    assert re.search(rf"^EXPOSE {AUTH_PORT}$", text, re.MULTILINE), "auth's OAuth server"
    assert re.search(r"^VOLUME /data$", text, re.MULTILINE)
    assert "ENGRAM_HOME=/data" in text
    assert "ENGRAM_GATEWAY_HOST=0.0.0.0" in text and "ENGRAM_AUTH_HOST=0.0.0.0" in text
    user = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert user and user[-1].split(":")[0].isdigit() and user[-1].split(":")[0] != "0", (
        "USER must be a numeric non-root uid"
    )
    for folder in ("contracts", "kit", "services", "deploy"):
        assert f"COPY {folder}/ {folder}/" in text
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".venv", ".git", "tests", "bench", "docs", "node_modules"} <= ignored
    assert not ignored & {"contracts", "kit", "services", "deploy", "pyproject.toml"}


# --- compose ---------------------------------------------------------------------------------------


def test_compose_engram_services_each_run_one_service(compose: dict[str, Any]) -> None:
    services = engram_compose_services(compose)
    seen = set()
    for name, svc in services.items():
        command = svc["command"]
        assert isinstance(command, list) and len(command) == 2 and command[0] == "serve", f"{name}: {command}"
        assert command[1] in SERVICES, f"{name} runs unknown service {command[1]!r}"
        assert command[1] == name
        assert svc["build"]["context"] == "../.."
        assert (
            COMPOSE_DIR / svc["build"]["context"] / svc["build"].get("dockerfile", "Dockerfile")
        ).resolve() == ROOT / "Dockerfile"
        seen.add(command[1])
    assert seen == SERVICES


def compose_nats_conf(compose: dict[str, Any]) -> str:
    confs = {mounted_file(s, "/etc/nats/nats.conf") for s in compose["services"].values()
             if image_of(s).startswith("nats:")}
    (conf,) = confs  # one configuration for the three nodes
    return conf


def nats_conf_routes(conf: str) -> list[str]:
    (routes,) = re.findall(r"routes:\s*\[([^\]]*)\]", conf)
    return [r.strip() for r in routes.split(",")]


def check_nats_conf(conf: str) -> None:
    """Issue 29 L7: clients and routes authenticate; the monitoring port is the container's own."""
    assert re.search(r"authorization\s*\{\s*user:\s*engram,\s*password:\s*\$NATS_PASSWORD\s*\}", conf), conf
    cluster = conf[conf.index("cluster {"):]
    assert re.search(r"authorization\s*\{\s*user:\s*route,\s*password:\s*\$NATS_CLUSTER_PASSWORD\s*\}", cluster)
    assert re.search(r"^\s*http:\s*127\.0\.0\.1:8222\s*$", conf, re.MULTILINE), "monitoring on loopback only"
    monitors = re.findall(r"^\s*(?:https?|http_port|https_port|monitor_port)\s*:\s*(\S+)", conf, re.MULTILINE)
    assert monitors == ["127.0.0.1:8222"], monitors
    assert re.search(r"jetstream\s*\{\s*store_dir:\s*/data\s*\}", conf)
    assert "name: engram" in cluster and re.search(r"^\s*port:\s*6222\s*$", cluster, re.MULTILINE)


def test_compose_nats_is_a_three_node_jetstream_cluster(compose: dict[str, Any]) -> None:
    nodes = {n: s for n, s in compose["services"].items() if image_of(s).startswith("nats:")}
    assert len(nodes) == 3
    conf = compose_nats_conf(compose)
    check_nats_conf(conf)
    routes = nats_conf_routes(conf)
    for name, svc in nodes.items():
        assert svc["command"] == ["-c", "/etc/nats/nats.conf"], name
        env = svc["environment"]
        assert env["NATS_SERVER_NAME"] == name and "server_name: $NATS_SERVER_NAME" in conf
        urls = {urlparse(env[r.lstrip("$")]) for r in routes}
        assert {(u.hostname, u.port) for u in urls} == {(n, 6222) for n in nodes}, name
        assert {(u.username, u.password) for u in urls} == {("route", "${NATS_CLUSTER_PASSWORD}")}, name
        volume = next(v for v in svc["volumes"] if v.endswith(":/data"))
        assert volume.split(":")[0] in compose["volumes"], f"{name}: /data is not a named volume"
        assert "healthcheck" in svc and "127.0.0.1:8222" in " ".join(svc["healthcheck"]["test"])


def test_compose_nats_and_qdrant_require_their_secrets(compose: dict[str, Any]) -> None:
    """Issue 29 L7: NATS without authentication (anyone on the network could mint admin keys) and
    Qdrant without an API key (every memory's payload): neither starts without its secret now."""
    for name, svc in compose["services"].items():
        if not image_of(svc).startswith("nats:"):
            continue
        env = svc["environment"]
        for var in ("NATS_PASSWORD", "NATS_CLUSTER_PASSWORD"):
            assert env[var].startswith("${" + var + ":?"), f"{name}: {var} must be required, with no default"
        assert "8222" not in str(svc.get("ports", [])) + str(svc.get("expose", [])), name
    for name, svc in engram_compose_services(compose).items():
        url = urlparse(svc["environment"]["ENGRAM_NATS_URL"])
        assert (url.username, url.password) == ("engram", "${NATS_PASSWORD}"), name
    qdrant = compose["services"]["qdrant"]["environment"]
    assert qdrant["QDRANT__SERVICE__API_KEY"].startswith("${QDRANT_API_KEY:?")
    assert compose["services"]["memory"]["environment"]["ENGRAM_QDRANT_API_KEY"] == "${QDRANT_API_KEY}"
    example = (COMPOSE_DIR / ".env.example").read_text()
    for var in ("NATS_PASSWORD", "NATS_CLUSTER_PASSWORD", "QDRANT_API_KEY"):
        assert re.search(rf"^{var}=$", example, re.MULTILINE), f".env.example: {var} empty, to be generated"


def test_compose_networks_keep_the_proxy_off_the_databases_and_trust_only_it(compose: dict[str, Any]) -> None:
    """Issue 29 L7: X-Forwarded-For is believed from the proxy's own address, not from every
    private range (any container could claim any client address)."""
    import ipaddress

    proxy = compose["services"]["proxy"]
    (address,) = [n["ipv4_address"] for n in proxy["networks"].values()]
    (edge,) = [name for name, n in proxy["networks"].items()]
    (subnet,) = [c["subnet"] for c in compose["networks"][edge]["ipam"]["config"]]
    assert ipaddress.ip_address(address) in ipaddress.ip_network(subnet)
    for name in ("gateway", "auth"):
        trusted = compose["services"][name]["environment"]["ENGRAM_TRUSTED_PROXIES"]
        assert [t.strip() for t in str(trusted).split(",")] == [address], name
        assert edge in compose["services"][name]["networks"], name
    for name in ("nats-1", "nats-2", "nats-3", "postgres", "qdrant"):
        assert edge not in compose["services"][name]["networks"], f"the proxy must not reach {name}"
    for name in ("memory", "extractor", "graph"):
        assert edge not in compose["services"][name]["networks"], name


def test_compose_engram_env_matches_the_cluster(compose: dict[str, Any]) -> None:
    nats_nodes = {n for n, s in compose["services"].items() if image_of(s).startswith("nats:")}
    for name, svc in engram_compose_services(compose).items():
        env = svc["environment"]
        assert str(env["ENGRAM_STREAM_REPLICAS"]) == str(len(nats_nodes)) == "3", name
        url = urlparse(env["ENGRAM_NATS_URL"])
        assert url.scheme == "nats" and url.hostname in nats_nodes and "," not in env["ENGRAM_NATS_URL"]
        for dep in nats_nodes:
            assert svc["depends_on"][dep]["condition"] == "service_healthy", f"{name} does not wait for {dep}"
        if name in ("auth", "memory"):
            assert urlparse(env["ENGRAM_DATABASE_URL"]).hostname == "postgres"
            assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
        if name == "gateway":
            assert env["ENGRAM_GATEWAY_HOST"] == "0.0.0.0"
            assert "ENGRAM_DATABASE_URL" not in env, "the gateway talks only to NATS"
        if name == "auth":
            assert env["ENGRAM_AUTH_HOST"] == "0.0.0.0" and str(env["ENGRAM_AUTH_PORT"]) == str(AUTH_PORT)


def test_compose_memory_replicas_use_the_qdrant_server(compose: dict[str, Any]) -> None:
    memory = compose["services"]["memory"]
    assert memory["deploy"]["replicas"] > 1
    assert memory["environment"]["ENGRAM_QDRANT_URL"] == "http://qdrant:6333", (
        "several replicas need a Qdrant server"
    )
    assert "qdrant" in memory["depends_on"]
    assert image_of(compose["services"]["qdrant"]).startswith("qdrant/qdrant:")


def test_compose_postgres_and_gateway_health(compose: dict[str, Any]) -> None:
    pg = compose["services"]["postgres"]
    assert image_of(pg).startswith("postgres:16")
    assert pg["environment"]["POSTGRES_DB"] == "engram"
    assert "pg_isready" in pg["healthcheck"]["test"]
    gateway = compose["services"]["gateway"]
    assert "/readyz" in " ".join(gateway["healthcheck"]["test"])
    # only one container may bind a host port: the gateway replicas sit behind the proxy
    assert "ports" not in gateway
    published = [n for n, s in compose["services"].items() if s.get("ports")]
    assert published == ["proxy"]
    assert compose["services"]["proxy"]["depends_on"]["gateway"]["condition"] == "service_healthy"
    assert "gateway:8080" in compose_proxy_conf(compose)
    auth = compose["services"]["auth"]
    assert "ports" not in auth and str(AUTH_PORT) in [str(p) for p in auth["expose"]]
    assert auth["healthcheck"]["test"] == ["CMD", "python", "-m", "deploy.probe", "auth", "--http",
                                           f"http://127.0.0.1:{AUTH_PORT}/healthz"]


def auth_http_paths() -> set[str]:
    """Every path of the auth app, /healthz included (it is exempt from the sign-in rate limit)."""
    from services.auth.entrypoints.http import create_app
    from services.auth.oauth.pages import Pages

    class NoProvider:
        def configure(self, **_: object) -> None:
            return None

    app = create_app(NoProvider(), Pages(None, issuer="https://e.example", allow_signup=True), "https://e.example")  # type: ignore[arg-type]
    while not hasattr(app, "routes"):
        app = app.app  # type: ignore[attr-defined]
    return {getattr(route, "path", "") for route in app.routes}


def gateway_http_paths() -> set[str]:
    source = (ROOT / "services" / "gateway" / "main.py").read_text()
    return set(re.findall(r'@app\.get\("(/[a-z]+z)"', source))


def check_probe_command(command: list[str], service: str, port: int | None = None) -> None:
    """An exec probe runs deploy/probe.py for the container's own service, with arguments its
    parser accepts, and any --http URL is one of the service's own health paths on its port."""
    from deploy import probe

    assert command[:4] == ["python", "-m", "deploy.probe", service], command
    args = probe.parser().parse_args(command[3:])  # exits (SystemExit) on an argument it does not take
    assert args.service == service
    if args.http:
        url = urlparse(args.http)
        assert url.hostname == "127.0.0.1" and url.port == port, args.http
        assert url.path in auth_http_paths() | gateway_http_paths(), url.path


def test_compose_every_engram_service_restarts_and_has_a_truthful_healthcheck(compose: dict[str, Any]) -> None:
    """Issue 20: Docker restarts a service that exits, and each healthcheck says whether this
    container's process can work: the gateway's /readyz (its NATS connection), auth's and memory's
    NATS connection (deploy/probe.py), auth's HTTP server too."""
    services = engram_compose_services(compose)
    assert set(services) == SERVICES
    for name, svc in services.items():
        assert svc["restart"] == "unless-stopped", name
        assert svc.get("init") is True, name  # signals reach the service; zombies are reaped
        check = svc["healthcheck"]
        assert check["test"][0] == "CMD" and check["retries"] >= 3 and check["start_period"], name
        if name == "gateway":
            assert "http://127.0.0.1:8080/readyz" in " ".join(check["test"])
            assert "/readyz" in gateway_http_paths()
        else:
            check_probe_command(check["test"][1:], name, AUTH_PORT if name == "auth" else None)
    for name in ("nats-1", "nats-2", "nats-3", "postgres", "qdrant", "proxy"):
        assert compose["services"][name]["restart"] == "unless-stopped", name


def test_the_extractor_runs_everywhere_engram_runs(compose: dict[str, Any], base_objects: list[dict[str, Any]]) -> None:
    """Issue 14: `engram up`, compose and kustomize all run the extractor, from the same image, with
    its Postgres (the task ledger) and the offline engine by default."""
    from deploy import cli, probe, stack, status

    assert "extractor" in stack.SERVICES and cli.SERVICE_MAINS["extractor"] == "services.extractor.main"
    assert probe.parser().parse_args(["extractor"]).service == "extractor"
    assert stack.EXTRACTOR_DURABLE == status.EXTRACTOR_DURABLE
    from contracts.daily_logs import DAILY_LOG_AGGREGATE
    from contracts.subjects import Names
    from services.extractor.entrypoints.nats import consumer_spec

    assert consumer_spec(Names("engram"), DAILY_LOG_AGGREGATE).durable == stack.EXTRACTOR_DURABLE
    svc = compose["services"]["extractor"]
    assert svc["image"] == compose["services"]["memory"]["image"] and svc["command"] == ["serve", "extractor"]
    assert svc["environment"]["ENGRAM_DATABASE_URL"] == compose["services"]["memory"]["environment"]["ENGRAM_DATABASE_URL"]
    assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
    (container,) = by_kind(base_objects, "Deployment")["extractor"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["ENGRAM_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "engram-db"
    assert env["ENGRAM_EXTRACTOR_ENGINE"]["value"] == "builtin"
    # the extraction mode is the extractor's to read, set in both (auto | agent | handoff)
    assert env["ENGRAM_EXTRACTION"]["value"] == "auto" and env["ENGRAM_EXTRACTION_HANDOFF_MINUTES"]["value"] == "30"
    assert svc["environment"]["ENGRAM_EXTRACTION"] == "${ENGRAM_EXTRACTION:-auto}"


def test_compose_gateway_and_auth_agree_on_one_public_origin(compose: dict[str, Any]) -> None:
    gateway = compose["services"]["gateway"]["environment"]
    auth = compose["services"]["auth"]["environment"]
    # the token audience (auth: ENGRAM_PUBLIC_URL + /mcp) is the MCP URL the gateway checks
    assert gateway["ENGRAM_PUBLIC_URL"] == auth["ENGRAM_PUBLIC_URL"]
    # the proxy serves OAuth on the same origin: the issuer is the public URL, for both services
    assert gateway["ENGRAM_AUTH_PUBLIC_URL"] == auth["ENGRAM_AUTH_PUBLIC_URL"] == auth["ENGRAM_PUBLIC_URL"]
    assert "ENGRAM_RESOURCE_URL" not in auth, "derived from ENGRAM_PUBLIC_URL, as the gateway derives it"
    metadata = urlparse(gateway["ENGRAM_AUTH_METADATA_URL"])
    assert (metadata.hostname, metadata.port, metadata.path) == ("auth", AUTH_PORT, AS_METADATA_PATH), (
        "the gateway fetches the metadata inside the network"
    )
    for env in (gateway, auth):  # per-address limits need the client address the proxy saw
        assert env["ENGRAM_TRUSTED_PROXIES"]


def test_compose_proxy_routes_oauth_to_auth_and_the_rest_to_the_gateway(
    compose: dict[str, Any], oauth_paths: set[str]
) -> None:
    conf = compose_proxy_conf(compose)
    variables, routes = nginx_routes(conf)
    assert variables["auth"] == f"http://auth:{AUTH_PORT}" and variables["gateway"] == "http://gateway:8080"
    to_auth = {path for (modifier, path), upstream in routes.items() if upstream == variables["auth"]}
    assert to_auth == oauth_paths
    assert all(modifier == "=" for (modifier, path) in routes if path in oauth_paths), "exact matches only"
    for path in gateway_routes() - GATEWAY_INTERNAL - oauth_paths:
        assert nginx_destination(routes, path) == variables["gateway"], f"{path} must reach the gateway"
    # the client address the services trust is the one nginx saw, never one the client sent
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in conf


def test_compose_metrics_stay_inside_each_container(compose: dict[str, Any]) -> None:
    """Issue 29 L7: the gateway's /metrics (and /healthz, /readyz) are not proxied, and every
    service's metrics port listens on its container's loopback only."""
    variables, routes = nginx_routes(compose_proxy_conf(compose))
    for path in GATEWAY_INTERNAL | {"/metrics/", "/metrics/x", "/nonesuch"}:
        assert nginx_destination(routes, path) == "return 404", path
    assert routes[("", "/")] == "return 404", "nothing is proxied unless listed"
    for name, svc in engram_compose_services(compose).items():
        assert svc["environment"]["ENGRAM_METRICS_HOST"] == "127.0.0.1", name
        assert "9100" not in str(svc.get("ports", [])) + str(svc.get("expose", [])), name


# --- kubernetes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("folder", [K8S_BASE, K8S_PROD], ids=["base", "production"])
def test_kustomization_lists_exactly_the_files_present(folder: Path) -> None:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    local = {r for r in listed if not r.startswith("..")}
    for entry in listed:
        assert (folder / entry).exists(), f"{folder.name}/kustomization.yaml lists missing {entry}"
    present = {p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert present == local, (
        f"{folder.name}: unlisted {sorted(present - local)}, missing {sorted(local - present)}"
    )


def test_base_namespace_and_image(base_objects: list[dict[str, Any]]) -> None:
    kustomization = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == "engram"
    assert "engram" in by_kind(base_objects, "Namespace")
    images = {i["name"]: i for i in kustomization["images"]}
    assert f"{images['engram']['newName']}:{images['engram']['newTag']}" == "engram:latest"
    for _, container in engram_containers(base_objects):
        assert container["image"] == "engram", "the image is set once, by kustomize `images:`"


def test_k8s_engram_deployments_each_run_one_service(base_objects: list[dict[str, Any]]) -> None:
    seen = set()
    for deployment, container in engram_containers(base_objects):
        args = container["args"]
        assert len(args) == 2 and args[0] == "serve" and args[1] in SERVICES, args
        assert deployment["metadata"]["name"] == args[1]
        assert deployment["spec"]["replicas"] >= 2
        seen.add(args[1])
    assert seen == SERVICES


def test_k8s_pods_run_as_non_root_with_resources(base_objects: list[dict[str, Any]]) -> None:
    for kind in ("Deployment", "StatefulSet"):
        for name, obj in by_kind(base_objects, kind).items():
            pod = obj["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True, f"{kind}/{name}"
            for container in pod["containers"]:
                resources = container["resources"]
                assert {"cpu", "memory"} <= resources["requests"].keys(), f"{kind}/{name}"
                assert "memory" in resources["limits"], f"{kind}/{name}"
                assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_k8s_env_matches_the_cluster(base_objects: list[dict[str, Any]]) -> None:
    config = by_kind(base_objects, "ConfigMap")["engram-config"]["data"]
    nats = by_kind(base_objects, "StatefulSet")["nats"]
    assert config["ENGRAM_STREAM_REPLICAS"] == str(nats["spec"]["replicas"]) == "3"
    assert "ENGRAM_NATS_URL" not in config, "it carries the NATS password: a Secret"
    nats_secret = by_kind(base_objects, "Secret")["engram-nats"]["stringData"]
    nats_url = urlparse(nats_secret["ENGRAM_NATS_URL"])
    assert nats_url.scheme == "nats" and "," not in nats_secret["ENGRAM_NATS_URL"]
    assert nats_url.hostname in by_kind(base_objects, "Service")
    assert (nats_url.username, nats_url.password) == ("engram", nats_secret["NATS_PASSWORD"])
    secret = by_kind(base_objects, "Secret")["engram-db"]["stringData"]
    db = urlparse(secret["ENGRAM_DATABASE_URL"])
    assert db.hostname in by_kind(base_objects, "Service") and db.path == "/engram"
    assert db.password == secret["POSTGRES_PASSWORD"], "the database URL must carry the Postgres password"
    for deployment, container in engram_containers(base_objects):
        env = container_env(container, config)
        name = deployment["metadata"]["name"]
        assert env["ENGRAM_STREAM_REPLICAS"] == "3", name
        assert ("ENGRAM_DATABASE_URL" in env) == (name != "gateway"), (
            f"{name}: only auth and memory use Postgres"
        )
        if name == "memory":
            assert env["ENGRAM_QDRANT_URL"], "several memory replicas need a Qdrant server"
            assert urlparse(env["ENGRAM_QDRANT_URL"]).hostname in by_kind(base_objects, "Service")


def test_k8s_gateway_and_auth_agree_on_the_urls(base_objects: list[dict[str, Any]]) -> None:
    config = by_kind(base_objects, "ConfigMap")["engram-config"]["data"]
    envs = {d["metadata"]["name"]: container_env(c, config) for d, c in engram_containers(base_objects)}
    gateway, auth = envs["gateway"], envs["auth"]
    for name in ("ENGRAM_PUBLIC_URL", "ENGRAM_AUTH_PUBLIC_URL"):
        assert config[name], f"{name} is set once, in the ConfigMap"
        assert gateway[name] == auth[name] == config[name], f"{name}: gateway and auth must agree"
    assert "ENGRAM_RESOURCE_URL" not in auth, "derived from ENGRAM_PUBLIC_URL, as the gateway derives it"
    metadata = urlparse(str(gateway["ENGRAM_AUTH_METADATA_URL"]))
    service = by_kind(base_objects, "Service")[str(metadata.hostname)]
    assert service["metadata"]["name"] == "auth" and metadata.path == AS_METADATA_PATH
    assert metadata.port in {p["port"] for p in service["spec"]["ports"]}
    assert auth["ENGRAM_AUTH_HOST"] == "0.0.0.0" and auth["ENGRAM_AUTH_PORT"] == str(AUTH_PORT)
    # per-address limits: one list of trusted proxies for both (the base has no Ingress: none)
    assert gateway["ENGRAM_TRUSTED_PROXIES"] == auth["ENGRAM_TRUSTED_PROXIES"] == config["ENGRAM_TRUSTED_PROXIES"] == ""


def test_k8s_nats_cluster_routes_use_pod_dns(base_objects: list[dict[str, Any]]) -> None:
    nats = by_kind(base_objects, "StatefulSet")["nats"]
    headless = by_kind(base_objects, "Service")[nats["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    conf = by_kind(base_objects, "ConfigMap")["nats-config"]["data"]["nats.conf"]
    env = {e["name"]: e.get("value") for e in nats["spec"]["template"]["spec"]["containers"][0]["env"]}
    urls = [urlparse(str(env[r.lstrip("$")])) for r in nats_conf_routes(conf)]
    expected = {(f"nats-{i}.{headless['metadata']['name']}", 6222) for i in range(nats["spec"]["replicas"])}
    assert {(u.hostname, u.port) for u in urls} == expected
    assert {(u.username, u.password) for u in urls} == {("route", "$(NATS_CLUSTER_PASSWORD)")}
    assert "server_name: $POD_NAME" in conf
    assert [t["metadata"]["name"] for t in nats["spec"]["volumeClaimTemplates"]] == ["data"]
    for name in ("postgres", "qdrant"):
        sts = by_kind(base_objects, "StatefulSet")[name]
        assert sts["spec"]["replicas"] == 1 and sts["spec"]["volumeClaimTemplates"], name


def test_k8s_nats_requires_credentials_and_publishes_no_monitor_port(base_objects: list[dict[str, Any]]) -> None:
    """Issue 29 L7: every client and every route authenticates; the monitoring port (8222) is the
    container's loopback, probed by exec, on no Service and no container port."""
    conf = by_kind(base_objects, "ConfigMap")["nats-config"]["data"]["nats.conf"]
    check_nats_conf(conf)
    nats = by_kind(base_objects, "StatefulSet")["nats"]
    pod = nats["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["-c", "/etc/nats/nats.conf"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[next(n for n, path in mounts.items() if path == "/etc/nats")]["configMap"]["name"] == "nats-config"
    env = {e["name"]: e for e in container["env"]}
    for var in ("NATS_PASSWORD", "NATS_CLUSTER_PASSWORD"):
        assert env[var]["valueFrom"]["secretKeyRef"] == {"name": "engram-nats", "key": var}
    assert 8222 not in [p["containerPort"] for p in container["ports"]]
    for service in by_kind(base_objects, "Service").values():
        assert 8222 not in [p["port"] for p in service["spec"]["ports"]], service["metadata"]["name"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = " ".join(container[probe]["exec"]["command"])
        assert "http://127.0.0.1:8222/healthz" in command, probe
    for deployment, engram in engram_containers(base_objects):
        url = {e["name"]: e for e in engram["env"]}["ENGRAM_NATS_URL"]
        assert url["valueFrom"]["secretKeyRef"] == {"name": "engram-nats", "key": "ENGRAM_NATS_URL"}, (
            deployment["metadata"]["name"]
        )


def test_k8s_qdrant_requires_its_api_key(base_objects: list[dict[str, Any]]) -> None:
    (qdrant,) = by_kind(base_objects, "StatefulSet")["qdrant"]["spec"]["template"]["spec"]["containers"]
    key = {e["name"]: e for e in qdrant["env"]}["QDRANT__SERVICE__API_KEY"]["valueFrom"]["secretKeyRef"]
    (memory,) = by_kind(base_objects, "Deployment")["memory"]["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e for e in memory["env"]}["ENGRAM_QDRANT_API_KEY"]["valueFrom"]["secretKeyRef"] == key
    assert by_kind(base_objects, "Secret")[key["name"]]["stringData"][key["key"]]


def test_the_shipped_nats_configurations_are_valid(compose: dict[str, Any], base_objects: list[dict[str, Any]],
                                                   tmp_path: Path) -> None:
    """Both configurations are checked by the nats-server the package ships (`-t`)."""
    from deploy.embedded.nats import find_nats_server

    env = {"PATH": "/usr/bin:/bin", "NATS_PASSWORD": "p1", "NATS_CLUSTER_PASSWORD": "p2", "NATS_SERVER_NAME": "n",
           "POD_NAME": "nats-0"}
    for i in range(4):
        env[f"NATS_ROUTE_{i}"] = f"nats://route:p2@nats-{i}:6222"
    for name, conf in (("compose", compose_nats_conf(compose)),
                       ("k8s", by_kind(base_objects, "ConfigMap")["nats-config"]["data"]["nats.conf"])):
        path = tmp_path / f"{name}.conf"
        path.write_text(conf)
        result = subprocess.run([str(find_nats_server()), "-c", str(path), "-t"], env=env, capture_output=True,
                                text=True, timeout=30, check=False)
        assert result.returncode == 0 and "is valid" in result.stdout + result.stderr, (name, result.stderr)


def test_k8s_every_workload_has_a_network_policy(base_objects: list[dict[str, Any]]) -> None:
    """Issue 29 L7: each pod accepts only the peers that need it (the gateway: the Ingress
    controller, so no pod can claim a client address; metrics: Prometheus's namespace)."""
    policies = by_kind(base_objects, "NetworkPolicy")

    def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            return True
        if not selector.get("matchLabels", {}).items() <= labels.items():
            return False
        for expr in selector.get("matchExpressions", []):
            assert expr["operator"] == "In"
            if labels.get(expr["key"]) not in expr["values"]:
                return False
        return True

    def admitted(labels: dict[str, str]) -> dict[int, list[dict[str, Any]]]:
        """port -> peers allowed, over every policy selecting these pod labels."""
        found: dict[int, list[dict[str, Any]]] = {}
        chosen = [p for p in policies.values() if selects(p["spec"]["podSelector"], labels)]
        assert chosen, f"no NetworkPolicy selects {labels}"
        for policy in chosen:
            assert policy["spec"]["policyTypes"] == ["Ingress"]
            for rule in policy["spec"]["ingress"]:
                assert rule.get("from") and rule.get("ports"), f"{policy['metadata']['name']}: a rule open to all"
                for port in rule["ports"]:
                    found.setdefault(port["port"], []).extend(rule["from"])
        return found

    def pods(*names: str) -> list[dict[str, str]]:
        workloads = by_kind(base_objects, "Deployment") | by_kind(base_objects, "StatefulSet")
        return [workloads[n]["spec"]["template"]["metadata"]["labels"] for n in names]

    labels = {n: pods(n)[0] for n in [*SERVICES, "nats", "postgres", "qdrant"]}
    namespace = lambda name: {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}  # noqa: E731
    for name, pod in labels.items():
        ports = admitted(pod)
        if name in SERVICES:  # Prometheus only, from its namespace
            assert ports.pop(METRICS_PORT) == [namespace("monitoring")], name
        if name == "gateway":
            assert ports == {8080: [namespace("ingress-nginx")]}
        elif name == "auth":
            assert set(ports) == {AUTH_PORT}
        elif name in SERVICES:
            assert ports == {}, f"{name} listens on nothing but its metrics"
        else:
            peers = {"nats": {4222: SERVICES, 6222: {"nats"}}, "postgres": {5432: SERVICES - {"gateway"}},
                     "qdrant": {6333: {"memory"}, 6334: {"memory"}}}[name]
            assert set(ports) == set(peers), name
            for port, allowed in ports.items():
                assert all(set(peer) == {"podSelector"} for peer in allowed), f"{name}:{port}: pods of this namespace"
                reach = {n for n, lab in labels.items() if any(selects(p["podSelector"], lab) for p in allowed)}
                assert reach == peers[port], f"{name}:{port} is reached by {sorted(reach)}"
    for service in by_kind(base_objects, "Service").values():
        assert METRICS_PORT not in [p["port"] for p in service["spec"]["ports"]], "metrics are not a Service"


def test_k8s_gateway_probes_and_service(base_objects: list[dict[str, Any]]) -> None:
    gateway = by_kind(base_objects, "Deployment")["gateway"]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe"):
        port = container[probe]["httpGet"]["port"]
        assert ports.get(port, port) == 8080
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ENGRAM_GATEWAY_HOST"] == "0.0.0.0" and env["ENGRAM_GATEWAY_PORT"] == "8080"
    service = by_kind(base_objects, "Service")["gateway"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == 80 and ports.get(port["targetPort"], port["targetPort"]) == 8080
    assert {"/readyz", "/healthz"} <= gateway_http_paths()


@pytest.mark.parametrize("service", ["memory", "extractor"])
def test_k8s_memory_probes_run_the_probe_of_its_own_service(base_objects: list[dict[str, Any]], service: str) -> None:
    """memory and the extractor have no HTTP port: exec probes of their own process's NATS link."""
    memory = by_kind(base_objects, "Deployment")[service]["spec"]["template"]["spec"]
    container = memory["containers"][0]
    assert "ports" not in container, f"{service} has no HTTP port: exec probes"
    assert memory.get("restartPolicy", "Always") == "Always"
    check_probe_command(container["readinessProbe"]["exec"]["command"], service)
    check_probe_command(container["startupProbe"]["exec"]["command"], service)
    live = container["livenessProbe"]["exec"]["command"]
    check_probe_command(live, service)
    assert "--live" in live, "liveness must not fail a pod because NATS itself is down"
    assert "--live" not in container["readinessProbe"]["exec"]["command"]


def test_k8s_every_engram_deployment_declares_readiness_and_liveness(base_objects: list[dict[str, Any]]) -> None:
    for name in SERVICES:
        spec = by_kind(base_objects, "Deployment")[name]["spec"]["template"]["spec"]
        assert spec.get("restartPolicy", "Always") == "Always", name
        container = spec["containers"][0]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert probe in container, (name, probe)
            assert container[probe].get("timeoutSeconds", 1) >= 1


def test_k8s_auth_probes_and_service(base_objects: list[dict[str, Any]], oauth_paths: set[str]) -> None:
    auth = by_kind(base_objects, "Deployment")["auth"]
    container = auth["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert list(ports.values()) == [AUTH_PORT]
    assert "/healthz" in auth_http_paths()  # a GET exempt from the sign-in rate limit
    for probe in ("startupProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz", probe
        assert ports.get(get["port"], get["port"]) == AUTH_PORT, probe
    ready = container["readinessProbe"]["exec"]["command"]
    check_probe_command(ready, "auth", AUTH_PORT)
    assert "--http" in ready and "--live" not in ready
    service = by_kind(base_objects, "Service")["auth"]
    assert service["spec"]["selector"] == auth["spec"]["selector"]["matchLabels"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == AUTH_PORT and ports.get(port["targetPort"], port["targetPort"]) == AUTH_PORT


def test_k8s_network_policy_lets_the_gateway_and_the_ingress_reach_auth(
    base_objects: list[dict[str, Any]],
) -> None:
    policy = by_kind(base_objects, "NetworkPolicy")["engram-auth"]["spec"]
    auth_labels = by_kind(base_objects, "Deployment")["auth"]["spec"]["template"]["metadata"]["labels"]
    gateway_labels = by_kind(base_objects, "Deployment")["gateway"]["spec"]["template"]["metadata"]["labels"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["podSelector"]["matchLabels"].items() <= auth_labels.items()
    peers = []
    for rule in policy["ingress"]:
        ports = [(p["protocol"], p["port"]) for p in rule["ports"]]
        if ports == [("TCP", METRICS_PORT)]:  # Prometheus, from its own namespace only
            assert all(set(p) == {"namespaceSelector"} for p in rule["from"]), rule
            continue
        assert ports == [("TCP", AUTH_PORT)], "8081 only, beside the metrics port"
        peers.extend(rule["from"])
    assert any(p.get("podSelector", {}).get("matchLabels", {}).items() <= gateway_labels.items()
               and "namespaceSelector" not in p for p in peers if "podSelector" in p), "gateway -> auth"
    assert any("namespaceSelector" in p for p in peers), "Ingress controller -> auth"


def test_production_overlay_sources() -> None:
    kustomization = yaml.safe_load((K8S_PROD / "kustomization.yaml").read_text())
    assert "../../base" in kustomization["resources"]
    counts = {r["name"]: r["count"] for r in kustomization["replicas"]}
    assert set(counts) == SERVICES and min(counts.values()) >= 3
    patches = "\n".join(p["patch"] for p in kustomization["patches"])
    assert "ENGRAM_ENV: production" in patches and "ENGRAM_PUBLIC_URL" in patches
    assert "ENGRAM_AUTH_PUBLIC_URL" in patches
    (ingress,) = load_all(K8S_PROD / "ingress.yaml")
    assert ingress["kind"] == "Ingress"


# --- rendered by kustomize (when a tool is installed) ------------------------------------------------


def _kustomize_command() -> list[str] | None:
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return None


def render(folder: Path) -> list[dict[str, Any]]:
    command = _kustomize_command()
    if command is None:
        pytest.skip("neither kubectl nor kustomize is installed: the YAML checks above stand alone")
    proc = subprocess.run([*command, str(folder)], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_rendered_base() -> None:
    objects = render(K8S_BASE)
    assert all(
        o["metadata"].get("namespace", "engram") == "engram" for o in objects if o["kind"] != "Namespace"
    )
    for _, container in engram_containers(objects):
        assert container["image"] == "engram:latest"


def test_rendered_production_overlay(oauth_paths: set[str]) -> None:
    objects = render(K8S_PROD)
    config = by_kind(objects, "ConfigMap")["engram-config"]["data"]
    assert config["ENGRAM_ENV"] == "production"
    assert config["ENGRAM_STREAM_REPLICAS"] == "3"
    deployments = by_kind(objects, "Deployment")
    for name in SERVICES:
        assert deployments[name]["spec"]["replicas"] >= 3
    envs = {d["metadata"]["name"]: container_env(c, config) for d, c in engram_containers(objects)}
    public = urlparse(config["ENGRAM_PUBLIC_URL"])
    assert public.scheme == "https" and not public.path.strip("/")
    assert envs["gateway"]["ENGRAM_PUBLIC_URL"] == envs["auth"]["ENGRAM_PUBLIC_URL"] == config["ENGRAM_PUBLIC_URL"]
    # one origin: the Ingress serves the OAuth paths, so the issuer is the public URL
    assert envs["gateway"]["ENGRAM_AUTH_PUBLIC_URL"] == envs["auth"]["ENGRAM_AUTH_PUBLIC_URL"] == config["ENGRAM_PUBLIC_URL"]
    assert envs["gateway"]["ENGRAM_GATEWAY_HOST"] == "0.0.0.0"
    (ingress,) = by_kind(objects, "Ingress").values()
    hosts = {rule["host"] for rule in ingress["spec"]["rules"]}
    assert hosts == {public.hostname}, "the Ingress host must be the public URL's (Host allowlist)"
    assert {h for tls in ingress["spec"]["tls"] for h in tls["hosts"]} == {public.hostname}
    services = by_kind(objects, "Service")
    routes: dict[tuple[str, str], tuple[str, int]] = {}
    for rule in ingress["spec"]["rules"]:
        for entry in rule["http"]["paths"]:
            backend = entry["backend"]["service"]
            ports = {p["name"]: p["port"] for p in services[backend["name"]]["spec"]["ports"]}
            port = backend["port"].get("number") or ports[backend["port"]["name"]]
            assert port in ports.values(), entry
            routes[(entry["pathType"], entry["path"])] = (backend["name"], port)
    assert {k: v for k, v in routes.items() if v[0] == "auth"} == {("Exact", p): ("auth", AUTH_PORT) for p in oauth_paths}
    assert {v for v in routes.values() if v[0] != "auth"} == {("gateway", 80)}
    paths = [entry for rule in ingress["spec"]["rules"] for entry in rule["http"]["paths"]]
    for path in gateway_routes() - GATEWAY_INTERNAL - oauth_paths:
        assert ingress_destination(paths, path) == "gateway", f"{path} must reach the gateway"
    for path in GATEWAY_INTERNAL | {"/metrics/", "/nonesuch"}:  # issue 29 L7: not published
        assert ingress_destination(paths, path) is None, f"the Ingress publishes {path}"
    # issue 29 L7: X-Forwarded-For believed from the Ingress controller's pods, not every private range
    import ipaddress

    trusted = [ipaddress.ip_network(t.strip()) for t in config["ENGRAM_TRUSTED_PROXIES"].split(",")]
    assert trusted and all(envs[n]["ENGRAM_TRUSTED_PROXIES"] == config["ENGRAM_TRUSTED_PROXIES"] for n in ("gateway", "auth"))
    for broad in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"):
        assert not any(ipaddress.ip_network(broad).subnet_of(t) for t in trusted if t.version == ipaddress.ip_network(broad).version), broad
    assert by_kind(objects, "StatefulSet")["nats"]["spec"]["replicas"] == 3


# --- the gateway's API documents (issue 29 L7) --------------------------------------------------------


def test_the_gateway_docs_page_loads_nothing_from_elsewhere() -> None:
    """/docs is on the origin of /graph and the OAuth metadata: its swagger-ui comes from the
    package (not a CDN without integrity), and its policy runs no other script and cannot be framed."""
    from fastapi.testclient import TestClient

    from services.gateway.config import GatewaySettings
    from services.gateway.main import create_app

    client = TestClient(create_app(GatewaySettings(public_url="http://testserver")))
    page = client.get("/docs")
    assert page.status_code == 200
    references = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page.text)
    assert references and all(ref.startswith("/docs/assets/") for ref in references), references
    assert not re.search(r"https?://", page.text.replace("http://testserver", "")), "an absolute URL on the page"
    for ref in references:
        asset = client.get(ref)
        assert asset.status_code == 200 and asset.content, ref
    policy = dict(
        part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";") if part.strip()
    )
    assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    assert set(policy["script-src"].split()) - {"'self'"} and all(
        s == "'self'" or s.startswith("'sha256-") for s in policy["script-src"].split()
    ), policy["script-src"]
    assert client.get("/redoc").status_code == 404, "ReDoc loads its script from a CDN"
    assert "cdn" not in client.get("/docs/oauth2-redirect").text.lower()
