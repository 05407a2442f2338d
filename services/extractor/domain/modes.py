"""When the pipeline may claim a pending log, by the extraction mode in force for its project
(``contracts.extraction_modes``): pure rules, no I/O."""

from __future__ import annotations

from datetime import datetime, timedelta

from contracts.extraction_modes import ExtractionMode


def claimable_from(mode: ExtractionMode, pending_since: datetime, handoff: timedelta) -> datetime | None:
    """The moment from which the pipeline may claim a log pending since ``pending_since``:
    at once (``auto``), once the hand-off time has passed (``handoff``), never (``agent``: None)."""
    if mode is ExtractionMode.AUTO:
        return pending_since
    if mode is ExtractionMode.HANDOFF:
        return pending_since + handoff
    return None


def may_claim(mode: ExtractionMode, pending_since: datetime, handoff: timedelta, now: datetime) -> bool:
    due = claimable_from(mode, pending_since, handoff)
    return due is not None and due <= now
