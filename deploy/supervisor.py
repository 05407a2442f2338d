"""Restart decisions for the processes `engram up` runs: pure, no I/O, no clock of its own.

Each supervised process (a service, the embedded NATS, the embedded Postgres) has a
:class:`Supervised` record. The process handling (deploy/stack.py) tells it what happened -
``started(now, pid)``, ``exited(now, returncode, log_tail)`` - and asks it what to do:
``due(now)`` says when a restart is due. Times are ``time.time()`` seconds given by the caller,
so the unit tests drive the clock.

The rules (:class:`RestartPolicy`):

* an unexpected exit is restarted after a delay that starts at ``initial_delay_s`` (0.5 s) and
  doubles with each exit in a row, up to ``max_delay_s`` (30 s);
* a run that lasted ``stable_after_s`` (60 s) resets that streak: the next crash is restarted
  after the initial delay again;
* a crash loop - an exit after ``crash_loop_restarts`` (5) restarts within ``crash_loop_window_s``
  (60 s) - is not restarted: the process is left down (state ``crash-looping``) and reported,
  while the others keep running. `engram up` must be restarted to try again.

Why not tenacity (already a dependency)? It retries a *call*, sleeping inside it; here nothing is
called or slept on: a loop watches several processes at once and needs a decision (restart now,
later, or give up) from an exit history and a crash-loop window, which tenacity does not model.
The backoff itself is one line (:meth:`RestartPolicy.delay`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

RUNNING = "running"
STARTING = "starting"
RESTARTING = "restarting"
CRASH_LOOPING = "crash-looping"
STOPPED = "stopped"


@dataclass(frozen=True)
class RestartPolicy:
    initial_delay_s: float = 0.5
    max_delay_s: float = 30.0
    factor: float = 2.0
    crash_loop_restarts: int = 5
    crash_loop_window_s: float = 60.0
    stable_after_s: float = 60.0

    def delay(self, streak: int) -> float:
        """The wait before the restart that follows the ``streak``-th exit in a row (1, 2, ...)."""
        return float(min(self.max_delay_s, self.initial_delay_s * self.factor ** max(0, streak - 1)))


def exit_reason(returncode: int | None) -> str:
    """``returncode`` of a child (``-N``: killed by signal N) in words."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name} (signal {-returncode})"
    return f"exited with code {returncode}"


@dataclass
class Decision:
    """What to do after an exit: restart at ``at`` (epoch seconds), or give up (``at`` is None)."""

    restart: bool
    at: float | None
    delay_s: float | None
    message: str


@dataclass
class Supervised:
    """The supervision state of one process."""

    name: str
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    state: str = STOPPED
    pid: int | None = None
    started_at: float | None = None  # of the current (or last) run
    restarts: int = 0  # restarts done since `engram up` started it
    streak: int = 0  # exits in a row without a stable run between them
    restart_times: list[float] = field(default_factory=list)
    last_exit: str | None = None
    last_exit_at: float | None = None
    last_log: list[str] = field(default_factory=list)
    next_start_at: float | None = None

    def started(self, now: float, pid: int | None) -> None:
        """The process runs (its first start, or a restart)."""
        if self.state in (RESTARTING, CRASH_LOOPING):
            self.restarts += 1
            self.restart_times.append(now)
        self.state, self.pid, self.started_at, self.next_start_at = RUNNING, pid, now, None

    def exited(self, now: float, returncode: int | None, log_tail: list[str] | None = None) -> Decision:
        """The process exited without being asked to: restart it later, or give up."""
        uptime = now - self.started_at if self.started_at is not None and self.state == RUNNING else 0.0
        self.pid = None
        self.last_exit = exit_reason(returncode) if returncode is not None else "did not start"
        self.last_exit_at = now
        self.last_log = list(log_tail or [])
        self.streak = 1 if uptime >= self.policy.stable_after_s else self.streak + 1
        recent = [t for t in self.restart_times if now - t <= self.policy.crash_loop_window_s]
        if len(recent) >= self.policy.crash_loop_restarts:
            self.state, self.next_start_at = CRASH_LOOPING, None
            return Decision(False, None, None, (
                f"the {self.name} {self._what()} {self.last_exit} after {len(recent)} restarts within "
                f"{self.policy.crash_loop_window_s:.0f} s: it is crash-looping and left down; the rest keeps "
                f"running. Read its log, fix the cause, then restart `engram up`."
            ))
        delay = self.policy.delay(self.streak)
        self.state, self.next_start_at = RESTARTING, now + delay
        return Decision(True, self.next_start_at, delay, (
            f"the {self.name} {self._what()} {self.last_exit} after {uptime:.1f} s up; "
            f"restarting it in {delay:.1f} s (restart {self.restarts + 1})"
        ))

    def start_failed(self, now: float, error: str) -> Decision:
        """A restart attempt itself failed (the process never came up): counts as an exit, and the
        attempt as a restart for the crash-loop rule (a server that cannot start is given up on)."""
        self.restart_times.append(now)
        decision = self.exited(now, None, error.splitlines()[-5:])
        self.last_exit = f"did not start: {error.splitlines()[0] if error else 'unknown error'}"
        return decision

    def due(self, now: float) -> bool:
        """Whether a restart is due now."""
        return self.state == RESTARTING and self.next_start_at is not None and now >= self.next_start_at

    def stopped(self) -> None:
        """Stopped on purpose (Ctrl-C): not an exit to react to."""
        self.state, self.pid, self.next_start_at = STOPPED, None, None

    def _what(self) -> str:
        return "server" if self.name in ("nats", "postgres") else "service"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "state": self.state, "pid": self.pid, "started_at": self.started_at,
            "restarts": self.restarts, "last_exit": self.last_exit, "last_exit_at": self.last_exit_at,
            "next_start_at": self.next_start_at, "last_log": self.last_log[-10:],
        }


def uptime_text(entry: dict[str, Any], now: float) -> str:
    """The uptime of a supervisor.json entry, for `engram status` ('-' unless running)."""
    if entry.get("state") != RUNNING or not entry.get("started_at"):
        return "-"
    seconds = max(0, int(now - float(entry["started_at"])))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
