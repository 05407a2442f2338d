"""The local model server that ``tools/llm/install.sh`` installs: llama.cpp's ``llama-server`` with a
small GGUF model, on loopback, CPU only. Used by the opt-in test (``-m llm_local``) and by
``bench/llm_extraction.py``; ``python tools/llm/local_server.py`` runs it in the foreground for
``ENGRAM_EXTRACTOR_ENGINE=llm`` (docs/extraction.md, "A real local model").

Nothing here downloads anything: the binary and the model are files install.sh put in
``$ENGRAM_LLM_HOME`` (default ``~/.cache/engram/llm``); another GGUF put in its ``models/`` is
used with ``ENGRAM_LLM_MODEL_FILE=<file name>``."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

HOME = Path(os.environ.get("ENGRAM_LLM_HOME", Path.home() / ".cache" / "engram" / "llm"))
MODEL_FILE = os.environ.get("ENGRAM_LLM_MODEL_FILE", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_NAME = "smollm2-135m-instruct"  # the name the server answers to (--alias)
CONTEXT = 8192  # SmolLM2's training context
MAX_ANSWER = 512  # tokens per answer when a request names no max_tokens (the engine names its own)


def binary() -> Path:
    return HOME / "bin" / "llama-server"


def model_path() -> Path:
    return HOME / "models" / MODEL_FILE


def missing() -> str | None:
    """Why the server cannot start here, or None."""
    for what, path in (("llama-server", binary()), ("the model", model_path())):
        if not path.exists():
            return f"{what} is not installed ({path} is missing): run `make llm` (tools/llm/install.sh)"
    return None


@dataclass
class Server:
    url: str  # the OpenAI-compatible base, ending in /v1
    model: str
    threads: int
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(port: int, threads: int, context: int = CONTEXT) -> list[str]:
    return [
        str(binary()), "--model", str(model_path()), "--alias", MODEL_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads), "--threads-batch", str(threads),
        "--ctx-size", str(context), "--n-predict", str(MAX_ANSWER), "--parallel", "1", "--no-webui", "--log-disable",
    ]


@contextmanager
def running(threads: int = 2, port: int | None = None, start_timeout_s: float = 120.0,
            log: Path | None = None) -> Iterator[Server]:
    """The server started on loopback, ready (``/health`` answers 200), stopped on exit."""
    problem = missing()
    if problem:
        raise RuntimeError(problem)
    port = port or _free_port()
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    process = subprocess.Popen(command(port, threads), stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {process.returncode} while starting"
                                   + (f" (see {log})" if log else ""))
            try:
                if httpx.get(f"{base}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server not ready after {start_timeout_s:.0f} s")
            time.sleep(0.2)
        yield Server(url=f"{base}/v1", model=MODEL_NAME, threads=threads, process=process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log:
            out.close()  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8088)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    problem = missing()
    if problem:
        raise SystemExit(problem)
    print(f"ENGRAM_EXTRACTOR_ENGINE=llm ENGRAM_EXTRACTOR_LLM_URL=http://127.0.0.1:{args.port}/v1 "
          f"ENGRAM_EXTRACTOR_LLM_MODEL={MODEL_NAME}", flush=True)
    os.execv(str(binary()), command(args.port, args.threads))


if __name__ == "__main__":
    main()
