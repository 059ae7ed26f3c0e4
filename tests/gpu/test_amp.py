"""Mixed precision (--amp float16|bfloat16; core.amp): float32 masters and optimizer state, the
episode on a half tape, float16's loss scale with GradScaler's skip-and-backoff, bit for bit on
the host backend, fused and unfused."""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.app.cli import main
from tapescope.app.runs import PairRunner, SessionConfig
from tapescope.core.amp import FLOAT16_MAX_SCALE, LossScaler

# grad of sum(x * w) is x = 4: times the scale 2**15 it is 2**17, inf in float16; 2**14 gives
# 2**16, still inf; 2**13 gives 2**15: the first two steps overflow and are skipped
BIG = '''
import numpy as np
from tapescope.core import ops, optim
from tapescope.core.workloads import Workload

class Big(Workload):
    name = "big"
    def build(self):
        self.w = self.tape.param(np.linspace(-1, 1, 8).reshape(8, 1), name="w")
    def batch(self, step):
        return {"x": np.full((1, 8), 4.0)}
    def episode(self, data):
        return ops.mean(data["x"] @ self.w, name="loss")
    def make_optimizer(self):
        opt = optim.SGD(self.tape, lr=0.01)
        opt.add(self.w, l2=1e-3)
        return opt
'''


@pytest.mark.parametrize("amp", ["float16", "bfloat16"])
@pytest.mark.parametrize("workload", ["mlp", "transformer"])
@pytest.mark.parametrize("fuse", [False, True])
def test_amp_parity_is_bit_identical(capsys, amp, workload, fuse):
    rc = main(["parity", "--workload", workload, "--amp", amp, "--device", "host", "--steps",
               "2"] + (["--fuse"] if fuse else []))
    assert rc == 0, capsys.readouterr().out


def test_masters_are_float32_and_the_tape_holds_them_rounded_once():
    r = PairRunner(SessionConfig(workload="mlp", device="host", amp="bfloat16"))
    r.step(provenance=False)
    opt = r.ref.opt
    for slot in opt.slots:
        assert slot.master.dtype == np.float32 and slot.m.dtype == np.float32
        w = np.asarray(r.ref.tape.value(slot.var))
        assert np.array_equal(w.view(np.uint16), slot.master.astype(w.dtype).view(np.uint16))
        # the device's masters are the same float32 bits
        dev = r.cand.dopt.masters[slot.var.id].download().reshape(slot.master.shape)
        assert np.array_equal(dev.view(np.uint32), slot.master.view(np.uint32))
    assert opt.amp.scale == 1.0 and not opt.amp.skips  # bfloat16: no loss scale


def test_float16_overflow_skips_and_backs_off_on_both_sides(tmp_path):
    path = tmp_path / "big.py"
    path.write_text(BIG)
    r = PairRunner(SessionConfig(workload=str(path), device="host", amp="float16"))
    w0 = r.ref.opt.slots[0].master.copy()
    seen = []
    for _ in range(4):
        res = r.step(provenance=False)
        assert res.exact
        seen.append((r.ref.opt.found_inf, r.ref.opt.amp.scale, r.ref.opt.t,
                     r.cand.dopt.found_inf, r.cand.dopt.scaler.scale, r.cand.dopt.t))
    h = FLOAT16_MAX_SCALE
    assert seen == [(True, h / 2, 0) * 2, (True, h / 4, 0) * 2, (False, h / 4, 1) * 2,
                    (False, h / 4, 2) * 2]
    # skipped steps left the master alone; the first clean step moved it
    m = r.ref.opt.slots[0].master
    assert not np.array_equal(m, w0)
    dev = r.cand.dopt.masters[r.ref.opt.slots[0].var.id].download().reshape(m.shape)
    assert np.array_equal(dev.view(np.uint32), m.view(np.uint32))


def test_a_device_that_never_skips_is_caught(tmp_path):
    # control: a device whose scaler never skips (no overflow check launched) updates with inf
    # gradients and keeps its scale; the next step differs from the tape's
    path = tmp_path / "big.py"
    path.write_text(BIG)
    r = PairRunner(SessionConfig(workload=str(path), device="host", amp="float16"))
    r.cand.dopt.scaler.skips = False
    r.step(provenance=False)
    res = r.step(provenance=False)
    assert not res.exact


def test_scaler_follows_gradscaler():
    s = LossScaler(scale=8.0, interval=3)
    for found in (False, False, False):
        s.update(found)
    assert s.scale == 16.0 and s.tracker == 0
    s.update(True)
    assert s.scale == 8.0 and s.tracker == 0
    s = LossScaler(scale=FLOAT16_MAX_SCALE, interval=1)
    s.update(False)
    assert s.scale == FLOAT16_MAX_SCALE  # capped: 2**16 is inf in float16
    st = LossScaler.for_dtype("float16", 1024)
    st.update(True)
    assert st.scale == 1024 and not st.dynamic
    with pytest.raises(ValueError, match="power of two"):
        LossScaler.for_dtype("float16", 1000)
    with pytest.raises(ValueError, match="power of two"):
        LossScaler.for_dtype("float16", 2.0 ** 16)


def test_amp_flags_are_checked(capsys):
    assert main(["parity", "--amp", "float16", "--dtype", "float32", "--device", "host"]) == 2
    assert "drop --dtype float32" in capsys.readouterr().err
    assert main(["parity", "--amp", "bfloat16", "--loss-scale", "1024", "--device",
                 "host"]) == 2
    assert "--loss-scale goes with --amp float16" in capsys.readouterr().err
    assert main(["train", "--amp", "float16", "--loss-scale", "512", "--steps", "2"]) == 0
