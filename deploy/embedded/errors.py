"""The error the embedded launchers raise, and the log excerpt it carries."""

from __future__ import annotations

from collections import deque
from pathlib import Path

__all__ = ["EmbeddedStartError", "log_tail"]

TAIL_LINES = 20


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a text file; empty if it cannot be read."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            return [line.rstrip("\n") for line in deque(fh, maxlen=lines)]
    except OSError:
        return []


class EmbeddedStartError(RuntimeError):
    """An embedded server (NATS or PostgreSQL) could not be started.

    The message says what failed, shows the last lines of the server's log (or of the command's
    output) and what to do next. The parts are also kept as attributes: ``what``, ``hint``,
    ``log_file`` and ``log_lines``.
    """

    def __init__(
        self,
        what: str,
        *,
        hint: str,
        log_file: Path | None = None,
        output: str | None = None,
    ) -> None:
        self.what = what
        self.hint = hint
        self.log_file = log_file
        if output is not None:
            self.log_lines = output.rstrip("\n").splitlines()[-TAIL_LINES:]
            source = "command output"
        elif log_file is not None:
            self.log_lines = log_tail(log_file)
            source = str(log_file)
        else:
            self.log_lines = []
            source = ""
        parts = [what]
        if self.log_lines:
            parts.append(f"--- last {len(self.log_lines)} lines of {source} ---")
            parts.extend(self.log_lines)
            parts.append("---")
        elif log_file is not None:
            parts.append(f"(the log {log_file} is empty or unreadable)")
        parts.append(f"What to do: {hint}")
        super().__init__("\n".join(parts))
