"""The memory service's daily-log lifecycle, as the extractor uses it.

Waiting for ``contracts/daily_logs.py`` (the memory side of issue 14): when it lands, this module
sends ``ClaimDailyLog`` / ``RecordExtractionResult`` / ``MarkLogProcessed`` / ``MarkLogFailed`` /
``RecoverStuckLogs`` / ``DeleteLogs`` through :class:`kit.client.Client` with the keys it is given,
and reads the claimed log (its ``turns`` and structured fields) with the daily-log query. Until
then the service refuses to start with this message instead of consuming events it cannot act on.
"""

from __future__ import annotations

from kit.client import Client
from services.extractor.application.ports import LogSource

DAILY_LOG_AGGREGATE = "dailylog"  # confirm against contracts/daily_logs.py when it lands

#: structured fields of a daily log read as the user's own words (SPEC §1)
LOG_FIELDS = ("events", "user_state", "mood_changes", "topics", "relationship_state")


class LogContractsMissing(RuntimeError):
    pass


def build_log_source(client: Client) -> LogSource:
    """The LogSource over the memory service's daily-log commands."""
    raise LogContractsMissing(
        "the extractor needs the memory service's daily-log commands (contracts/daily_logs.py), which "
        "this build does not have yet; the built-in engine and the application are ready behind "
        "services/extractor/application/ports.py:LogSource"
    )
