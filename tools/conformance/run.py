"""Run the official MCP conformance suite against a fresh `engram up` (issue 35; `make conformance`).

1. `engram up` in a temporary home (embedded NATS and Postgres, a new API key), in its own process
   group; the test stack is given a higher per-credential rate limit (below).
2. The test-only auth proxy (proxy.py) in front of it: the suite cannot send an auth header.
3. `conformance server` on every active server scenario, with expected-failures.yaml as the
   baseline: the scenarios that need the suite's own test tools, resources and prompts (each listed
   there with its reason). The suite fails the run on any other failure, and on a listed scenario
   that passes (the list must then shrink).
4. The stack stopped (SIGINT to its process group, SIGKILL after 90 s), the home removed.

Usage: .venv/bin/python tools/conformance/run.py [--scenario NAME ...] [--output DIR] [--keep-home]
Node 22 and the suite come from tools/conformance/node_modules (`make conformance` installs them).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BIN = HERE / "node_modules" / ".bin"
BASELINE = HERE / "expected-failures.yaml"

#: The suite opens a session per scenario and runs them back to back (~250 requests in a few
#: seconds, from one credential): the default per-credential limit (ENGRAM_RATE_LIMIT_PER_MINUTE=600,
#: ENGRAM_RATE_LIMIT_BURST=60, services/gateway/config.py) refuses most of them with -32000 "rate
#: limited". The test stack gets a limit the run cannot reach, through the same settings, so that
#: every scenario runs at once without pauses; the limiter itself is tested in tests/ (ratelimit).
TEST_STACK_ENV = {"ENGRAM_RATE_LIMIT_PER_MINUTE": "60000", "ENGRAM_RATE_LIMIT_BURST": "10000"}
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 90.0


def start_stack(home: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """`engram up` in ``home`` (its own process group); returns it, the MCP URL and the API key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(TEST_STACK_ENV, ENGRAM_HOME=str(home))
    log = log_path.open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "deploy", "up", "--home", str(home), "--port", "0",
                             "--auth-port", "0"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        output = log_path.read_text(errors="replace")
        if "Press Ctrl-C to stop" in output:
            url = re.search(r"MCP URL:\s+(\S+)", output)
            key = re.search(r"API key:\s+(egm_\S+)", output)
            if not (url and key):
                stop_stack(proc)
                raise RuntimeError(f"engram up printed no MCP URL or API key:\n{output}")
            return proc, url.group(1), key.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    stop_stack(proc)
    raise RuntimeError(f"engram up did not start:\n{log_path.read_text(errors='replace')}")


def stop_stack(proc: subprocess.Popen[bytes]) -> None:
    """Stop what start_stack started, and only that: its process group."""
    if proc.poll() is not None:
        return
    pgid = os.getpgid(proc.pid)
    os.killpg(pgid, signal.SIGINT)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=30)


def run_suite(url: str, scenarios: list[str], output: Path) -> int:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    base = [str(BIN / "conformance"), "server", "--url", url, "-o", str(output)]
    if not scenarios:  # every active scenario, against the baseline of those that do not apply
        return subprocess.call([*base, "--expected-failures", str(BASELINE)], env=env)
    worst = 0
    for scenario in scenarios:
        worst = max(worst, subprocess.call([*base, "--scenario", scenario], env=env))
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", action="append", default=[], help="only this scenario (repeatable)")
    parser.add_argument("--output", type=Path, help="keep the suite's checks.json files here")
    parser.add_argument("--keep-home", action="store_true", help="keep the temporary home (logs) after the run")
    args = parser.parse_args()
    if not (BIN / "conformance").exists():
        print("the conformance suite is not installed: run `make conformance` (needs npm)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    from proxy import ProxyThread

    home = Path(tempfile.mkdtemp(prefix="engram-conformance-"))
    output = args.output or home / "results"
    started = time.monotonic()
    proc, mcp_url, key = start_stack(home / "home", home / "up.log")
    proxy = None
    code = 1
    try:
        print(f"== engram up ready in {time.monotonic() - started:.1f} s ({mcp_url})", flush=True)
        proxy = ProxyThread(mcp_url.removesuffix("/mcp"), key)
        proxy_url = proxy.start() + "/mcp"
        began = time.monotonic()
        code = run_suite(proxy_url, args.scenario, output)
        print(f"== conformance suite: exit {code} in {time.monotonic() - began:.1f} s", flush=True)
    finally:
        if proxy is not None:
            proxy.stop()
        stop_stack(proc)
    if code == 0 and not args.keep_home:
        shutil.rmtree(home, ignore_errors=True)
    else:
        print(f"== kept {home} (up.log: the stack's output; results: {output})", flush=True)
    return code

if __name__ == "__main__":
    sys.exit(main())
