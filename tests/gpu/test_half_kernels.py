"""Half-precision kernels on the host backend (docs/reference-order.md, "Half precision").

The storage conversions of gpu/kernels/half.cuh (integer code, compiled as is by gcc and
NVRTC) round exactly like numpy's float32 -> float16 and ml_dtypes' float32 -> bfloat16 casts
and widen exactly; every half episode replays bit for bit, fused and unfused.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.app.cli import main
from tapescope.core import precision

SRC = r"""
#include "half.cuh"
extern "C" __global__ void to_f16(const float* x, ts_f16* y, float* back, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) { y[i] = x[i]; back[i] = y[i]; }
}
extern "C" __global__ void to_bf16(const float* x, ts_bf16* y, float* back, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) { y[i] = x[i]; back[i] = y[i]; }
}
extern "C" __global__ void rnd(const float* x, float* a, float* b, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        a[i] = ts_rnd_f16(x[i]);
        b[i] = ts_rnd_bf16(x[i]);
    }
}
"""


def _floats() -> np.ndarray:
    """Every rounding boundary of both half types (each half value, each mid-point, one float32
    ulp either side), the specials, and a million random float32 bit patterns."""
    out = []
    for dt in precision.HALF:
        h = np.arange(1 << 16, dtype=np.uint16).view(dt).astype(np.float32)
        h = h[np.isfinite(h)]
        hs = np.sort(np.unique(h))
        mid = ((hs[:-1].astype(np.float64) + hs[1:]) / 2).astype(np.float32)
        for v in (h, mid):
            out += [v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))]
    big = np.float32(65504) + np.arange(-40, 40, dtype=np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65520, -65520, 2.0 ** -25,
                        2.0 ** -24, 2.0 ** -14, 3.4e38, -3.4e38, 1e-45], np.float32)
    rng = np.random.default_rng(28)
    rand = rng.integers(0, 1 << 32, 1_000_000, dtype=np.uint64).astype(np.uint32).view(
        np.float32)
    return np.concatenate(out + [big, special, rand]).astype(np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    g, w = got.astype(np.float32), want.astype(np.float32)
    return (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(g) & np.isnan(w))


def test_storage_conversions_round_like_numpy_and_ml_dtypes(host):
    mod = host.compile(SRC)
    x = _floats()
    n = x.size
    xb = host.alloc(n, np.float32)
    xb.upload(x)
    for name, dt in (("to_f16", precision.FLOAT16), ("to_bf16", precision.BFLOAT16)):
        y, back = host.alloc(n, dt), host.alloc(n, np.float32)
        mod[name](64, 128, xb, y, back, n)
        with np.errstate(all="ignore"):
            want = x.astype(dt)
        got = y.download()
        bad = ~_same(got, want)
        assert not bad.any(), (name, x[bad][:5], got[bad][:5], want[bad][:5])
        # widening is exact (NaN stays NaN)
        wb = back.download()
        wide = want.astype(np.float32)
        assert np.array_equal(wb.view(np.uint32)[~np.isnan(wide)],
                              wide.view(np.uint32)[~np.isnan(wide)])
        assert np.isnan(wb[np.isnan(wide)]).all()
    a, b = host.alloc(n, np.float32), host.alloc(n, np.float32)
    mod["rnd"](64, 128, xb, a, b, n)
    with np.errstate(all="ignore"):
        for got, dt in ((a.download(), precision.FLOAT16), (b.download(), precision.BFLOAT16)):
            want = x.astype(dt).astype(np.float32)
            ok = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
            assert ok.all(), dt


@pytest.mark.parametrize("workload", ["mlp", "transformer"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("fuse", [False, True])
def test_half_episodes_replay_bit_for_bit(tmp_path, capsys, workload, dtype, fuse):
    import json

    out = tmp_path / "p.json"
    rc = main(["parity", "--workload", workload, "--device", "host", "--steps", "2",
               "--dtype", dtype, "--json", str(out)] + (["--fuse"] if fuse else []))
    text = capsys.readouterr().out
    assert rc == 0, text
    rep = json.loads(out.read_text())
    assert rep["dtype"] == dtype and rep["exact"] is True and rep["introduced"] == []
    (l1, l2) = rep["losses"]
    assert l1["reference"] == l1["candidate"] and l2["reference"] == l2["candidate"]
    # the loss is a half value (float16: 11 significant bits; bfloat16: 8)
    dt = precision.dtype_of(dtype)
    assert float(np.asarray(l1["reference"]).astype(dt)) == l1["reference"]


def test_a_dropped_rounding_is_caught(monkeypatch, capsys):
    # control: without RND (a contribution added to a gradient unrounded) the replay differs
    # from the tape (the transformer's fan-out sums several contributions into one gradient)
    from tapescope.gpu import source

    for dt in source.STORAGE:
        monkeypatch.setitem(source._COMMON[dt], "RND", "")
    rc = main(["parity", "--workload", "transformer", "--device", "host", "--steps", "1",
               "--dtype", "float16"])
    assert rc == 1, capsys.readouterr().out


def test_conv_models_capture_in_half():
    # conv2d had no half kernels and its capture ended in "use --dtype float32" (with --amp:
    # "drop --dtype float32", a circle); now it captures and replays bit for bit (the per-op
    # bits: tests/gpu/test_half_nn.py)
    from tapescope import gpu
    from tapescope.core import ops
    from tapescope.core.tape import Tape

    t = Tape("float16")
    x = t.param(np.linspace(-1, 1, 16).reshape(1, 1, 4, 4))
    w = t.param(np.linspace(-1, 1, 9).reshape(1, 1, 3, 3))
    y = ops.sum(t.record("conv2d", [x, w], {}))
    t.backward(y)
    prog = gpu.capture(gpu.open_device("host"), t, y)
    prog.forward()
    prog.backward()
    assert gpu.parity.compare(t, prog).exact
