"""Property-based mutation of ONNX models: whatever a file holds, opening and running it ends in
success or one OnnxError, in bounded time, never another exception.

Two mutators over a handful of small valid models (one per feature the loader and executor
walk: plain ops, an If, a Loop, a local function, an initializer): raw bytes (flips,
overwrites, truncation, insertion) and protobuf fields (dims, data types, op types, attribute
values, names, input lists). The examples are drawn deterministically (the "ci" profile of
tests/conftest.py: derandomize, no database) with a fixed budget; the limits are small so a
mutation that asks for a lot is refused quickly.
"""

from __future__ import annotations

import os
import time

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, helper, numpy_helper

from tapescope.core.onnx import Limits, OnnxError, Session, default_inputs
from tests.helpers import hostile_models as hm

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LIMITS = Limits(max_elements=1 << 16, max_bytes=1 << 24, max_loop_iterations=2000,
                max_nodes=2000, max_work=1 << 28)
GUARD_S = 20  # a hang guard, not a performance claim
#: examples per mutator; raise it by hand to hunt (with --hypothesis-profile=explore for fresh
#: random draws): TAPESCOPE_ONNX_MUTATIONS=5000
EXAMPLES = int(os.environ.get("TAPESCOPE_ONNX_MUTATIONS", "300"))


def _if_model() -> ModelProto:
    x = helper.make_tensor_value_info("x", hm.F, [2, 3])
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [hm._out("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [hm._out("e")])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    return hm._model(nodes, [x], [hm._out()], [helper.make_tensor("zero", hm.F, [], [0.0])])


def _loop_model() -> ModelProto:
    body = hm._body()
    inits = [helper.make_tensor("v0", hm.F, [], [0.0]),
             helper.make_tensor("trip", hm.I64, [], [5])]
    return hm._model([helper.make_node("Loop", ["trip", "", "v0"], ["y"], body=body)], [],
                     [hm._out()], inits)


def _function_model() -> ModelProto:
    local = hm.OPSET + [helper.make_opsetid("local", 1)]
    fn = helper.make_function("local", "f", ["a"], ["b"], [
        helper.make_node("Mul", ["a", "a"], ["sq"]),
        helper.make_node("Tanh", ["sq"], ["b"])], local)
    x = helper.make_tensor_value_info("x", hm.F, [4])
    nodes = [helper.make_node("f", ["x"], ["h"], domain="local"),
             helper.make_node("Reshape", ["h", "shape"], ["r"]),
             helper.make_node("Concat", ["r", "r"], ["y"], axis=0)]
    return hm._model(nodes, [x], [hm._out()], [hm._i64("shape", [2, 2])], functions=[fn],
                     opsets=local)


def _seeds() -> list[bytes]:
    with open(os.path.join(ROOT, "resources", "models", "tiny_convnet.onnx"), "rb") as f:
        conv = f.read()
    return [conv] + [m.SerializeToString() for m in (_if_model(), _loop_model(),
                                                     _function_model())]


SEEDS = _seeds()


def _open_and_run(data: bytes, record: bool = True) -> str:
    """What ``tapescope onnx`` does with a file; 'ok' or 'OnnxError'. Anything else raises."""
    t0 = time.perf_counter()
    try:
        sess = Session(data, limits=LIMITS)
        sess.run(default_inputs(sess))
        ended = "ok"
    except OnnxError as exc:
        assert str(exc) and "\n" not in str(exc).strip(), repr(exc)
        ended = "OnnxError"
    assert time.perf_counter() - t0 < GUARD_S
    if record:
        event(ended)  # --hypothesis-show-statistics: how many mutants still run
    return ended


def test_the_seed_models_run():
    assert [_open_and_run(s, record=False) for s in SEEDS] == ["ok"] * len(SEEDS)


# ---- raw bytes ----------------------------------------------------------------------------

_edit = st.tuples(st.sampled_from(["set", "flip", "insert", "delete"]),
                  st.floats(0, 1, exclude_max=True), st.integers(0, 255))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(range(len(SEEDS))), edits=st.lists(_edit, min_size=1, max_size=6),
       cut=st.one_of(st.none(), st.floats(0, 1)))
def test_byte_mutated_models_end_in_onnx_error_or_success(seed, edits, cut):
    data = bytearray(SEEDS[seed])
    for kind, where, byte in edits:
        i = int(where * len(data))
        if kind == "set":
            data[i] = byte
        elif kind == "flip":
            data[i] ^= 1 << (byte % 8)
        elif kind == "insert":
            data[i:i] = bytes([byte])
        elif len(data) > 1:
            del data[i]
    if cut is not None:
        data = data[:int(cut * len(data))]
    _open_and_run(bytes(data))


# ---- protobuf fields --------------------------------------------------------------------------

_INTS = st.one_of(st.integers(-3, 8), st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**62,
                                                       -(2**62), 10**12, 400_000_000]))
_OPS = sorted({"Add", "MatMul", "Gemm", "Conv", "Reshape", "Expand", "Tile", "ConstantOfShape",
               "Range", "Pad", "Concat", "Loop", "If", "Gather", "Resize", "TopK", "OneHot",
               "Slice", "Transpose", "Squeeze", "Unsqueeze", "Split", "Cast", "Identity",
               "ReduceSum", "Softmax", "MaxPool", "AveragePool", "Einsum", "Where", "f"})
_DTYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT8,
           TensorProto.BOOL, TensorProto.STRING, TensorProto.FLOAT16, TensorProto.UNDEFINED,
           TensorProto.COMPLEX64, 99]


def _graphs(m: ModelProto):
    """Every graph (main, subgraphs at any depth) and every function, as node holders."""
    out, stack = [], [m.graph] + list(m.functions)
    while stack:
        g = stack.pop()
        out.append(g)
        for n in g.node:
            for a in n.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return out


def _mutate(m: ModelProto, data) -> None:
    """One field mutation chosen by ``data``."""
    holders = _graphs(m)
    g = holders[data.draw(st.integers(0, len(holders) - 1))]
    nodes = list(g.node)
    tensors = [t for t in getattr(g, "initializer", [])]
    tensors += [a.t for n in nodes for a in n.attribute if a.HasField("t")]
    infos = list(g.input) + list(g.output) if isinstance(g, GraphProto) else []
    kind = data.draw(st.sampled_from(["dims", "dtype", "op", "attr", "rename", "inputs",
                                      "opset", "declared", "raw"]))
    if kind == "dims" and tensors:
        t = data.draw(st.sampled_from(tensors))
        del t.dims[:]
        t.dims.extend(data.draw(st.lists(_INTS, max_size=4)))
    elif kind == "dtype" and tensors:
        data.draw(st.sampled_from(tensors)).data_type = data.draw(st.sampled_from(_DTYPES))
    elif kind == "raw" and tensors:
        t = data.draw(st.sampled_from(tensors))
        t.raw_data = data.draw(st.binary(max_size=64))
    elif kind == "op" and nodes:
        n = data.draw(st.sampled_from(nodes))
        n.op_type = data.draw(st.sampled_from(_OPS))
        if n.op_type == "f":
            n.domain = "local"
    elif kind == "attr" and nodes:
        n = data.draw(st.sampled_from(nodes))
        name = data.draw(st.sampled_from(["axis", "keepdims", "perm", "pads", "strides",
                                          "kernel_shape", "to", "value", "body", "group"]))
        value = data.draw(st.one_of(_INTS, st.lists(_INTS, min_size=1, max_size=4), st.just(1.5),
                                    st.just(b"s"), st.just("tensor")))
        if value == "tensor":
            value = numpy_helper.from_array(np.array(data.draw(st.lists(_INTS, min_size=1,
                                                                        max_size=3)), np.int64))
        for a in list(n.attribute):
            if a.name == name:
                n.attribute.remove(a)
        n.attribute.append(helper.make_attribute(name, value))
    elif kind == "rename" and nodes:
        n = data.draw(st.sampled_from(nodes))
        field = data.draw(st.sampled_from(["input", "output"]))
        names = getattr(n, field)
        if names:
            names[data.draw(st.integers(0, len(names) - 1))] = data.draw(
                st.sampled_from(["", "x", "y", "missing", "shape", "trip"]))
    elif kind == "inputs" and nodes:
        n = data.draw(st.sampled_from(nodes))
        if n.input and data.draw(st.booleans()):
            del n.input[-1]
        else:
            n.input.append(data.draw(st.sampled_from(["x", "", "zero", "v0", "nope"])))
    elif kind == "opset":
        m.opset_import[0].version = data.draw(st.sampled_from([1, 6, 7, 11, 13, 18, 21, 99]))
    elif kind == "declared" and infos:
        vi = data.draw(st.sampled_from(infos))
        shape = vi.type.tensor_type.shape
        del shape.dim[:]
        for d in data.draw(st.lists(_INTS, max_size=4)):
            shape.dim.add().dim_value = d
        if data.draw(st.booleans()):
            vi.type.tensor_type.elem_type = data.draw(st.sampled_from(_DTYPES))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(range(len(SEEDS))), n=st.integers(1, 3), data=st.data())
def test_field_mutated_models_end_in_onnx_error_or_success(seed, n, data):
    m = ModelProto()
    m.ParseFromString(SEEDS[seed])
    for _ in range(n):
        _mutate(m, data)
    try:
        blob = m.SerializeToString()
    except Exception:  # noqa: BLE001 - protobuf refuses to write it: nothing to open
        return
    _open_and_run(blob)
    assert AttributeProto  # (imported for readers: attribute kinds are what "attr" mutates)
