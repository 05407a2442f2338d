"""Memory service settings (environment variables with the ENGRAM_ prefix)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from kit.config import CommonSettings


class MemorySettings(CommonSettings):
    log_retention_days: int = Field(
        14, ge=0, le=36_500, description="delete_logs' default: processed daily logs older than this many days go",
    )
    expiry_interval_s: float = Field(
        60.0, gt=0, le=86_400, description="how often the expiry round looks for memories past their forget_after "
        "that still hide what they superseded, and brings those back (seconds)",
    )
    qdrant_url: str | None = Field(None, description="Qdrant server URL; empty = embedded engine in ENGRAM_HOME")
    qdrant_collection: str = "memories"
    vector_search_threads: int = Field(
        1, ge=0, le=256, description="embedded engine only: threads searching the shard's segments; 0 = one per "
        "CPU (the engine's default). One spends the least CPU per recall on a small machine",
    )
    memory_replica: str = Field(
        "", pattern=r"^[A-Za-z0-9_-]{0,64}$",
        description="with the embedded engine and several memory replicas: this replica's name (e.g. the pod's); "
        "it keeps its own vector index, following the event log (index_follow.py). Empty: the only replica",
    )
    memory_metrics_port: int = Field(0, ge=0, le=65535, description="/metrics port (0: off)")
    qdrant_api_key: str | None = None
    embedder: str = Field("minilm", description="minilm (offline, default) | openai")
    embedder_url: str | None = None
    embedder_model: str | None = None
    embedder_dim: int | None = None
    embedder_api_key: str | None = None
    embedder_threads: int | None = None
    embedder_compute: Literal["int8", "fp32"] = Field(
        "int8", description="minilm only: int8 runs the linear layers as integer products (~1.5x faster, "
        "vectors within cosine 0.9998 of fp32); fp32 runs the packaged graph as shipped",
    )
    reranker: Literal["ms-marco-minilm", "none"] = Field(
        "ms-marco-minilm", description="cross-encoder for recall's rerank option (offline, loaded on first use); "
        "none disables the option",
    )
    rerank_candidates: int = Field(
        50, ge=1, le=100, description="how many of the best hybrid hits a rerank re-orders (at least limit); "
        "its cost grows with it (~7-10 ms per candidate on 2 cores)",
    )
    late_interaction: Literal["colbert-small", "none"] = Field(
        "colbert-small", description="token-level (late-interaction) re-ordering of hybrid recall's best "
        "candidates, from token vectors stored with each memory (LoCoMo R@5 0.650 -> ~0.72); none turns it off",
    )
    late_candidates: int = Field(
        50, ge=1, le=100, description="how many of the best hybrid hits late interaction re-orders (at least limit)",
    )
    keyword_feedback: bool = Field(
        False, description="expand hybrid recall's keywords from its best first-round hits "
        "(LoCoMo R@10 +0.015; +~7 ms per recall at 100k memories, docs/benchmarks.md)",
    )
    truth_llm_url: str | None = Field(
        None, description="an OpenAI-compatible chat endpoint (…/v1) asked for a second opinion on the pairs of "
        "memories the rules flag as perhaps changing one another; empty: flagged pairs wait for a person or agent",
    )
    truth_llm_model: str | None = Field(None, description="the model the LLM judge asks (with truth_llm_url)")
    truth_llm_api_key: str | None = None
    embedding_cache_max_entries: int = Field(
        1_000_000, ge=0, description="entries the embedding cache in Postgres keeps (~3.5 KB each, 4-6 a memory); "
        "past it the oldest added are deleted and recomputed when next needed. 0: no bound",
    )
    memory_schema: str = "memory"

    @property
    def vector_path(self) -> Path:
        """The embedded engine's shard: ``$ENGRAM_HOME/qdrant``, a further replica's ``qdrant-<replica>``."""
        if self.memory_replica in ("", "1"):
            return self.home / "qdrant"
        return self.home / f"qdrant-{self.memory_replica}"
