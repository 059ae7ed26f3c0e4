"""benchmarks/bench_replay.py on the CPU: the CUDA-graph capture of PyTorch's training step (a
capturable Adam, checked by PyTorch's own capture health check under a stand-in torch.cuda), and
rows printed as they are measured, a failing row block reported and the rest kept."""

from __future__ import annotations

import contextlib
import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_replay",
                                                  ROOT / "benchmarks" / "bench_replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def fake_capture(monkeypatch):
    """torch.cuda's stream/graph surface on the CPU: inside `torch.cuda.graph(g)` the current
    stream reports capturing, so the real Optimizer.step() runs PyTorch's own capture health
    check (the one that raised on the GPU for a non-capturable Adam). A capturable Adam may run
    on CPU tensors here (PyTorch allows it on cuda/xpu/hpu only)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import torch.optim.adam as adam

    capturing = [False]

    class Stream:
        def wait_stream(self, other):
            pass

        def is_capturing(self):
            return capturing[0]

    class Graph:
        replays = 0

        def replay(self):
            Graph.replays += 1

    @contextlib.contextmanager
    def graph(g):
        capturing[0] = True
        try:
            yield
        finally:
            capturing[0] = False

    if not hasattr(torch, "accelerator"):
        pytest.skip("this PyTorch has no torch.accelerator (the health check reads it)")
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: torch.device("cuda"))
    monkeypatch.setattr(torch.accelerator, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(adam, "_get_capturable_supported_devices",
                        lambda supports_xla=True: ["cuda", "cpu"])
    for name, value in (("is_available", lambda: True), ("Stream", Stream),
                        ("current_stream", lambda device=None: Stream()),
                        ("stream", lambda s: contextlib.nullcontext()),
                        ("CUDAGraph", Graph), ("graph", graph), ("synchronize", lambda: None)):
        monkeypatch.setattr(torch.cuda, name, value)
    return Graph


def test_the_stand_in_catches_the_old_capture_of_a_plain_adam(bench, fake_capture):
    # control: what bench_replay did before (Adam without capturable=True) raises under the
    # stand-in exactly as PyTorch raised on the GPU
    with pytest.raises(RuntimeError, match="capturable is False"):
        bench.capture_torch_graph(bench.torch_mlp_step("small", "float64", "cpu"))


def test_pytorch_cuda_graph_row_captures_a_capturable_adam(bench, fake_capture, monkeypatch):
    real = bench.torch_mlp_step
    seen = []

    def on_cpu(size, dtype, device, capturable=False):  # the "cuda" tensors live on the CPU
        seen.append((device, capturable))
        return real(size, dtype, "cpu", capturable)

    monkeypatch.setattr(bench, "torch_mlp_step", on_cpu)
    rows = list(bench.torch_rows("small", 2, "cuda", "float32"))
    assert [r[0] for r in rows] == ["PyTorch CUDA eager", "PyTorch CUDA graph"]
    assert all(math.isfinite(t) for _, t, _ in rows)
    assert seen == [("cuda", False), ("cuda", True)]  # eager: the default Adam; graph: capturable
    assert fake_capture.replays == 3  # warm-up + 2 timed replays


def test_rows_print_as_measured_and_a_failing_block_is_a_failed_row(bench, monkeypatch, capsys):
    def broken(size, repeat, device, dtype="float64"):
        yield "PyTorch CPU eager", 0.001, "1 thread"
        raise RuntimeError("Attempting CUDA graph capture of step()\nbut boom")

    monkeypatch.setattr(bench, "torch_rows", broken)
    rc = bench.main(["--device", "host", "--size", "small", "--repeat", "1",
                     "--dtype", "float32"])
    out = capsys.readouterr().out
    assert rc == 1
    rows = [ln.split("  ")[0].strip() for ln in out.splitlines()[3:] if ln.strip()]
    assert rows[:4] == ["CPU tape (reference)", "host eager", "host episode",
                        "host fused episode"], out
    assert "PyTorch CPU eager" in out  # the row before the crash is kept
    failed = [ln for ln in out.splitlines() if "FAILED" in ln]
    assert len(failed) == 1 and failed[0].startswith("PyTorch CPU")
    assert "RuntimeError: Attempting CUDA graph capture of step() but boom" in failed[0]
