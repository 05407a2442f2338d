"""MiniLM embedder on the bundled int8 ONNX model (loaded from local files)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np
import pytest

from services.memory.adapters.embedder import (
    EMBEDDER_KINDS,
    Embedder,
    EmbeddingError,
    MiniLMEmbedder,
    OpenAICompatibleEmbedder,
    build_embedder,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_shape_dtype_and_dim(embedder: MiniLMEmbedder) -> None:
    out = embedder.embed(["hello world", "another"])
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 384
    assert out.shape == (2, 384)
    assert out.dtype == np.float32


def test_rows_are_unit_norm(embedder: MiniLMEmbedder) -> None:
    out = embedder.embed(["short", "a somewhat longer sentence about gardening", "", "绿茶"])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_empty_input_list(embedder: MiniLMEmbedder) -> None:
    assert embedder.embed([]).shape == (0, 384)


def test_empty_string_gives_a_valid_vector(embedder: MiniLMEmbedder) -> None:
    out = embedder.embed([""])
    assert np.isfinite(out).all()
    assert abs(float(np.linalg.norm(out[0])) - 1.0) < 1e-5


def test_semantic_similarity(embedder: MiniLMEmbedder) -> None:
    dog, puppy, tax = embedder.embed(["I love my dog", "I adore my puppy", "Quarterly tax filing deadline"])
    assert float(dog @ puppy) > float(dog @ tax) + 0.3


def test_batch_equals_single_calls(embedder: MiniLMEmbedder) -> None:
    texts = ["I love my dog", "Quarterly tax filing deadline", "", "我最喜欢喝绿茶", "x " * 40]
    batch = embedder.embed(texts)
    singles = np.vstack([embedder.embed([t]) for t in texts])
    np.testing.assert_allclose(batch, singles, atol=1e-4)


def test_order_is_preserved_for_mixed_lengths(embedder: MiniLMEmbedder) -> None:
    texts = [
        "a very long sentence " * 30,
        "tiny",
        "a medium length sentence about hiking in the alps",
        "",
        "word " * 100,
    ] * 9  # 45 texts: more than one internal length-sorted chunk
    batch = embedder.embed(texts)
    for i, text in enumerate(texts[:5]):
        expected = embedder.embed([text])[0]
        for j in range(i, len(texts), 5):
            np.testing.assert_allclose(batch[j], expected, atol=1e-4)


def test_truncation_to_max_length() -> None:
    short = MiniLMEmbedder(max_length=8, cache_size=0)
    a = short.embed(["one two three four five six seven eight nine ten eleven"])
    b = short.embed(["one two three four five six seven eight nine ten eleven twelve thirteen"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_single_text_cache_returns_equal_but_independent_arrays(embedder: MiniLMEmbedder) -> None:
    first = embedder.embed(["cached query"])
    first[0, 0] = 42.0  # caller mutation must not poison the cache
    second = embedder.embed(["cached query"])
    assert second[0, 0] != 42.0
    np.testing.assert_allclose(np.linalg.norm(second), 1.0, atol=1e-5)


def test_single_str_is_rejected(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(TypeError):
        embedder.embed("not a list")  # type: ignore[arg-type]


def test_build_embedder_minilm() -> None:
    built = build_embedder("minilm", threads=1)
    assert isinstance(built, MiniLMEmbedder)
    assert built.embed(["x"]).shape == (1, 384)


def test_build_embedder_openai_constructs_without_network() -> None:
    built = build_embedder("openai", base_url="http://127.0.0.1:9/v1", model="m", dim=8)
    assert isinstance(built, OpenAICompatibleEmbedder)
    assert built.dim == 8
    built.close()


def test_build_embedder_unknown_kind_names_allowed_kinds() -> None:
    with pytest.raises(ValueError) as info:
        build_embedder("nope")
    for kind in EMBEDDER_KINDS:
        assert kind in str(info.value)


class _EmbeddingsHandler(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible /embeddings endpoint (real HTTP, in a thread)."""

    requests: ClassVar[list[tuple[str, dict[str, str], dict[str, object]]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, dict(self.headers), body))
        if body["model"] == "broken":
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"model is loading")
            return
        # Deliberately out of order and unnormalised: the client must sort and normalise.
        data = [
            {"index": i, "embedding": [float(i + 1), 0.0, 0.0, float(len(t))]}
            for i, t in enumerate(body["input"])
        ]
        payload = json.dumps({"object": "list", "data": list(reversed(data))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def embeddings_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_compatible_request_and_response(embeddings_server: str) -> None:
    _EmbeddingsHandler.requests.clear()
    emb = OpenAICompatibleEmbedder(embeddings_server + "/", "text-embed", dim=4, api_key="sk-test")
    out = emb.embed(["a", "bbb"])
    emb.close()
    path, headers, body = _EmbeddingsHandler.requests[-1]
    assert path == "/v1/embeddings"
    assert body == {"model": "text-embed", "input": ["a", "bbb"]}
    assert headers["Authorization"] == "Bearer sk-test"
    assert out.dtype == np.float32 and out.shape == (2, 4)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(out[0], np.array([1.0, 0, 0, 1.0]) / np.sqrt(2), atol=1e-6)  # index 0 first


def test_openai_compatible_without_api_key_sends_no_auth(embeddings_server: str) -> None:
    _EmbeddingsHandler.requests.clear()
    emb = OpenAICompatibleEmbedder(embeddings_server, "m", dim=4)
    emb.embed(["x"])
    emb.close()
    assert "Authorization" not in _EmbeddingsHandler.requests[-1][1]


def test_openai_compatible_http_error_is_clear(embeddings_server: str) -> None:
    emb = OpenAICompatibleEmbedder(embeddings_server, "broken", dim=4)
    with pytest.raises(EmbeddingError, match=r"HTTP 503.*model is loading"):
        emb.embed(["x"])
    emb.close()


def test_openai_compatible_dimension_mismatch(embeddings_server: str) -> None:
    emb = OpenAICompatibleEmbedder(embeddings_server, "m", dim=8)
    with pytest.raises(EmbeddingError, match="expected"):
        emb.embed(["x"])
    emb.close()


def test_openai_compatible_unreachable_server() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    emb = OpenAICompatibleEmbedder(f"http://127.0.0.1:{port}", "m", dim=4, timeout=2.0)
    with pytest.raises(EmbeddingError, match="failed"):
        emb.embed(["x"])
    emb.close()
