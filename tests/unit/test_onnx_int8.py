"""The int8-compute rewrite of the packaged MiniLM graph (services/memory/adapters/onnx_int8.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from services.memory.adapters import embedder as embedder_module
from services.memory.adapters.embedder import MiniLMEmbedder
from services.memory.adapters.onnx_int8 import BLOCK_SIZE, int8_matmul_model

pytestmark = pytest.mark.unit

TEXTS = [
    "Caroline: I researched adoption agencies last week. It was a lot to take in!",
    "User prefers dark mode and uses vim.",
    "我最喜欢喝绿茶",
    "",
    "Melanie: Wow, that's awesome. What did the kids think of the pottery class?",
    "word " * 120,
]


@pytest.fixture(scope="module")
def packaged() -> Path:
    return embedder_module._default_model_path()


@pytest.fixture(scope="module")
def int8() -> MiniLMEmbedder:
    return MiniLMEmbedder(cache_size=0)


@pytest.fixture(scope="module")
def fp32() -> MiniLMEmbedder:
    return MiniLMEmbedder(cache_size=0, compute="fp32")


def test_every_weight_product_is_rewritten_with_its_weights_unchanged(packaged: Path) -> None:
    original = onnx.load(str(packaged))
    data, rewritten = int8_matmul_model(packaged)
    model = onnx.load_from_string(data)
    inits = {i.name: numpy_helper.to_array(i) for i in original.graph.initializer}
    producer = {out: node for node in original.graph.node for out in node.output}
    new_inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nbits = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    assert rewritten == len(nbits) == 36  # 6 layers × (Q, K, V, attention out, FFN in, FFN out)
    # the two attention products per layer (activation × activation) stay float MatMuls
    assert sum(n.op_type == "MatMul" for n in model.graph.node) == 12
    for node in nbits:
        attrs = {a.name: a.i for a in node.attribute}
        assert attrs["bits"] == 8 and attrs["block_size"] == BLOCK_SIZE and attrs["accuracy_level"] == 4
        original_product = producer[node.output[0]]  # MatMul(x, Mul(Cast(weight_q), weight_scale))
        mul = producer[original_product.input[1]]
        name = mul.input[1].removesuffix("_scale")
        packed, scales = new_inits[node.input[1]], new_inits[node.input[2]]
        k, n = attrs["K"], attrs["N"]
        # weight = (packed - 128) * scale reproduces the shipped int8 weight times its column scale exactly
        rebuilt = (packed.reshape(n, k).astype(np.float32) - 128) * scales.reshape(n, k // BLOCK_SIZE).repeat(
            BLOCK_SIZE, axis=1
        )
        assert np.array_equal(rebuilt.T, inits[f"{name}_q"].astype(np.float32) * inits[f"{name}_scale"].reshape(1, n))


def test_a_model_without_dequantized_weights_is_left_alone(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    weight = numpy_helper.from_array(np.ones((32, 4), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [weight],
    )
    path = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(graph), str(path))
    _, rewritten = int8_matmul_model(path)
    assert rewritten == 0


def test_int8_is_the_default_and_close_to_fp32(int8: MiniLMEmbedder, fp32: MiniLMEmbedder) -> None:
    assert int8.compute == "int8" and fp32.compute == "fp32"
    assert int8.model_id != fp32.model_id
    cosines = (int8.embed(TEXTS) * fp32.embed(TEXTS)).sum(axis=1)
    assert cosines.min() > 0.998, cosines


def test_int8_vectors_do_not_depend_on_batch_mates(int8: MiniLMEmbedder) -> None:
    # replay must rebuild the same vectors: a text's vector alone, in a batch, or between other texts is bit-identical
    alone = np.vstack([int8.embed([t]) for t in TEXTS])
    batched = int8.embed(TEXTS * 7)  # 42 texts: several length-sorted chunks run side by side
    for i in range(len(TEXTS)):
        assert np.array_equal(batched[i :: len(TEXTS)], np.repeat(alone[i : i + 1], 7, axis=0))


def test_int8_keeps_meaning(int8: MiniLMEmbedder) -> None:
    dog, puppy, tax = int8.embed(["I love my dog", "I adore my puppy", "Quarterly tax filing deadline"])
    assert float(dog @ puppy) > float(dog @ tax) + 0.3


def test_unknown_compute_mode_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="compute must be one of int8, fp32"):
        MiniLMEmbedder(compute="int4")


def test_falls_back_to_fp32_with_a_warning_when_the_rewrite_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fp32: MiniLMEmbedder
) -> None:
    import services.memory.adapters.onnx_int8 as rewrite

    def broken(path: object) -> tuple[bytes, int]:
        raise RuntimeError("no kernel here")

    monkeypatch.setattr(rewrite, "int8_matmul_model", broken)
    with caplog.at_level(logging.WARNING, logger="engram.memory.embedder"):
        embedder = MiniLMEmbedder(cache_size=0)
    assert embedder.compute == "fp32" and embedder.model_id == fp32.model_id
    assert "int8 compute unavailable (RuntimeError: no kernel here); running fp32" in caplog.text
    assert np.array_equal(embedder.embed(TEXTS), fp32.embed(TEXTS))


def test_falls_back_when_int8_vectors_do_not_match_fp32(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, packaged: Path
) -> None:
    # a graph whose weights were scrambled still runs, but the start-up probe must refuse it
    import services.memory.adapters.onnx_int8 as rewrite

    real = rewrite.int8_matmul_model

    def scrambled(path: object) -> tuple[bytes, int]:
        data, count = real(path)  # type: ignore[arg-type]
        model = onnx.load_from_string(data)
        for init in model.graph.initializer:
            if init.name.endswith("_q8_weight"):
                values = numpy_helper.to_array(init)
                init.CopyFrom(numpy_helper.from_array(values[::-1].copy(), init.name))
        return model.SerializeToString(), count

    monkeypatch.setattr(rewrite, "int8_matmul_model", scrambled)
    with caplog.at_level(logging.WARNING, logger="engram.memory.embedder"):
        embedder = MiniLMEmbedder(cache_size=0)
    assert embedder.compute == "fp32"
    assert "int8 compute gives vectors unlike fp32 here" in caplog.text


def test_the_query_kernel_carries_the_same_int8_weights_and_scales(packaged: Path) -> None:
    original = onnx.load(str(packaged))
    inits = {i.name: numpy_helper.to_array(i) for i in original.graph.initializer}
    producer = {out: node for node in original.graph.node for out in node.output}
    data, rewritten = int8_matmul_model(packaged, kernel="dynamic")
    model = onnx.load_from_string(data)
    new_inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    products = [n for n in model.graph.node if n.op_type == "DynamicQuantizeMatMul"]
    assert rewritten == len(products) == 36
    assert not any(n.op_type == "MatMulNBits" for n in model.graph.node)
    for node in products:
        mul = producer[producer[node.output[0]].input[1]]  # MatMul(x, Mul(Cast(weight_q), weight_scale))
        name = mul.input[1].removesuffix("_scale")
        weight, scale, zero = (new_inits[x] for x in node.input[1:4])
        assert weight.dtype == np.int8 and np.array_equal(weight, inits[f"{name}_q"])
        assert np.array_equal(scale, inits[f"{name}_scale"].reshape(-1).astype(np.float32))
        assert not zero.any()


def test_an_unknown_kernel_is_refused(packaged: Path) -> None:
    with pytest.raises(ValueError, match="kernel must be 'blocks' or 'dynamic'"):
        int8_matmul_model(packaged, kernel="int4")


def test_queries_run_their_own_kernel_close_to_the_memories_vectors(int8: MiniLMEmbedder) -> None:
    texts = [t for t in TEXTS if t]
    queries = np.vstack([int8.embed_query(t) for t in texts])
    cosines = (queries * int8.embed(texts)).sum(axis=1)
    assert cosines.min() > 0.98, cosines
    assert not np.array_equal(queries, int8.embed(texts))  # another kernel indeed
    dog, puppy, tax = (int8.embed_query(t) for t in ("I love my dog", "I adore my puppy", "Quarterly tax filing"))
    assert float(dog @ puppy) > float(dog @ tax) + 0.3


def test_query_vectors_are_cached_until_the_cache_is_cleared() -> None:
    embedder = MiniLMEmbedder(cache_size=2)
    first = embedder.embed_query("where does Caroline live?")
    assert embedder.embed_query("where does Caroline live?") is first
    embedder.embed_query("a"), embedder.embed_query("b")  # two more: the first leaves the cache
    assert embedder.embed_query("where does Caroline live?") is not first
    again = embedder.embed_query("where does Caroline live?")
    embedder.cache_clear()  # a purge forgets every cached text, queries included
    assert embedder.embed_query("where does Caroline live?") is not again


def test_queries_fall_back_to_the_memories_kernel_when_theirs_cannot_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import services.memory.adapters.onnx_int8 as rewrite

    real = rewrite.int8_matmul_model

    def no_dynamic(path: object, kernel: str = "blocks") -> tuple[bytes, int]:
        if kernel == "dynamic":
            raise RuntimeError("no such op")
        return real(path, kernel)  # type: ignore[arg-type]

    monkeypatch.setattr(rewrite, "int8_matmul_model", no_dynamic)
    with caplog.at_level(logging.WARNING, logger="engram.memory.embedder"):
        embedder = MiniLMEmbedder(cache_size=0)
    assert embedder.compute == "int8"
    assert "the query kernel is unavailable (RuntimeError: no such op)" in caplog.text
    assert np.array_equal(embedder.embed_query(TEXTS[0]), embedder.embed([TEXTS[0]])[0])
