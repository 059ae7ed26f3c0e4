"""Your PyTorch model, as exported: each family of tests/models/zoo.py, exported by
``torch.onnx.export`` (TorchScript and dynamo), trains 2 steps on the tape and replays them on
the host backend bit for bit, float32 and float64, with no edit to the file.

The default suite runs every family with the TorchScript exporter; the dynamo exports are
``slow`` (the dynamo exporter takes 10-60 s a model on the 2-core machine, its first call most).
Timings: docs/models.md.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("torch", reason="tests/models needs torch (the test extra installs it)")

from tapescope.app.runs import PairRunner, SessionConfig  # noqa: E402
from tapescope.core.onnx.workload import OnnxWorkload, model_spec  # noqa: E402
from tests.models import zoo  # noqa: E402

DYNAMO_DEFAULT: set[str] = set()
CASES = [pytest.param(name, False, id=f"{name}-ts") for name in zoo.FAMILIES] + [
    pytest.param(name, True, id=f"{name}-dynamo",
                 marks=() if name in DYNAMO_DEFAULT else pytest.mark.slow)
    for name in zoo.FAMILIES]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """family, exporter -> the exported file (each exported once per module)."""
    made: dict = {}

    def get(name: str, dynamo: bool) -> str:
        key = (name, dynamo)
        if key not in made:
            d = tmp_path_factory.mktemp("zoo")
            made[key] = zoo.export(name, d / f"{name}-{'dynamo' if dynamo else 'ts'}.onnx",
                                   dynamo)
        return made[key]

    return get


def _two_steps_bit_identical(path: str, dtype: str) -> list[float]:
    before = open(path, "rb").read()
    runner = PairRunner(SessionConfig(workload=model_spec(path), device="host", dtype=dtype))
    wl = runner.ref.wl
    start = {p.id: np.array(p.value) for p in wl.params}
    losses = []
    for _ in range(2):
        r = runner.step()
        assert np.isfinite(r.loss_ref), r.loss_ref
        assert r.loss_ref == r.loss_cand
        assert r.exact, r.first
        losses.append(r.loss_ref)
    for n in runner.nodes:  # the last step's every value and gradient, byte for byte
        got = runner.arrays(n.id)
        for which in ("value", "grad"):
            a, b = got["ref"][which], got["cand"][which]
            if a is None or b is None:
                continue
            assert a.dtype == np.dtype(dtype) and a.tobytes() == b.tobytes(), (n.id, n.op, which)
    assert any(not np.array_equal(start[p.id], p.value) for p in wl.params)  # it trained
    assert open(path, "rb").read() == before  # the file is as exported
    return losses


@pytest.mark.parametrize("name, dynamo", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_family_trains_two_steps_and_replays_bit_for_bit(exported, name, dynamo, dtype):
    _two_steps_bit_identical(exported(name, dynamo), dtype)


@pytest.mark.parametrize("dynamo", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["ts", "dynamo"])
def test_gpt_trains_on_its_own_loss_and_constants_stay_constants(exported, dynamo):
    wl = OnnxWorkload(exported("gpt", dynamo), dtype=np.float32)
    assert wl.loss_kind == "given"
    # 0-d initializers / Constant nodes (the attention scale, GELU's constants) are not
    # weights: every parameter has at least one dimension
    assert all(len(p.shape) >= 1 for p in wl.params), [p.shape for p in wl.params]
    # the module's 11 (the tied head once; the two fresh LayerNorms' equal weights and
    # biases dynamo's optimizer merged are split again: tests/models/test_parameters.py)
    assert len(wl.params) == 11, [p.name for p in wl.params]
    assert any(p.name.endswith("emb.weight" if not dynamo else "head.weight")
               for p in wl.params)  # the tie is the parameter, not the exporter's copy


def test_lm_logits_train_on_cross_entropy_over_every_position(exported):
    wl = OnnxWorkload(exported("lm", False), dtype=np.float32)
    assert (wl.loss_kind, wl.n_classes, wl.target_shape) == ("cross_entropy", 12, (2, 3))
    loss = wl.record(0)
    assert wl.tape.node(loss.id).op == "cross_entropy"
    ids = next(v for k, v in wl.batch(0).items() if k != wl.target_name)
    assert ids.max() < 12  # token ids drawn within the embedding's rows


def test_dropout_in_training_mode_is_real(exported, tmp_path):
    train = OnnxWorkload(exported("block_train", False), dtype=np.float64)
    evals = OnnxWorkload(zoo_eval_copy(tmp_path), dtype=np.float64)
    a, b = train.train(2), evals.train(2)
    assert a[0] != b[0]  # a mask, not the identity
    m0 = {k: np.array(v.value) for k, v in train.inputs.items() if "mask" in k}
    train.record(0)
    m1 = {k: np.array(v.value) for k, v in train.inputs.items() if "mask" in k}
    assert m0 and m0.keys() == m1.keys()
    assert any(not np.array_equal(m0[k], m1[k]) for k in m0)  # a new mask every step
    mask = next(iter(m1.values()))
    assert set(np.unique(mask)) <= {0.0, 1 / 0.75}


def zoo_eval_copy(tmp_path) -> str:
    """The same Block exported in eval mode (Dropout the identity)."""
    return zoo.export("block", tmp_path / "block-eval.onnx", False)


def test_batchnorm_training_uses_batch_statistics_and_updates_running_ones(exported):
    path = exported("convbn_train", False)
    m = onnx.load(path)
    assert any(n.op_type == "BatchNormalization" and any(
        a.name == "training_mode" and a.i == 1 for a in n.attribute) for n in m.graph.node)
    wl = OnnxWorkload(path, dtype=np.float64)
    wl.record(0)
    x = next(n for n in wl.tape.nodes if n.op == "conv2d")
    conv = np.asarray(wl.tape.value(x.id)) + 0.0
    (name_mean, new_mean), (name_var, new_var) = list(wl.running[0].items())
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    # the tape's batch mean (conv bias included) moves the running mean by 1 - momentum
    bias = next(v for k, v in inits.items() if k.endswith("conv.bias"))
    batch = (conv + bias.reshape(1, -1, 1, 1)).mean((0, 2, 3))
    mom = next(a.f for n in m.graph.node if n.op_type == "BatchNormalization"
               for a in n.attribute if a.name == "momentum")
    np.testing.assert_allclose(new_mean, inits[name_mean] * mom + batch * (1 - mom), rtol=1e-6)
    assert not np.allclose(new_var, inits[name_var])


@pytest.mark.parametrize("dynamo", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["ts", "dynamo"])
def test_classifier_trains_on_log_softmax_and_nll_loss(exported, dynamo):
    path = exported("classifier", dynamo)
    ops_in_file = {n.op_type for n in onnx.load(path).graph.node}
    assert "LogSoftmax" in ops_in_file
    assert ("NegativeLogLikelihoodLoss" if dynamo else "SoftmaxCrossEntropyLoss") in ops_in_file
    wl = OnnxWorkload(path, dtype=np.float32)
    assert wl.loss_kind == "given"
    loss = wl.record(0)
    assert "log_softmax" in [n.op for n in wl.tape.nodes]
    batch = wl.batch(0)
    labels = [v for v in batch.values() if v.dtype.kind == "i"]
    assert labels and all(0 <= v.min() and v.max() < 5 for v in labels)  # drawn in the classes
    from tapescope.core.onnx.executor import Session

    want = next(iter(Session(path).run(batch).values()))
    np.testing.assert_allclose(float(np.asarray(loss.value)), float(want), rtol=1e-6)


@pytest.mark.parametrize("dynamo", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["ts", "dynamo"])
def test_integer_inputs_are_drawn_within_the_table_they_index(exported, tmp_path, dynamo):
    """A BERT-style encoder: token ids index 11 rows, token types a 2-row table; each is drawn
    within its own table (the types were drawn 0..9: 'index out of range [-2, 2)'), and a
    given file out of range is one line naming the input and the rows."""
    path = exported("bert", dynamo)
    wl = OnnxWorkload(path, dtype=np.float32)
    assert sorted(wl.index_bounds.values()) == [2, 11]
    types = next(k for k, v in wl.index_bounds.items() if v == 2)
    seen = set()
    for step in range(3):
        batch = wl.batch_inputs(step)
        assert all(0 <= batch[k].min() and batch[k].max() < n
                   for k, n in wl.index_bounds.items())
        seen.update(np.unique(batch[types]).tolist())
    assert seen == {0, 1}
    assert all(np.isfinite(wl.train(2)))
    bad = tmp_path / "types.npy"
    np.save(bad, np.full(wl.input_specs[types][0], 5, wl.input_specs[types][1]))
    from tapescope.core.onnx.errors import OnnxError

    with pytest.raises(OnnxError, match=rf"integer input '{types}'\) indexes a table of 2 "
                                        rf"rows: .* \(give --input {types}=FILE.npy within it\)"):
        OnnxWorkload(path, dtype=np.float32, inputs={types: str(bad)})
