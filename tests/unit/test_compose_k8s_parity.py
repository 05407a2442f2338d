"""Compose and Kubernetes run the same containers: each Engram service's container spec in the
kustomize base (rendered by `kubectl kustomize` when kubectl or kustomize is installed, else read
from the YAML files) is diffed against the one deploy/compose/docker-compose.yml runs — the file
`make compose-test` brings up in podman and checks — with the image's own settings (Dockerfile:
ENTRYPOINT, USER, ENV, VOLUME) under both:

* command: compose's `command` is the container's `args` (the image's entrypoint, `engram`, kept);
* env: every ENGRAM_* variable the service reads (its settings class), present in both, with the
  same value — a secret in compose (`${...PASSWORD}`, `${QDRANT_API_KEY}`) is a Secret in
  Kubernetes — except the differences listed in INTENDED, each with its reason;
* probes: compose's healthcheck is the readiness probe (the same exec command, or an HTTP GET of
  the same path and port);
* securityContext: the image's numeric user is the pod's runAsUser/runAsGroup; compose's read_only,
  cap_drop ALL and no-new-privileges are readOnlyRootFilesystem, capabilities.drop ALL and
  allowPrivilegeEscalation false;
* volumes: the same writable paths (/data, /tmp).

A change to one that the other does not follow fails here, unless it is added to INTENDED.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.unit.test_deploy_manifests import (
    COMPOSE_FILE,
    K8S_BASE,
    ROOT,
    by_kind,
    container_env,
    engram_compose_services,
    load_all,
    readers,
    yaml_files,
)

pytestmark = pytest.mark.unit

#: (service, variable) -> why compose and Kubernetes set it differently. Nothing else may differ.
INTENDED: dict[tuple[str, str], str] = {
    **{(s, "ENGRAM_METRICS_HOST"): "compose: the container's loopback (no Prometheus on its networks); "
       "Kubernetes: 0.0.0.0, admitted from the monitoring namespace by NetworkPolicy"
       for s in ("gateway", "auth", "memory", "extractor", "graph")},
    **{(s, "ENGRAM_TRUSTED_PROXIES"): "compose: the proxy's fixed address; the base has no Ingress (the "
       "production overlay sets the controller's pod range)" for s in ("gateway", "auth")},
    **{(s, "ENGRAM_AUTH_PUBLIC_URL"): "compose serves OAuth on the proxy's one origin; the base reaches "
       "auth through its own port-forward (8081)" for s in ("gateway", "auth")},
    ("gateway", "ENGRAM_ALLOWED_HOSTS"): "Kubernetes: in-cluster clients call the gateway Service by name",
    ("auth", "ENGRAM_ALLOW_SIGNUP"): "compose: a .env switch (false by default, the setting's default); "
    "Kubernetes keeps the default",
}
SECRET_IN_COMPOSE = re.compile(r"\$\{(NATS_PASSWORD|POSTGRES_PASSWORD|QDRANT_API_KEY)\b")


def k8s_objects() -> list[dict[str, Any]]:
    for tool in (["kubectl", "kustomize"], ["kustomize", "build"]):
        if shutil.which(tool[0]):
            proc = subprocess.run([*tool, str(K8S_BASE)], capture_output=True, text=True, timeout=60, check=False)
            assert proc.returncode == 0, proc.stderr
            return [d for d in yaml.safe_load_all(proc.stdout) if d]
    return [doc for path in yaml_files(K8S_BASE) if path.name != "kustomization.yaml" for doc in load_all(path)]


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict[str, Any]]:
    """service -> (pod spec, its one container) of each Engram Deployment."""
    objects = k8s_objects()
    found = {}
    for name, deployment in by_kind(objects, "Deployment").items():
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        if container["image"].split(":")[0].rsplit("/", 1)[-1] == "engram":
            found[name] = {"pod": spec, "container": container,
                           "config": by_kind(objects, "ConfigMap")["engram-config"]["data"]}
    return found


@pytest.fixture(scope="module")
def compose_services() -> dict[str, dict[str, Any]]:
    return engram_compose_services(load_all(COMPOSE_FILE)[0])


@pytest.fixture(scope="module")
def image() -> dict[str, Any]:
    """What the Dockerfile gives every container: entrypoint, user, environment, volumes."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in re.findall(r"^ENV (.+)$", text, re.MULTILINE):
        env.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    (user,) = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    uid, _, gid = user.partition(":")
    return {"entrypoint": yaml.safe_load(re.findall(r"^ENTRYPOINT (.+)$", text, re.MULTILINE)[-1]), "env": env,
            "uid": int(uid), "gid": int(gid or uid), "volumes": set(re.findall(r"^VOLUME (\S+)$", text, re.MULTILINE))}


def interpolated_default(value: Any) -> str:
    """A compose value as a Docker user who sets nothing gets it: `${VAR:-default}` is its default."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))


def test_every_engram_service_is_in_both(k8s: dict[str, Any], compose_services: dict[str, Any]) -> None:
    assert set(k8s) == set(compose_services) == {"gateway", "auth", "memory", "extractor", "graph"}


def test_the_same_command(k8s: dict[str, Any], compose_services: dict[str, Any], image: dict[str, Any]) -> None:
    assert image["entrypoint"] == ["engram"]
    for name, svc in compose_services.items():
        container = k8s[name]["container"]
        assert "command" not in container and "entrypoint" not in svc, f"{name}: the image's entrypoint is kept"
        assert container["args"] == svc["command"] == ["serve", name], name


def test_the_same_environment(k8s: dict[str, Any], compose_services: dict[str, Any], image: dict[str, Any]) -> None:
    read_by = readers()
    differences = {}
    for name, svc in compose_services.items():
        compose_env = {**image["env"], **{k: v for k, v in svc["environment"].items()}}
        k8s_env = {**image["env"], **container_env(k8s[name]["container"], k8s[name]["config"])}
        for var in sorted({v for v, services in read_by.items() if name in services}):
            if (name, var) in INTENDED:
                continue
            here, there = compose_env.get(var), k8s_env.get(var, "<unset>")
            if here is not None and SECRET_IN_COMPOSE.search(str(here)):
                if there is not None:
                    differences[(name, var)] = (here, f"{there!r}: not from a Secret")
                continue
            if var not in compose_env and var not in k8s_env:
                continue
            if (interpolated_default(here) if here is not None else "<unset>") != there:
                differences[(name, var)] = (here, there)
    assert not differences, "compose and Kubernetes differ (add a reason to INTENDED if on purpose): " + "\n".join(
        f"{s} {v}: compose {c!r}, k8s {k!r}" for (s, v), (c, k) in differences.items())


def test_the_intended_differences_still_differ(k8s: dict[str, Any], compose_services: dict[str, Any]) -> None:
    for (name, var), reason in INTENDED.items():
        here = compose_services[name]["environment"].get(var)
        there = container_env(k8s[name]["container"], k8s[name]["config"]).get(var)
        assert interpolated_default(here) != str(there), f"{name} {var} no longer differs: drop it ({reason})"


def compose_readiness(svc: dict[str, Any]) -> tuple[Any, ...]:
    test = svc["healthcheck"]["test"]
    assert test[0] == "CMD", test
    command = test[1:]
    if command[:2] == ["python", "-c"]:
        (url,) = re.findall(r"'(http://127\.0\.0\.1:\d+/\S*)'", command[2])
        port, path = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/\S*)", url).groups()  # type: ignore[union-attr]
        return ("http", path, int(port))
    return ("exec", *command)


def k8s_probe(probe: dict[str, Any], container: dict[str, Any]) -> tuple[Any, ...]:
    if "httpGet" in probe:
        port = probe["httpGet"]["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in container["ports"] if p["name"] == port)
        return ("http", probe["httpGet"]["path"], int(port))
    return ("exec", *probe["exec"]["command"])


def test_the_healthcheck_is_the_readiness_probe(k8s: dict[str, Any], compose_services: dict[str, Any]) -> None:
    for name, svc in compose_services.items():
        container = k8s[name]["container"]
        assert compose_readiness(svc) == k8s_probe(container["readinessProbe"], container), name


def test_the_same_user_and_privileges(k8s: dict[str, Any], compose_services: dict[str, Any], image: dict[str, Any]) -> None:
    assert image["uid"] != 0
    for name, svc in compose_services.items():
        pod = k8s[name]["pod"]["securityContext"]
        container = k8s[name]["container"]["securityContext"]
        assert "user" not in svc, f"{name}: compose runs the image's user"
        assert pod["runAsNonRoot"] is True and (pod["runAsUser"], pod["runAsGroup"]) == (image["uid"], image["gid"]), name
        assert svc.get("read_only") is True and container["readOnlyRootFilesystem"] is True, name
        assert svc.get("cap_drop") == ["ALL"] and container["capabilities"]["drop"] == ["ALL"], name
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        assert container["allowPrivilegeEscalation"] is False, name


def test_the_same_writable_paths(k8s: dict[str, Any], compose_services: dict[str, Any], image: dict[str, Any]) -> None:
    for name, svc in compose_services.items():
        compose_paths = set(image["volumes"]) | set(svc.get("tmpfs", []))
        compose_paths |= {str(v).split(":")[1] for v in svc.get("volumes", [])}
        k8s_paths = {m["mountPath"] for m in k8s[name]["container"]["volumeMounts"]}
        assert compose_paths == k8s_paths == {"/data", "/tmp"}, (name, compose_paths, k8s_paths)
