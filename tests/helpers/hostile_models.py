"""Hostile ONNX models, built by the tests themselves: each is small (well under 1 MB) and, run
naively, would allocate gigabytes, loop forever or blow up while inlining.

``CASES`` maps a case name to ``build(folder) -> (path, feeds or None)``; ``feeds=None`` means
"let the executor generate inputs from the declared shapes" (what ``tapescope onnx`` does).
``run_case`` is what the child process of the budget tests runs for each case.
"""

from __future__ import annotations

import os
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
OPSET = [helper.make_opsetid("", 17)]


def _save(model, folder: str, name: str) -> str:
    path = os.path.join(folder, f"{name}.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def _model(nodes, inputs, outputs, inits=(), functions=(), opsets=None):
    g = helper.make_graph(nodes, "hostile", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=opsets or OPSET, functions=list(functions))


def _i64(name: str, values) -> TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _out(name="y", elem=F):
    """An output of any shape (the checker wants a shape field; an empty one says nothing)."""
    vi = helper.make_tensor_value_info(name, elem, None)
    vi.type.tensor_type.shape.SetInParent()
    return vi


def constant_of_shape(folder):
    """ConstantOfShape of 4e8 float32 elements: 1.6 GB from a 100-byte model."""
    m = _model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
               [], [_out()], [_i64("s", [400_000_000])])
    return _save(m, folder, "cos"), {}


def constant_of_shape_runtime(folder):
    """The same, with the shape computed at run time from an input (no constant folding)."""
    x = helper.make_tensor_value_info("x", I64, [1])
    nodes = [helper.make_node("Mul", ["x", "k"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")]
    m = _model(nodes, [x], [_out()], [_i64("k", [400_000_000])])
    return _save(m, folder, "cos_rt"), {"x": np.array([1], np.int64)}


def _declared(folder, name, dims):
    x = helper.make_tensor_value_info("x", F, dims)
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [_out()])
    return _save(m, folder, name), None


def declared_dim_3e8(folder):
    """A graph input declared [300000000]: generating it costs 1.2 GB (2.4 GB as float64)."""
    return _declared(folder, "dim3e8", [300_000_000])


def declared_dim_1e12(folder):
    """A declared dim of 1e12."""
    return _declared(folder, "dim1e12", [1_000_000_000_000])


def declared_dim_negative(folder):
    """A declared dim of -5."""
    return _declared(folder, "dimneg", [-5])


def _body(p: str = ""):
    """A Loop body that keeps its condition and adds 1 to a carried scalar (names prefixed)."""
    ins = [helper.make_tensor_value_info(f"{p}i", I64, []),
           helper.make_tensor_value_info(f"{p}c", TensorProto.BOOL, []),
           helper.make_tensor_value_info(f"{p}v", F, [])]
    outs = [helper.make_tensor_value_info(f"{p}c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info(f"{p}v_out", F, [])]
    nodes = [helper.make_node("Identity", [f"{p}c"], [f"{p}c_out"]),
             helper.make_node("Add", [f"{p}v", f"{p}one"], [f"{p}v_out"])]
    return helper.make_graph(nodes, f"{p}body", ins, outs,
                             [helper.make_tensor(f"{p}one", F, [], [1.0])])


def _loop_model(folder, name, trip, cond=True, nested=False):
    """Loop(trip, cond) over ``_body``; ``nested``: the body runs an inner loop of the same
    trip count instead of adding 1."""
    body = _body()
    if nested:
        inner = helper.make_node("Loop", ["trip", "", "v"], ["w"], body=_body("in_"),
                                 name="inner")
        body = helper.make_graph(
            [helper.make_node("Identity", ["c"], ["c_out"]), inner,
             helper.make_node("Identity", ["w"], ["v_out"])], "outer_body",
            list(body.input), list(body.output))
    inits = [helper.make_tensor("v0", F, [], [0.0])]
    ins = ["trip" if trip is not None else "", "cond" if cond is not None else "", "v0"]
    if trip is not None:
        inits.append(helper.make_tensor("trip", I64, [], [trip]))
    if cond is not None:
        inits.append(helper.make_tensor("cond", TensorProto.BOOL, [], [cond]))
    m = _model([helper.make_node("Loop", ins, ["y"], body=body, name="spin")], [], [_out()],
               inits)
    return _save(m, folder, name), {}


def slow_loop(folder, n=128, trip=100_000):
    """A legitimate but slow model: 100 000 iterations (the default limit) of a 128x128
    reference-order MatMul, minutes in all: only Cancel stops it early."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("MatMul", ["v", "v"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", F, [n, n])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [n, n])])
    inits = [numpy_helper.from_array(np.full((n, n), 0.01, np.float32), "v0"),
             helper.make_tensor("trip", I64, [], [trip])]
    m = _model([helper.make_node("Loop", ["trip", "", "v0"], ["y"], body=body, name="slow")],
               [], [_out()], inits)
    return _save(m, folder, "slow"), {}


def loop_huge_trip(folder):
    """Loop with a trip count of 2**62."""
    return _loop_model(folder, "loop_trip", 2**62)


def loop_always_true(folder):
    """Loop with no trip count and a condition that stays true."""
    return _loop_model(folder, "loop_true", None, True)


def loop_nested(folder):
    """Two nested loops of 50 000 iterations each: 2.5e9 iterations in all."""
    return _loop_model(folder, "loop_nested", 50_000, None, nested=True)


def nested_functions(folder, depth=40):
    """Local function f_k calls f_{k+1} twice: 2**40 nodes once inlined."""
    fns = []
    for k in range(depth):
        if k == depth - 1:
            nodes = [helper.make_node("Relu", ["a"], ["b"])]
        else:
            nodes = [helper.make_node(f"f{k + 1}", ["a"], ["t"], domain="local"),
                     helper.make_node(f"f{k + 1}", ["t"], ["b"], domain="local")]
        fns.append(helper.make_function("local", f"f{k}", ["a"], ["b"], nodes,
                                        OPSET + [helper.make_opsetid("local", 1)]))
    x = helper.make_tensor_value_info("x", F, [2])
    m = _model([helper.make_node("f0", ["x"], ["y"], domain="local")], [x], [_out()],
               functions=fns, opsets=OPSET + [helper.make_opsetid("local", 1)])
    return _save(m, folder, "fns"), {"x": np.ones(2, np.float32)}


def broadcast_outer(folder):
    """Add of a (N,1) and a (1,N) made by Expand of a scalar: 1e10 elements."""
    n = 100_000
    nodes = [helper.make_node("Expand", ["one", "sa"], ["a"]),
             helper.make_node("Expand", ["one", "sb"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"], name="outer")]
    inits = [helper.make_tensor("one", F, [], [1.0]), _i64("sa", [n, 1]), _i64("sb", [1, n])]
    return _save(_model(nodes, [], [_out()], inits), folder, "outer"), {}


def tile_huge(folder):
    """Tile of a 4-element tensor by 1e9."""
    nodes = [helper.make_node("Tile", ["x", "r"], ["y"], name="tile")]
    inits = [helper.make_tensor("x", F, [4], [1, 2, 3, 4]), _i64("r", [1_000_000_000])]
    return _save(_model(nodes, [], [_out()], inits), folder, "tile"), {}


def range_huge(folder):
    """Range(0, 1e10, 1)."""
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["y"], name="range")]
    inits = [helper.make_tensor("a", F, [], [0.0]), helper.make_tensor("b", F, [], [1e10]),
             helper.make_tensor("d", F, [], [1.0])]
    return _save(_model(nodes, [], [_out()], inits), folder, "range"), {}


def pad_huge(folder):
    """Pad a 2x2 by 2e4 on every side: 1.6e9 elements."""
    nodes = [helper.make_node("Pad", ["x", "p"], ["y"], name="pad")]
    inits = [helper.make_tensor("x", F, [2, 2], [1, 2, 3, 4]),
             _i64("p", [20_000, 20_000, 20_000, 20_000])]
    return _save(_model(nodes, [], [_out()], inits), folder, "pad"), {}


def many_small_doublings(folder):
    """Concat(x, x) thirty times: each tensor is within any per-tensor cap until the last few,
    and their sum is 2**31 floats."""
    nodes, prev = [], "x0"
    for k in range(30):
        nodes.append(helper.make_node("Concat", [prev, prev], [f"x{k + 1}"], axis=0))
        prev = f"x{k + 1}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    inits = [helper.make_tensor("x0", F, [2], [1.0, 2.0])]
    return _save(_model(nodes, [], [_out()], inits), folder, "doublings"), {}


def erf_chain(folder, n=1 << 24, links=12):
    """A scalar expanded to 16M elements (within max-elements) and then twelve Erfs: refmath's
    erf takes ~0.4 us an element here, so over a minute of work from 300 bytes."""
    nodes = [helper.make_node("Expand", ["one", "s"], ["e0"])]
    for k in range(links):
        nodes.append(helper.make_node("Erf", [f"e{k}"], [f"e{k + 1}"], name=f"erf{k}"))
    nodes.append(helper.make_node("ReduceSum", [f"e{links}"], ["y"], keepdims=0))
    inits = [helper.make_tensor("one", F, [], [0.5]), _i64("s", [n])]
    return _save(_model(nodes, [], [_out()], inits), folder, "erf_chain"), {}


def loop_heavy_body(folder, n=1 << 20):
    """100 000 iterations (the default loop limit) of a body that takes Exp of a 1M-element
    tensor from the outer scope: hours of work within the iteration limit."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Exp", ["big"], ["ex"]),
         helper.make_node("ReduceSum", ["ex"], ["v_out"], keepdims=0)], "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", F, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [])])
    nodes = [helper.make_node("Expand", ["one", "s"], ["big"]),
             helper.make_node("Loop", ["trip", "", "v0"], ["y"], body=body, name="heavy")]
    inits = [helper.make_tensor("one", F, [], [0.5]), _i64("s", [n]),
             helper.make_tensor("v0", F, [], [0.0]), helper.make_tensor("trip", I64, [], [100_000])]
    return _save(_model(nodes, [], [_out()], inits), folder, "loop_heavy"), {}


def matmul_chain(folder, n=4096, links=8):
    """A 4096x4096 matrix (16M elements, within max-elements) squared eight times in the
    reference order: 5e11 multiply-adds."""
    nodes = [helper.make_node("Expand", ["one", "s"], ["m0"])]
    for k in range(links):
        nodes.append(helper.make_node("MatMul", [f"m{k}", f"m{k}"], [f"m{k + 1}"],
                                      name=f"mm{k}"))
    nodes.append(helper.make_node("ReduceSum", [f"m{links}"], ["y"], keepdims=0))
    inits = [helper.make_tensor("one", F, [], [1e-3]), _i64("s", [n, n])]
    return _save(_model(nodes, [], [_out()], inits), folder, "matmul_chain"), {}


def loop_scan_outputs(folder, n=1 << 20, trip=2000):
    """A Loop whose body emits a 1M-element scan output each of 2000 iterations: 8 GB of
    stacked outputs, each iteration cheap and within every per-tensor limit."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Expand", ["one", "s"], ["part"])], "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("part", F, [n])])
    inits = [helper.make_tensor("one", F, [], [0.5]), _i64("s", [n]),
             helper.make_tensor("trip", I64, [], [trip])]
    m = _model([helper.make_node("Loop", ["trip", ""], ["y"], body=body, name="emit")], [],
               [_out()], inits)
    return _save(m, folder, "loop_scan"), {}


def _sequence_loop(folder, name, n):
    """A Loop of 100 000 iterations appending an n-element tensor to a carried sequence."""
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Expand", ["one", "s"], ["t"]),
         helper.make_node("SequenceInsert", ["seq", "t"], ["seq_out"])], "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_value_info("seq", seq_t)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_value_info("seq_out", seq_t)])
    nodes = [helper.make_node("SequenceEmpty", [], ["seq0"], dtype=F),
             helper.make_node("Loop", ["trip", "", "seq0"], ["seq_y"], body=body, name="grow"),
             helper.make_node("SequenceLength", ["seq_y"], ["y"])]
    inits = [helper.make_tensor("one", F, [], [0.5]), _i64("s", [n]),
             helper.make_tensor("trip", I64, [], [100_000])]
    m = _model(nodes, [], [_out("y", I64)], inits)
    return _save(m, folder, name), {}


def loop_sequence_small(folder):
    """A carried sequence growing by one scalar per iteration: each SequenceInsert copies the
    list, so the work grows with the square of the iterations (5e9 list entries copied in
    100 000 iterations); the executor must not walk the whole sequence again either."""
    return _sequence_loop(folder, "seq_small", 1)


def loop_sequence_big(folder):
    """A carried sequence growing by a 1 MB tensor per iteration: the tensors stay alive in
    the sequence after each body run ends."""
    return _sequence_loop(folder, "seq_big", 1 << 18)


def cast_to_string(folder, n=1 << 24):
    """16M floats (within max-elements) cast to strings: one Python string object each."""
    nodes = [helper.make_node("Expand", ["one", "s"], ["e"]),
             helper.make_node("Cast", ["e"], ["y"], to=TensorProto.STRING, name="to_text")]
    inits = [helper.make_tensor("one", F, [], [0.5]), _i64("s", [n])]
    return _save(_model(nodes, [], [_out("y", TensorProto.STRING)], inits), folder, "cast"), {}


def megabyte_outer(folder, n=250_000):
    """A 1 MB model: a 250 000-float initializer times its own transpose (6e10 elements)."""
    v = np.linspace(0, 1, n, dtype=np.float32)
    nodes = [helper.make_node("Reshape", ["v", "col"], ["a"]),
             helper.make_node("Reshape", ["v", "row"], ["b"]),
             helper.make_node("Mul", ["a", "b"], ["y"], name="outer")]
    inits = [numpy_helper.from_array(v, "v"), _i64("col", [n, 1]), _i64("row", [1, n])]
    return _save(_model(nodes, [], [_out()], inits), folder, "mb_outer"), {}


def megabyte_of_nodes(folder, n_nodes=42_000):
    """A 1 MB model of 42 000 Tanh nodes on a 4096-element input: every node is legal."""
    x = helper.make_tensor_value_info("x", F, [4096])
    nodes = [helper.make_node("Tanh", [f"t{k}" if k else "x"], [f"t{k + 1}"])
             for k in range(n_nodes)]
    nodes.append(helper.make_node("Identity", [f"t{n_nodes}"], ["y"]))
    return _save(_model(nodes, [x], [_out()]), folder, "mb_nodes"), None


CASES = {f.__name__: f for f in (
    constant_of_shape, constant_of_shape_runtime, declared_dim_3e8, declared_dim_1e12,
    declared_dim_negative, loop_huge_trip, loop_always_true, loop_nested, nested_functions,
    broadcast_outer, tile_huge, range_huge, pad_huge, many_small_doublings, erf_chain,
    loop_heavy_body, matmul_chain, loop_scan_outputs, loop_sequence_small, loop_sequence_big,
    cast_to_string, megabyte_outer, megabyte_of_nodes)}


def run_case(name: str, folder: str, limits: dict | None = None) -> dict:
    """Open and run one case the way ``tapescope onnx`` does (its default limits, or the
    ``Limits`` fields given in ``limits``); report how it ended, how long it took, and what its
    budgets admitted (work, loop iterations, bytes held at most)."""
    from tapescope.core.onnx import Limits, OnnxError, Session, default_inputs

    path, feeds = CASES[name](folder)
    size = os.path.getsize(path)
    budgets = []  # every account the session opened (its plan's, then the run's)
    t0 = time.perf_counter()
    try:
        sess = Session(path, limits=Limits(**limits)) if limits else Session(path)
        opened = sess.budget

        def counted(cancel=None):
            budgets.append(opened(cancel))
            return budgets[-1]

        sess.budget = counted
        sess.run(default_inputs(sess) if feeds is None else feeds)
        ended = "ok"
    except OnnxError as exc:
        ended = f"OnnxError: {exc}"
    except BaseException as exc:  # noqa: BLE001 - what else it raised is the finding
        ended = f"{type(exc).__name__}: {exc}"[:300]
    return {"case": name, "bytes": size, "seconds": time.perf_counter() - t0, "ended": ended,
            "work": max((b.work for b in budgets), default=0),
            "iterations": max((b.iterations for b in budgets), default=0),
            "held": max((b.peak_bytes for b in budgets), default=0)}
