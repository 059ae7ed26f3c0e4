"""Real NVRTC, no GPU: every kernel tapescope generates compiles with the cuda backend's flags,
and the refmath PTX keeps the parity contract (no fma, .ftz, .approx; .rn division and sqrt).

On Linux x86_64 the test extra installs CuPy and NVRTC from their wheels, so these tests run
(and fail if NVRTC does not load there); elsewhere they skip with the reason (`needs_nvrtc`),
except the target choice, which is pure logic.
"""

from __future__ import annotations

import numpy as np
import pytest

from tapescope.gpu.device import DeviceError
from tapescope.gpu.nvrtc import (
    NVRTC_FLAGS,
    audit_ok,
    audit_ptx,
    choose_target,
    kernel_headers,
    load_nvrtc,
    nvrtc_compile,
    nvrtc_version,
)
from tests.helpers.nvrtc import needs_nvrtc


@pytest.fixture(scope="module")
def kernels_out(tmp_path_factory):
    """`tapescope kernels --arch sm_90 --out DIR --audit`, run once: (exit code, stdout, DIR)."""
    import contextlib
    import io

    from tapescope.app.cli import main

    out = tmp_path_factory.mktemp("kernels")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["kernels", "--arch", "sm_90", "--out", str(out), "--audit",
                   "--dtype", "float64", "--dtype", "float32"])
    return rc, buf.getvalue(), out


@pytest.fixture(scope="module")
def half_kernels_out(tmp_path_factory):
    """The same for the float16 and bfloat16 units (12 more: the suite's slow tier)."""
    import contextlib
    import io

    from tapescope.app.cli import main

    out = tmp_path_factory.mktemp("kernels_half")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["kernels", "--arch", "sm_90", "--out", str(out), "--audit",
                   "--dtype", "float16", "--dtype", "bfloat16"])
    return rc, buf.getvalue(), out


@needs_nvrtc
def test_headers_go_to_nvrtc_as_bytes():
    # CuPy's createProgram takes the source and name as str but the header texts and include
    # names as bytes; str headers are a TypeError (the bug that kept the backend from compiling)
    nvrtc = load_nvrtc()
    names, texts = kernel_headers()
    assert b"refmath.cuh" in names and all(isinstance(t, bytes) for t in names + texts)
    # refmath's C twin is core's (core/refmath/), the host-only headers stay out
    from tapescope.core import refmath

    assert texts[names.index(b"refmath.cuh")] == (refmath.C_DIR / "refmath.cuh").read_bytes()
    assert b"host_prelude.h" not in names and b"intrinsics_host.h" not in names
    with pytest.raises(TypeError):
        nvrtc.createProgram("int x;", "t.cu", [t.decode() for t in texts],
                            [n.decode() for n in names])
    src = '#include "refmath.cuh"\nextern "C" __global__ void k(double* y) { y[0] = ts_exp(y[0]); }'
    res = nvrtc_compile(src, "sm_90")
    assert res.cubin[:4] == b"\x7fELF" and b".entry k(" in res.ptx
    assert res.options == (*NVRTC_FLAGS, "--gpu-architecture=sm_90")
    assert res.version == nvrtc_version()


@needs_nvrtc
def test_compute_target_gives_ptx_only():
    res = nvrtc_compile('extern "C" __global__ void k(float* y) { y[0] = 1.0f; }', "compute_80")
    assert res.cubin is None and res.binary == res.ptx and b".target sm_80" in res.ptx


@needs_nvrtc
def test_compile_error_names_nvrtc_and_the_log():
    with pytest.raises(DeviceError,
                       match=r"(?s)NVRTC \d+\.\d+ compile failed for sm_90.*nope.*undefined"):
        nvrtc_compile('extern "C" __global__ void k(double* y) { y[0] = nope; }', "sm_90")


@needs_nvrtc
def test_audit_flags_every_forbidden_instruction():
    # the audit itself must be able to fail: each kernel below breaks one rule
    bad = {
        "fma": "y[0] = __fma_rn(y[0], y[1], y[2]);",
        "approx": "y[0] = __fdividef(y[0], y[1]);",
        "ftz": 'asm("add.rn.ftz.f32 %0, %1, %2;" : "=f"(y[0]) : "f"(y[1]), "f"(y[2]));',
        "div.other": "y[0] = __fdiv_rz(y[0], y[1]);",
        "sqrt.other": "y[0] = __fsqrt_ru(y[0]);",
        # a truncating conversion to float16 (the half kernels must round to nearest even)
        "cvt.other": 'unsigned short h; asm("cvt.rz.f16.f32 %0, %1;" : "=h"(h) : "f"(y[1])); '
                     "y[0] = (float)h;",
    }
    for rule, body in bad.items():
        res = nvrtc_compile(f'extern "C" __global__ void k(float* y) {{ {body} }}', "sm_90")
        counts = audit_ptx(res.ptx)
        assert counts[rule] > 0 and not audit_ok(counts), (rule, counts)
    good = nvrtc_compile('extern "C" __global__ void k(float* y) '
                         '{ y[0] = __fdiv_rn(__fsqrt_rn(y[0]), y[1]); }', "sm_90")
    counts = audit_ptx(good.ptx)
    assert audit_ok(counts) and counts["div.rn"] == counts["sqrt.rn"] == 1
    # round-to-nearest-even conversions are allowed; the half kernels' integer code has none
    rn = nvrtc_compile('extern "C" __global__ void k(float* y) { unsigned short h; '
                       'asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(y[1])); y[0] = (float)h; }',
                       "sm_90")
    assert b"cvt.rn.f16.f32" in rn.ptx and audit_ok(audit_ptx(rn.ptx))


def test_audit_counts_the_mad_spelling_of_fma_but_not_integer_mad():
    # PTX spells a fused multiply-add `fma.rn.f32` or, older, `mad.rn.f32` / `mad.f32` (which
    # sm_20+ reads as fma); integer `mad.lo`/`mad.wide`/`mad.hi` are index arithmetic
    fused = ["mad.rn.f32 %f3, %f4, %f5, %f6;", "mad.f32 %f1, %f2, %f3, %f4;",
             "@%p1 mad.rz.ftz.sat.f32 %f1, %f2, %f3, %f4;", "mad.rn.f64 %fd1, %fd2, %fd3, %fd4;",
             "fma.rn.f64 %fd1, %fd2, %fd3, %fd4;"]
    for line in fused:
        counts = audit_ptx(f".entry k(\n)\n{{\n\t{line}\n}}\n")
        assert counts["fma"] == 1 and not audit_ok(counts), line
    index = "\tmad.lo.s32 %r1, %r4, %r3, %r5;\n\tmad.wide.u32 %rd1, %r1, 8, %rd2;\n" \
            "\tmad.hi.u64 %rd3, %rd1, %rd2, %rd3;\n\t// mad.rn.f32 in a comment\n"
    counts = audit_ptx(f".entry k(\n)\n{{\n{index}}}\n")
    assert counts["fma"] == 0 and audit_ok(counts)


@needs_nvrtc
def test_audit_flags_mad_in_real_nvrtc_ptx():
    res = nvrtc_compile('extern "C" __global__ void k(float* y) { asm("mad.rn.f32 %0, %1, %2, '
                        '%3;" : "=f"(y[0]) : "f"(y[1]), "f"(y[2]), "f"(y[3])); }', "sm_90")
    assert b"mad.rn.f32" in res.ptx
    counts = audit_ptx(res.ptx)
    assert counts["fma"] == 1 and not audit_ok(counts)


@pytest.mark.xdist_group("nvrtc-kernels")  # one worker compiles every kernel once
@needs_nvrtc
def test_every_kernel_compiles_and_the_refmath_ptx_passes_the_audit(kernels_out):
    from tapescope.app.commands.kernels import DTYPES, MATHS
    from tapescope.gpu.signature import parse_kernels

    rc, text, out = kernels_out
    assert rc == 0, text
    assert "audit ok" in text
    # DIR holds the headers its units include, as core has them: it compiles alone
    from tapescope.core import refmath

    assert (out / "refmath.cuh").read_bytes() == (refmath.C_DIR / "refmath.cuh").read_bytes()
    stems = [f"{u}-{dt}-{m}" for m in MATHS for dt in DTYPES[:2]
             for u in ("library", "fused-mlp", "fused-transformer")]
    stems += [f"diff-{dt}-refmath" for dt in ("float64", "float32")]
    for stem in stems:
        src = (out / f"{stem}.cu").read_text()
        ptx = (out / f"{stem}.ptx").read_bytes()
        assert (out / f"{stem}.cubin").read_bytes()[:4] == b"\x7fELF"
        names = parse_kernels(src)
        assert names and all(f".entry {n}(".encode() in ptx for n in names), stem
        counts = audit_ptx(ptx)
        assert counts["kernels"] == len(names)
        if stem.endswith("refmath"):
            assert audit_ok(counts), (stem, counts)
            assert f"{stem} " in text and "FAIL" not in text


@pytest.mark.xdist_group("nvrtc-kernels")  # one worker compiles every kernel once
@needs_nvrtc
def test_the_audit_table_in_devices_md_is_what_kernels_prints(kernels_out):
    # docs/devices.md restates the audit's counts; they went stale once (div.rn 152 vs 160)


    _, text, _ = kernels_out
    _check_doc_table(text, 14)


@needs_nvrtc
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_half_unit_compiles_audits_and_is_in_devices_md(half_kernels_out):
    from tapescope.app.commands.kernels import MATHS
    from tapescope.gpu.signature import parse_kernels

    rc, text, out = half_kernels_out
    assert rc == 0 and "audit ok" in text, text
    for m in MATHS:
        for dt in ("float16", "bfloat16"):
            for u in ("library", "fused-mlp", "fused-transformer"):
                stem = f"{u}-{dt}-{m}"
                names = parse_kernels((out / f"{stem}.cu").read_text())
                counts = audit_ptx((out / f"{stem}.ptx").read_bytes())
                assert names and counts["kernels"] == len(names), stem
                assert m == "platform" or audit_ok(counts), (stem, counts)
    _check_doc_table(text, 12)


@needs_nvrtc
def test_the_half_library_compiles_and_passes_the_audit():
    # the quick tier's half check: both half libraries (refmath), as the backends compile them
    from tapescope.app.commands.kernels import units

    half = [u for u in units(workloads=(), dtypes=("float16", "bfloat16"))
            if u.math == "refmath"]
    assert [u.stem for u in half] == ["library-float16-refmath", "library-bfloat16-refmath"]
    for u in half:
        res = nvrtc_compile(u.source, "sm_90", name=f"{u.stem}.cu")
        counts = audit_ptx(res.ptx)
        assert audit_ok(counts) and counts["kernels"] > 40 and counts["cvt.other"] == 0, counts


def _check_doc_table(text: str, rows: int) -> None:
    import re
    from pathlib import Path

    from tapescope.gpu.nvrtc import AUDIT_COLUMNS, cuda_version_text

    printed = {}
    for ln in text.splitlines():
        parts = ln.split()
        if len(parts) > 3 + len(AUDIT_COLUMNS) and parts[0].count("-") >= 2:
            printed[parts[0]] = parts[3:3 + len(AUDIT_COLUMNS)]
    assert len(printed) == rows, text
    doc = (Path(__file__).resolve().parents[2] / "docs" / "devices.md").read_text()
    section = doc[doc.index("## Compiling and auditing every kernel"):]
    version = re.search(r"With NVRTC (\d+\.\d+)", section).group(1)
    if version != cuda_version_text(nvrtc_version()):
        pytest.skip(f"docs/devices.md's table is for NVRTC {version}, this is "
                    f"{cuda_version_text(nvrtc_version())}")
    table = {}
    start = section.index("| unit |")
    for ln in section[start:section.index("\n\n", start)].splitlines()[2:]:
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        table[cells[0]] = cells[1:]
    want = "\n".join(f"| {u} | {' | '.join(v)} |" for u, v in printed.items())
    assert len(table) == 26  # every unit of every dtype is in the doc
    assert {u: table.get(u) for u in printed} == printed, \
        f"docs/devices.md's audit table should read:\n{want}"


@pytest.mark.xdist_group("nvrtc-kernels")  # one worker compiles every kernel once
@needs_nvrtc
def test_platform_units_really_differ(kernels_out):
    # control: the platform libm does use fma/approx, so a clean refmath audit means something
    _, _, out = kernels_out
    counts = audit_ptx((out / "library-float32-platform.ptx").read_bytes())
    assert counts["fma"] > 0 and not audit_ok(counts)


@pytest.mark.xdist_group("nvrtc-kernels")  # one worker compiles every kernel once
@needs_nvrtc
def test_library_unit_is_what_the_backend_compiles(kernels_out):
    from tapescope.gpu.source import library_source

    _, _, out = kernels_out
    for math in ("refmath", "platform"):
        both = library_source(math)
        for dt in ("float64", "float32"):
            unit = (out / f"library-{dt}-{math}.cu").read_text()
            body = unit.split("\n", 1)[1]  # after the shared #include line
            for part in body.split("/* ---- ")[1:]:
                assert "/* ---- " + part.rstrip("\n") in both
        for dt in ("float16", "bfloat16"):  # a half program compiles its own dtype only
            from tapescope.app.commands.kernels import units
            from tapescope.core.precision import dtype_of

            one = library_source(math, (dtype_of(dt),))
            (u,) = [u for u in units(workloads=(), dtypes=(dt,)) if u.math == math]
            unit = u.source
            assert '#include "half.cuh"' in unit and '#include "half.cuh"' in one
            for part in unit.split("/* ---- ")[1:]:
                assert "/* ---- " + part.rstrip("\n") in one


def test_target_choice():
    archs = (75, 80, 86, 89, 90, 100, 120)
    t = choose_target(90, (12, 9), archs, 12040)
    assert (t.arch, t.kind) == ("sm_90", "cubin")  # an NVRTC newer than the driver: cubin loads
    t = choose_target(130, (12, 9), archs, 12090)
    assert (t.arch, t.kind) == ("compute_120", "ptx")  # a device newer than NVRTC: PTX
    with pytest.raises(DeviceError, match=r"CUDA 12\.4, NVRTC is 12\.9"):
        choose_target(130, (12, 9), archs, 12040)  # PTX from a newer NVRTC will not JIT
    with pytest.raises(DeviceError, match=r"CUDA 12\.8, NVRTC is 13\.0.*cupy-cuda12x"):
        choose_target(90, (13, 0), archs, 12080)
    with pytest.raises(DeviceError, match="older than any"):
        choose_target(50, (12, 9), archs, 12090)
    assert np.all([choose_target(a, (12, 9), archs, 13000).kind == "cubin" for a in archs])
