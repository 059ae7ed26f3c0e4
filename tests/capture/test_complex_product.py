"""A complex product as PyTorch's CPU computes it (rotary embeddings' ``xc * freqs``, session
35): the reference multiplies in its own order (``aten_ref_pointwise.complex_multiply``: each
part's products rounded, then summed; not numpy's complex multiply, which fuses one product
into the sum), torch's vector loop gives the same bits, and the last numbers of each row past
its whole vectors are its scalar loop as gcc contracts it; ``--explain`` names that, with the
row and the threads' chunks, and says ``unknown`` one ulp away."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tapescope.core.capture.aten_ref import reference  # noqa: E402
from tapescope.core.capture.explain import explain_op  # noqa: E402

pytestmark = pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
    reason="torch's x86 kernels (its AVX2 and AVX-512 builds) were measured; another "
           "build's scalar loop may be contracted otherwise")

C64, C128 = np.complex64, np.complex128
# (type, shape, the other operand's shape, threads, the row the variant should find)
CASES = [
    (C64, (37,), (37,), 1, "one row"),
    (C64, (5, 7), (1, 7), 1, "rows of 7"),
    (C64, (2, 5, 3, 6), (1, 5, 1, 6), 1, "rows of 6"),  # (a Llama's head of 12: 6 numbers)
    (C64, (4, 3, 5), (1, 1, 5), 1, "rows of 5"),
    (C128, (5, 7), (1, 7), 1, "rows of 7"),
    (C128, (11,), (11,), 1, "one row"),
    (C64, (40014,), (40014,), 2, "one row, 2 threads' chunks"),  # (chunks of 20,007)
]


def _cx(rng, shape, dt):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)


def _explain(a, b, rec):
    plain = reference("aten.mul.Tensor", [a, b], {})[0]
    n = int(np.sum(plain.view(np.uint8) != rec.view(np.uint8)))
    d = {"n_diff": max(n, 1), "max_ulp": 1, "n_signed_zero": 0, "n_nan": 0}
    return n, explain_op("aten.mul.Tensor", [a, b], {}, rec, d)


def _one_ulp_off(rec):
    off = rec.copy()
    i = np.flatnonzero(rec)[0]
    part = off.real if rec.dtype == C128 and i % 2 else off.imag
    flat = part.reshape(-1)
    flat[i] = np.nextafter(flat[i], np.inf, dtype=flat.dtype)
    return off


@pytest.fixture
def threads():
    n = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(n)


@pytest.mark.parametrize("dt, sa, sb, t, row", CASES)
def test_the_last_numbers_of_each_row_are_the_contracted_scalar_loop(dt, sa, sb, t, row,
                                                                    threads):
    threads(t)
    rng = np.random.default_rng([35, *sa, t])
    a, b = _cx(rng, sa, dt), _cx(rng, sb, dt)
    rec = (torch.from_numpy(a) * torch.from_numpy(b)).numpy()
    n, got = _explain(a, b, rec)
    assert n > 0, "torch equals the reference here (nothing to name)"
    assert got["cause"] == "fma" and "complex product" in got["variant"], got
    assert got["variant"].endswith(row), got
    assert _explain(a, b, _one_ulp_off(rec))[1]["cause"] == "unknown"


def test_whole_vectors_are_the_references_order(threads):
    """Rows of whole vectors (a head of 64: 32 numbers) are the reference's bits: nothing
    introduced, both types, at 1 and 2 threads."""
    rng = np.random.default_rng(3535)
    for t in (1, 2):
        threads(t)
        for dt, sa, sb in ((C64, (4, 9, 2, 32), (1, 9, 1, 32)), (C128, (3, 16), (3, 16)),
                           (C64, (8, 8192), (1, 8192))):
            a, b = _cx(rng, sa, dt), _cx(rng, sb, dt)
            rec = (torch.from_numpy(a) * torch.from_numpy(b)).numpy()
            assert np.array_equal(rec.view(np.uint8),
                                  reference("aten.mul.Tensor", [a, b], {})[0].view(np.uint8))


def test_a_number_broadcast_along_the_row_is_not_guessed():
    """(5, 7) * (5, 1): torch's scalar loop there depends on the memory's alignment (measured:
    a first number plain, then four contracted), which a capture does not hold: ``unknown``."""
    rng = np.random.default_rng(36)
    for _ in range(5):
        a, b = _cx(rng, (5, 7), C64), _cx(rng, (5, 1), C64)
        rec = (torch.from_numpy(a) * torch.from_numpy(b)).numpy()
        n, got = _explain(a, b, rec)
        if n:
            assert got["cause"] == "unknown", got
            return
    pytest.fail("torch equalled the reference in every draw (nothing to test)")


_AVX2_CHILD = """
import sys, numpy as np, torch
assert torch.backends.cpu.get_cpu_capability() == "AVX2", torch.backends.cpu.get_cpu_capability()
rng = np.random.default_rng(37)
out = {}
for k, (dt, sa, sb) in enumerate([(np.complex64, (5, 7), (1, 7)), (np.complex64, (13,), (13,)),
                                  (np.complex128, (4, 7), (1, 7))]):
    a, b = [(rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(dt) for s in (sa, sb)]
    out[f"{k}a"], out[f"{k}b"] = a, b
    out[f"{k}y"] = (torch.from_numpy(a) * torch.from_numpy(b)).numpy()
np.savez(sys.argv[1], **out)
"""


def test_torchs_avx2_build_contracts_the_same_numbers(tmp_path):
    """The same rule under ATEN_CPU_CAPABILITY=avx2 (an AVX2-only CPU's kernels; measured
    alike), in a child."""
    f = tmp_path / "avx2.npz"
    p = subprocess.run([sys.executable, "-c", _AVX2_CHILD, str(f)], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, ATEN_CPU_CAPABILITY="avx2"))
    assert p.returncode == 0, p.stderr[-3000:]
    z = np.load(f)
    for k, row in enumerate(("rows of 7", "one row", "rows of 7")):
        n, got = _explain(z[f"{k}a"], z[f"{k}b"], z[f"{k}y"])
        assert n > 0 and got["cause"] == "fma" and got["variant"].endswith(row), (k, got)
