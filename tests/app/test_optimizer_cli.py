"""The episode's optimizer from the command line (issue 45 item 5): ``--optimizer sgd|adam|adamw
--lr --weight-decay --momentum --nesterov --schedule --warmup`` on ``train`` and ``parity``
(built-in mlp and an ONNX zoo model), the host replay bit-identical to the reference;
``--torch-optimizer torch`` (torch.optim and its schedulers) bit-identical to the tape's step
written in torch ops; bad combinations one line, exit 2.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.app.cli import main

ADAMW = ["--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.05", "--schedule",
         "cosine", "--warmup", "1"]
SGD = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--nesterov",
       "--weight-decay", "0.01", "--schedule", "step", "--step-size", "1", "--gamma", "0.5"]


def test_train_says_which_optimizer_and_it_changes_the_run(capsys):
    assert main(["train", "--workload", "mlp", "--steps", "3"]) == 0
    plain = capsys.readouterr().out
    assert main(["train", "--workload", "mlp", "--steps", "3", *ADAMW]) == 0
    out = capsys.readouterr().out
    assert "optimizer: adamw (torch.optim.AdamW's step) lr 0.01 wd 0.05, cosine T_max=2 " \
           "after 1 warmup steps" in out
    last = [ln for ln in out.splitlines() if ln.startswith("step    3")]
    assert last and last[0] not in plain  # a different optimizer trained


@pytest.mark.parametrize("flags", [ADAMW, SGD, ["--optimizer", "adam", "--schedule", "cosine"]],
                         ids=["adamw-cosine", "sgd-nesterov-step", "adam-cosine"])
@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_parity_on_the_mlp_is_bit_identical(capsys, flags, fuse):
    rc = main(["parity", "--workload", "mlp", "--device", "host", "--steps", "3",
               *(["--fuse"] if fuse else []), *flags])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "3 steps on host: bit-identical" in out
    assert "\noptimizer: " in out  # what trained is said


@pytest.mark.parametrize("amp", ["float16", "bfloat16"])
def test_mixed_precision_keeps_the_torch_steps_bit_identical(capsys, amp):
    # float32 masters, buffers and moments on the device (amp_sgdm / amp_adamw), the scaler's
    # skipped steps taking back the step count (and the schedule's step) as Adam's do
    for flags in (ADAMW, SGD):
        rc = main(["parity", "--workload", "transformer", "--device", "host", "--steps", "3",
                   "--amp", amp, *flags])
        out = capsys.readouterr().out
        assert rc == 0 and "3 steps on host: bit-identical" in out, out


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_skipped_mixed_precision_steps_take_back_the_step_and_the_schedule(kind):
    # a static float16 loss scale of 2**15 and a large lr overflow some steps' gradients: the
    # device skips them as the reference does (t, the momentum's first step, the schedule)
    from tapescope.app.runs import PairRunner, SessionConfig
    from tapescope.core.optim_config import OptimConfig

    cfg = (OptimConfig("sgd", 3.0, None, 0.9, True, steps=6) if kind == "sgd" else
           OptimConfig("adamw", 1.0, schedule="cosine", warmup=1, steps=6))
    r = PairRunner(SessionConfig(workload="transformer", device="host", amp="float16",
                                 loss_scale=32768.0, optimizer=cfg.text()))
    res = [r.step() for _ in range(6)]
    assert all(x.exact for x in res), [x.first for x in res]
    assert 0 < r.ref.opt.t < 6  # some steps were skipped, some taken
    assert r.cand.dopt.t == r.ref.opt.t


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    pytest.importorskip("torch", reason="the torch extra")
    from tests.models import zoo

    return zoo.export("classifier", tmp_path_factory.mktemp("opt") / "c.onnx", False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_parity_on_an_onnx_zoo_model_is_bit_identical(capsys, classifier, dtype):
    rc = main(["parity", "--model", classifier, "--device", "host", "--steps", "3",
               "--dtype", dtype, *ADAMW])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "3 steps on host: bit-identical" in out


def _torch_params(workload: str, text: str, how: str, dtype: str, steps: int = 3) -> list:
    from tapescope.app.run_sides import open_runs
    from tapescope.app.runs import SessionConfig

    cfg = SessionConfig(workload=workload, device="torch", torch_optimizer=how, optimizer=text,
                        dtype=dtype)
    _, cand = open_runs(cfg, None)
    out = []
    for s in range(1, steps + 1):
        cand.advance(s)
        cand.update()
        out.append({i: cand.array(i, "value").tobytes() for i in cand.params})
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("which", ["sgd", "adamw"])
def test_torch_optim_is_the_tapes_step_in_torch_ops(dtype, which, classifier):
    # torch.optim.SGD(momentum, nesterov) / AdamW with SequentialLR(LinearLR, Cosine) or
    # StepLR, against the tape's step written in torch ops: the same bits every step
    # (AdamW's torch.sqrt is MKL's on both sides)
    pytest.importorskip("torch", reason="the torch extra")
    from tapescope.core.optim_config import OptimConfig

    cfg = (OptimConfig("sgd", 0.05, 0.01, 0.9, True, "cosine", 1, steps=3) if which == "sgd"
           else OptimConfig("adamw", 1e-2, 0.1, schedule="step", step_size=1, gamma=0.5))
    for wl in ("mlp", f"onnx:{classifier}"):
        tape = _torch_params(wl, cfg.text(), "tape", dtype)
        mine = _torch_params(wl, cfg.text(), "torch", dtype)
        assert tape == mine, wl
        assert tape[0] != tape[-1]  # it trained


def test_the_torch_optimizer_runs_from_the_command_line(capsys, tmp_path):
    pytest.importorskip("torch", reason="the torch extra")
    import json

    rc = main(["parity", "--workload", "mlp", "--device", "torch", "--torch-optimizer", "torch",
               "--steps", "2", "--json", str(tmp_path / "p.json"), *SGD])
    out = capsys.readouterr().out
    # exit 1: PyTorch's matmuls differ from the reference (docs/candidates.md); its update is
    # the tape's (the test above)
    assert rc == 1 and "step    2" in out, out
    got = json.loads((tmp_path / "p.json").read_text())
    assert len(got["losses"]) == 2
    assert got["optimizer"] == {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True,
                                "weight_decay": 0.01, "schedule": "step", "step_size": 1,
                                "gamma": 0.5, "steps": 2}


@pytest.mark.parametrize("args, says", [
    (["train", "--lr", "-0.1"], "--lr must be a number more than 0, not -0.1"),
    (["train", "--momentum", "0.9"], "--momentum goes with --optimizer sgd"),
    (["train", "--optimizer", "sgd", "--nesterov"], "--nesterov needs --optimizer sgd"),
    (["train", "--steps", "3", "--warmup", "4"], "--warmup 4 is not shorter than --steps 3"),
    (["parity", "--device", "host", "--steps", "2", "--warmup", "2"],
     "--warmup 2 is not shorter than --steps 2"),
    (["parity", "--device", "host", "--optimizer", "adam", "--weight-decay", "0.1"],
     "--weight-decay goes with --optimizer adamw or sgd"),
    (["report", "--device", "host", "--gamma", "0.5", "--out", "{tmp}/r.html"],
     "--step-size and --gamma go with --schedule step"),
    # the workload's own plain SGD (w - lr g, lr in its launches) takes no schedule on a device
    (["parity", "--workload", "{res}/logistic.py", "--device", "host", "--steps", "3",
      "--schedule", "cosine"], "a schedule needs --optimizer sgd"),
    # torch.optim has one weight_decay: the workload's per-parameter L2 cannot go beside it
    (["parity", "--workload", "{res}/logistic.py", "--device", "torch", "--torch-optimizer",
      "torch", "--optimizer", "adamw", "--steps", "2"], "per-parameter L2 has no place"),
])
def test_bad_combinations_exit_2_with_one_line(capsys, tmp_path, args, says):
    from pathlib import Path

    res = Path(__file__).resolve().parents[2] / "resources" / "workloads"
    if "torch" in args:
        pytest.importorskip("torch", reason="the torch extra")
    assert main([a.replace("{tmp}", str(tmp_path)).replace("{res}", str(res))
                 for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_the_optimizer_travels_to_a_worker_as_json():
    from tapescope.app.runs import SessionConfig
    from tapescope.core.optim_config import OptimConfig

    text = OptimConfig("adamw", 1e-3, schedule="cosine", steps=4).text()
    cfg = SessionConfig(optimizer=text)
    import dataclasses
    import json

    again = SessionConfig(**json.loads(json.dumps(dataclasses.asdict(cfg))))
    assert OptimConfig.parse(again.optimizer) == OptimConfig.parse(text)
    with pytest.raises(ValueError, match="--momentum goes with --optimizer sgd"):
        SessionConfig(optimizer=json.dumps({"kind": "adam", "momentum": 0.9}))
    assert np.isfinite(OptimConfig.parse(text).make_schedule().lr(1e-3, 4))


@pytest.mark.parametrize("kind", ["sgdm", "adamw", "adam-cosine"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_provenance_reruns_the_torch_steps_and_finds_a_planted_update(kind, dtype):
    # the update check reruns core.optim's own lines (sgdm_step / adamw_step) at the step's
    # scheduled lr: the real update is not introduced, one flipped bit of w or m is
    from tapescope.app.run_provenance import _state, core_optimizer_arrays
    from tapescope.core import ops, optim
    from tapescope.core.provenance import StepState, provenance
    from tapescope.core.schedule import Schedule
    from tapescope.core.tape import Tape

    rng = np.random.default_rng(2)
    t = Tape(dtype)
    w = t.param(rng.standard_normal(40).astype(dtype))
    c = rng.standard_normal(40).astype(dtype)
    o = (optim.SGDMomentum(t, 0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
         if kind == "sgdm" else optim.AdamW(t, 0.01) if kind == "adamw"
         else optim.Adam(t, 0.01))
    o.schedule = Schedule("cosine", warmup=1, t_max=4)
    o.add(w, l2=0.001)
    mark = t.mark()

    def judged(st):
        return [(e.node, e.part) for e in provenance(StepState(
            1, t.nodes, len(t.nodes) - 1, t.value, t.grad, update=st)).introduced
            if e.which == "update"]

    for step in range(3):
        t.reset_to(mark)
        t.backward(ops.sum(ops.mul(ops.mul(w, w), t.const(c))))
        info = core_optimizer_arrays(o, t, after=False)
        assert info["lr"] == o.lr_at(step + 1) and info["kind"] == o.kind
        st = _state(info, lambda i: np.array(t.value(i)), lambda i: np.array(t.grad(i)))
        o.step()
        p = st.params[0]
        p.w_after = np.array(t.value(w))
        slot = o.slots[0]
        p.m_after = None if slot.m is None else np.array(slot.m)
        p.v_after = None if slot.v is None else np.array(slot.v)
        assert judged(st) == [], step  # the reference's own update, rerun: the same bits
        p.w_after = np.array(p.w_after)
        p.w_after.ravel()[3] = np.nextafter(p.w_after.ravel()[3], np.inf)
        assert judged(st) == [(w.id, "param")]
        p.w_after = np.array(t.value(w))
        p.m_after.ravel()[5] = np.nextafter(p.m_after.ravel()[5], np.inf)
        assert judged(st) == [(w.id, "m")]


def test_torchs_adamw_updates_are_introduced_by_mkls_sqrt(capsys, tmp_path):
    # --torch-optimizer torch with adamw: its updates leave the reference only through
    # PyTorch's CPU sqrt (docs/reference-order.md), and --explain names it; its SGD step with
    # momentum and nesterov introduces no update at all
    pytest.importorskip("torch", reason="the torch extra")
    import json

    from tapescope.core.explain import vml_sqrt

    try:
        vml_sqrt(np.ones(1))
    except ValueError as e:
        pytest.skip(f"PyTorch's CPU sqrt (MKL VML) is not loadable here: {e}")
    for flags, want in ((["--optimizer", "adamw"], True), (SGD, False)):
        out = tmp_path / "p.json"
        main(["parity", "--workload", "mlp", "--device", "torch", "--torch-optimizer", "torch",
              "--explain", "--steps", "2", "--json", str(out), *flags])
        capsys.readouterr()
        ups = [e for e in json.loads(out.read_text())["introduced"] if e["which"] == "update"]
        assert bool(ups) == want, ups
        assert all("MKL VML's sqrt" in json.dumps(e) for e in ups), ups
