"""Extractor service settings (environment variables with the ENGRAM_ prefix)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contracts.extraction_modes import ExtractionMode
from kit.config import CommonSettings


class ExtractorSettings(CommonSettings):
    extractor_schema: str = "extractor"
    extractor_metrics_port: int = Field(0, ge=0, le=65535, description="/metrics port (0: off)")
    extractor_engine: Literal["builtin", "llm"] = Field(
        "builtin", description="builtin: offline rules (default); llm: an OpenAI-compatible chat endpoint"
    )
    extractor_task_id: str | None = Field(
        None, description="the task id of the continuous pipeline; default '<engine>-v1'", pattern=r"^[A-Za-z0-9_.:-]{1,64}$"
    )
    extractor_llm_url: str | None = Field(None, description="base URL of the endpoint, e.g. http://127.0.0.1:11434/v1")
    extractor_llm_model: str | None = None
    extractor_llm_api_key: str | None = None
    extractor_llm_timeout_s: float = Field(60.0, gt=0)
    extractor_llm_attempts: int = Field(3, ge=1, le=10)
    extractor_llm_max_chars: int = Field(24_000, ge=1_000, description="a larger log is split into pieces of this size")
    extractor_llm_max_tokens: int = Field(4096, ge=64, le=131_072,
                                          description="the answer's bound per piece (an answer cut there keeps its complete facts)")
    extractor_concurrency: int = Field(2, ge=1, le=32, description="logs extracted at once per replica")
    extractor_ack_wait_s: float = Field(120.0, gt=0)
    log_recover_interval_s: float = Field(300.0, gt=0, description="how often stuck logs are recovered")
    log_stuck_minutes: int = Field(30, ge=1, description="a log processing longer than this is stuck")
    log_retention_interval_s: float = Field(3600.0, gt=0, description="how often processed logs past retention go")
    extractor_consolidate_interval_s: float = Field(
        86_400.0, gt=0, description="how often each user's near-duplicate extracted memories are consolidated"
    )
    log_retention_days: int = Field(14, ge=0, description="processed logs older than this are deleted")
    extraction: ExtractionMode = Field(
        ExtractionMode.AUTO, description="who learns from daily logs by default: auto (the engine, at once), agent "
        "(external agents only), handoff (agents first, the engine after the hand-off time)")
    extraction_handoff_minutes: float = Field(30.0, gt=0, le=10_080,
                                              description="handoff mode: how long agents have a log to themselves")
    extraction_sweep_interval_s: float = Field(10.0, gt=0, description="how often waiting logs are looked at")


    @property
    def task_id(self) -> str:
        return self.extractor_task_id or f"{self.extractor_engine}-v1"

    def llm_problem(self) -> str | None:
        if self.extractor_engine == "llm" and not (self.extractor_llm_url and self.extractor_llm_model):
            return "ENGRAM_EXTRACTOR_ENGINE=llm needs ENGRAM_EXTRACTOR_LLM_URL and ENGRAM_EXTRACTOR_LLM_MODEL"
        return None
