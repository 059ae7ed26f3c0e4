"""The import's trainable weights are the PyTorch module's parameters, nothing else
(docs/models.md, "What the import makes trainable"; issue 45): for every zoo family and both
exporters, the weights hold exactly the values of ``named_parameters()`` (a tied weight once;
no attention scale, causal mask or broadcast copy among them), as many as the module has
(where the exporter does not fuse or split them), with its shapes up to a transpose. A causal
mask built from the sequence length stays a constant through training and ``--reinit``.

TorchScript exports run by default; the dynamo ones are ``slow`` but for one fast sibling.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="tests/models needs torch (the test extra installs it)")

from tapescope.core.onnx.importer import import_to_tape  # noqa: E402
from tapescope.core.onnx.state_dict import folded_batch_norms  # noqa: E402
from tapescope.core.onnx.workload import OnnxWorkload  # noqa: E402
from tapescope.core.tape import Tape  # noqa: E402
from tests.models import zoo  # noqa: E402

# (family, dynamo) -> the import's weight count minus the module's, where the exporter fuses
# or splits parameters: ONNX's RNN/GRU/LSTM take one B of both biases (dynamo keeps a plain
# RNN's two); both fold the decoder's cross-attention in_proj into a q part and a kv part
# (weight and bias: two more); dynamo folds a BatchNorm into the conv before it (BN_FOLDED)
REARRANGED = {("gru", False): -1, ("lstm", False): -1, ("rnn", False): -1,
              ("gru", True): -1, ("lstm", True): -1, ("seq2seq", False): 2,
              ("seq2seq", True): 2}
FAST_DYNAMO = {"causal"}
BN_FOLDED = {"convbn_train", "mbconv"}  # training-mode BatchNorms dynamo folds into a conv
CASES = [pytest.param(n, False, id=f"{n}-ts") for n in zoo.FAMILIES] + [
    pytest.param(n, True, id=f"{n}-dynamo", marks=() if n in FAST_DYNAMO else pytest.mark.slow)
    for n in zoo.FAMILIES]


def _folded_dims(shape) -> tuple[int, ...]:
    """A shape up to a transpose and its size-1 axes."""
    return tuple(sorted(d for d in shape if d != 1))


@pytest.mark.parametrize("name, dynamo", CASES)
def test_weights_are_the_modules_parameters(tmp_path, name, dynamo):
    path = zoo.export(name, tmp_path / f"{name}.onnx", dynamo, distinct=True)
    module = zoo.module(name, distinct=True)
    params = [p.detach().numpy() for _, p in module.named_parameters()]  # a tied one once
    wl = OnnxWorkload(path, dtype=np.float32)
    weights = {k: np.asarray(v.value) for k, v in wl.weights.items()}
    got = np.sort(np.concatenate([w.ravel() for w in weights.values()]))
    want = np.sort(np.concatenate([p.ravel() for p in params]))
    if dynamo and name in BN_FOLDED:  # dynamo folds even a training-mode BatchNorm into
        # the conv before it: its parameters are gone (named so), the rest are weights
        bn = folded_batch_norms(wl.sess.model.graph)
        names = {n for n, _ in module.named_parameters()}
        assert bn and bn <= names and all(n.endswith((".weight", ".bias")) for n in bn)
        assert len(weights) == len(names) - len(bn), sorted(weights)
        assert any("folded each BatchNorm into the Conv" in n and sorted(bn)[0] in n
                   for n in wl.input_notes), wl.input_notes
        return
    # the same values, each once: no constant (a scale, a mask), no broadcast copy, no
    # second copy of a tied weight, no parameter missing
    assert got.size == want.size and np.array_equal(got, want), (
        got.size, want.size, {k: w.shape for k, w in weights.items()})
    delta = REARRANGED.get((name, dynamo), 0)
    assert len(weights) == len(params) + delta, sorted(weights)
    if not delta:
        assert sorted(_folded_dims(w.shape) for w in weights.values()) == sorted(
            _folded_dims(p.shape) for p in params)


def _outputs(wl: OnnxWorkload, feeds: dict) -> np.ndarray:
    """The model's first output under the workload's current weights."""
    tape = Tape(np.float64)
    params = {k: tape.param(np.array(v.value)) for k, v in wl.weights.items()}
    imp = import_to_tape(wl.sess, tape, feeds, params=params, overrides=wl.overrides)
    return np.asarray(next(iter(imp.outputs.values())).value)


@pytest.mark.parametrize("name, dynamo", [
    ("causal", False), ("seq2seq", False), pytest.param("causal", True, marks=pytest.mark.slow),
    pytest.param("seq2seq", True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("reinit", [False, True], ids=["as-exported", "reinit"])
def test_causal_mask_stays_causal_through_training_and_reinit(tmp_path, name, dynamo, reinit):
    path = zoo.export(name, tmp_path / f"{name}.onnx", dynamo)
    wl = OnnxWorkload(path, dtype=np.float64, reinit=reinit)
    assert all(p.value.size > 1 for p in wl.params)  # no scale among the weights
    feeds = wl.batch_inputs(0)
    seq = list(feeds)[-1]  # the causal input: x, or the decoder's tgt
    late = {**feeds, seq: feeds[seq].copy()}
    late[seq][:, -1] += 3.0  # only the last position changes
    before = _outputs(wl, feeds)
    losses = wl.train(2)
    assert all(np.isfinite(losses))
    for _ in range(2):  # as exported / reinitialised, then after 2 steps
        a, b = _outputs(wl, feeds), _outputs(wl, late)
        # no earlier position sees the last one: the mask kept its -inf / True entries
        np.testing.assert_array_equal(a[:, :-1], b[:, :-1])
        assert not np.array_equal(a[:, -1], b[:, -1])
    assert not np.array_equal(before, a)  # it trained


@pytest.mark.slow
def test_parameters_merged_by_dynamo_are_split_again_and_a_tie_kept(tmp_path):
    """Fresh weights: dynamo's optimizer merges ln2's ones and zeros into ln1's initializers
    (the import splits them out again, by the nodes' fx metadata) and keeps one of the tied
    embedding / head (one parameter in PyTorch: kept one); the workload names what the file
    does not hold as its own (parity prints it)."""
    module = zoo.module("gpt")
    wl = OnnxWorkload(zoo.export("gpt", tmp_path / "gpt.onnx", True), dtype=np.float32)
    assert len(wl.weights) == len(list(module.named_parameters())) == 11
    assert {"ln2.weight", "ln2.bias", "ln1.weight", "ln1.bias"} <= set(wl.weights)
    notes = [n for n in wl.input_notes if n.startswith("parameters ")]
    assert notes == ["parameters 'emb.weight' are not in the file (the exporter merged each "
                     "into an initializer of equal value, a tied weight, or dropped a zero "
                     "one): they do not train on their own"]
    losses = wl.train(2)
    assert np.isfinite(losses).all()
    # ln1 and ln2 took different gradients: two parameters, as in the module
    assert not np.array_equal(wl.weights["ln1.weight"].value, wl.weights["ln2.weight"].value)
    ts = OnnxWorkload(zoo.export("gpt", tmp_path / "gpt-ts.onnx", False), dtype=np.float32)
    assert not [n for n in ts.input_notes if n.startswith("parameters ")]
