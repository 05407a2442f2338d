"""Graph service settings (environment variables with the ENGRAM_ prefix)."""

from __future__ import annotations

from pydantic import Field

from contracts.daily_logs import DEFAULT_LOG_RETENTION_DAYS
from contracts.graph import MAX_SIMILAR
from kit.config import CommonSettings


class GraphSettings(CommonSettings):
    graph_schema: str = "graph"
    graph_metrics_port: int = Field(0, ge=0, le=65535, description="/metrics port (0: off)")
    graph_similar: bool = Field(True, description="ask the memory service for each memory's nearest neighbours")
    graph_similar_limit: int = Field(5, ge=1, le=MAX_SIMILAR, description="'similar' edges per memory, at most")
    graph_similar_min_score: float = Field(0.6, ge=-1.0, le=1.0, description="cosine similarity of a 'similar' edge")
    log_retention_days: int = Field(DEFAULT_LOG_RETENTION_DAYS, ge=0,
                                    description="processed logs are deleted this long after (their nodes expire)")
