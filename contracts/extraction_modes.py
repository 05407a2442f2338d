"""Who learns from a daily log: the extraction mode, an install-wide default and a per-project setting.

* ``auto`` — the built-in pipeline (the configured engine) claims each pending log at once.
* ``agent`` — the pipeline never claims: logs wait for external extraction agents (the seed-2
  workflow: ``get_unprocessed_logs`` → ``claim_daily_log`` → save memories →
  ``record_extraction_result`` → ``mark_log_processed``).
* ``handoff`` — agents get the first chance: the pipeline takes a log nobody has claimed once it
  has been pending for the hand-off time (``ENGRAM_EXTRACTION_HANDOFF_MINUTES``).

The install default is ``ENGRAM_EXTRACTION`` (the extractor's setting); a project's own mode is set
with :class:`SetExtractionMode` (the extractor's command, an event of the ``extractionmode``
aggregate, so a replay rebuilds it) and read with :class:`GetExtractionModes`.
"""

from __future__ import annotations

from enum import StrEnum
from uuid import UUID, uuid5

from pydantic import BaseModel, ConfigDict, Field

from contracts.events import aggregate
from contracts.memory import PROJECT_PATTERN
from contracts.messages import command, query

#: The extractor's service name on the bus (as ``contracts.portability.EXTRACTOR``).
EXTRACTOR = "extractor"
EXTRACTION_MODE_SET = "extraction_mode_set"
_NS = UUID("8d7f9a43-5c1e-4b5e-9a55-3f0e2c61e7a1")


class ExtractionMode(StrEnum):
    AUTO = "auto"
    AGENT = "agent"
    HANDOFF = "handoff"


def mode_id(tenant: str, project: str) -> str:
    """The aggregate id of one project's extraction mode."""
    return str(uuid5(_NS, f"{tenant}\x00{project}"))


class ExtractionModeState(BaseModel):
    """The ``data`` of an ``extraction_mode_set`` event: the project's own mode (None: it follows
    the install default again)."""

    model_config = ConfigDict(extra="forbid")

    project: str
    mode: ExtractionMode | None = None


#: The aggregate of a project's extraction mode on the event log (its id: :func:`mode_id`).
EXTRACTION_MODE_AGGREGATE = aggregate("extractionmode", EXTRACTOR, ExtractionModeState, (EXTRACTION_MODE_SET,))


class ProjectExtractionMode(BaseModel):
    project: str
    mode: ExtractionMode = Field(description="the mode in force for the project")
    source: str = Field(description="'project': set for this project; 'install': the install default")


class ExtractionModes(BaseModel):
    """The install default, the hand-off time, and the projects that have a mode of their own."""

    default: ExtractionMode
    handoff_minutes: float
    projects: list[ProjectExtractionMode] = Field(default_factory=list)

    def of(self, project: str) -> ProjectExtractionMode:
        """The mode in force for ``project``."""
        for p in self.projects:
            if p.project == project:
                return p
        return ProjectExtractionMode(project=project, mode=self.default, source="install")


@command(EXTRACTOR, "set_extraction_mode", result=ProjectExtractionMode)
class SetExtractionMode(BaseModel):
    """Set who learns from a project's daily logs: ``auto``, ``agent`` or ``handoff``; ``mode``
    null: the project follows the install default again. Switching to ``auto`` (or to ``handoff``
    past the hand-off time) lets the pipeline take the project's logs that are waiting."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field("default", pattern=PROJECT_PATTERN)
    mode: ExtractionMode | None


@query(EXTRACTOR, "get_extraction_modes", result=ExtractionModes)
class GetExtractionModes(BaseModel):
    """The install default and every project's own mode (only the caller's project, for a
    project-restricted caller)."""

    model_config = ConfigDict(extra="forbid")


__all__ = ["EXTRACTION_MODE_AGGREGATE", "EXTRACTION_MODE_SET", "ExtractionMode", "ExtractionModeState",
           "ExtractionModes", "GetExtractionModes", "ProjectExtractionMode", "SetExtractionMode", "mode_id"]
