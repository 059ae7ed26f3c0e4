#!/usr/bin/env bash
# device_check.sh: everything that needs a GPU, in one command, for a lent GPU machine.
# It installs nothing and needs no registry (Python 3.12 + numpy + CuPy + PyTorch is enough; no
# PySide6, no onnx; pytest only for stage 2). Stages, each under its own time limit (~5 min):
#   1. smoke (20 s budget): open the device, compile the kernel library (and the diff kernels),
#      load it, run one episode of the mlp, compare every node with the CPU tape
#   2. the CUDA tests (pytest -m cuda; they skip with the reason when no device answers)
#   3. `parity` for mlp and transformer, unfused and --fuse, float64 and float32
#   4. the replay benchmark: CPU tape, host, cuda eager / cuda graph, PyTorch CUDA eager / graph
#   then the stage table, and the benchmark table last.
# Usage: bash benchmarks/device_check.sh [--dry-run] [repeat]   (from anywhere)
#   --dry-run: the same stages on the host backend (no GPU, quick: what CI runs).
# Exit status: 0 when every stage passed, 1 otherwise.
set -u -o pipefail
cd "$(dirname "$0")/.."
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
REPEAT="${1:-20}"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
LOG="$(mktemp -d)"
if [ $DRY = 1 ]; then
  DEV=host; STEPS=1; BENCH=(--device host --size small --repeat 3)
else
  # cuda rows against PyTorch CUDA (the host rows are measured on CPU machines; a GPU machine
  # may not even have g++)
  DEV=cuda; STEPS=3; BENCH=(--device cuda --size both --repeat "$REPEAT")
  # a fresh kernel cache: every compile in this run is real
  export TAPESCOPE_CACHE_DIR="${TAPESCOPE_CACHE_DIR:-$LOG/kernels}"
fi
ROWS=()
status=0

# `tapescope` = python -m app.cli; if the full CLI cannot even build its parser here (some other
# command's import-time dependency missing), run each subcommand on its own instead.
if "$PY" -c "import app.cli; app.cli.build_parser()" 2>"$LOG/cli.err"; then
  tapescope() { "$PY" -m app.cli "$@"; }
else
  echo "note: python -m app.cli does not start here ($(tail -1 "$LOG/cli.err")); running" \
       "the subcommands directly"
  tapescope() {
    "$PY" -c 'import argparse, importlib, sys
m = importlib.import_module("app.commands." + sys.argv[1])
p = argparse.ArgumentParser(prog="tapescope"); m.register(p.add_subparsers())
a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a) or 0)' "$@"
  }
fi

stage() {  # stage NAME LIMIT_S CMD...: run, time, record a row
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS rc
  echo "== $name"
  timeout "$limit" bash -c '"$@"' stage "$@"; rc=$?
  local res="ok"
  if [ $rc = 124 ]; then res="TIMEOUT (${limit}s)"; elif [ $rc = 77 ]; then res="SKIPPED (see log)"
  elif [ $rc != 0 ]; then res="FAIL (exit $rc)"; fi
  case "$res" in ok|SKIPPED*) ;; *) status=1 ;; esac
  ROWS+=("$(printf '%-40s %-18s %5ss' "$name" "$res" $((SECONDS - t0)))")
}

smoke() {
  "$PY" - "$DEV" <<'EOF'
import sys, time
t0 = time.perf_counter()
import gpu
from core import workloads
dev = gpu.open_device(sys.argv[1])
print(dev.describe())
wl = workloads.get("mlp")
loss = wl.record(0)
wl.tape.backward(loss)
prog = gpu.capture(dev, wl.tape, loss)          # compiles and loads the kernel library
t1 = time.perf_counter()
prog.forward()
prog.backward()
rep = gpu.parity.compare(wl.tape, prog)          # compiles the diff kernels, diffs on device
t2 = time.perf_counter()
print(f"library compiled and loaded in {t1 - t0:.1f} s; one episode + device diff in "
      f"{t2 - t1:.1f} s; loss tape {float(wl.tape.value(loss))!r} device {prog.loss()!r}")
print("smoke: bit-identical" if rep.exact else f"smoke: DIFFERS at {rep.first_divergence}")
sys.exit(0 if rep.exact else 1)
EOF
}

cuda_tests() {
  if ! "$PY" -c "import pytest" 2>/dev/null; then
    echo "pytest is not installed: the CUDA tests cannot run (stages 1 and 3 cover the device)"
    return 77
  fi
  # --confcutdir: only tests/gpu/conftest.py (the suite-wide conftest needs Hypothesis); no
  # plugin autoload: whatever pytest plugins the machine has (or half has) stay out of it
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$PY" -m pytest -m cuda tests/gpu/test_cuda.py -q -rs \
    -p no:cacheprovider --confcutdir=tests/gpu -W ignore::pytest.PytestConfigWarning
}

export PY DEV
export -f tapescope smoke cuda_tests

echo "device check: $([ $DRY = 1 ] && echo "DRY RUN on the host backend" || echo "cuda"), $PY"
"$PY" -c "import sys, numpy; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"
"$PY" -c "import cupy; print('cupy', cupy.__version__)" 2>/dev/null || echo "cupy: not installed"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" \
  2>/dev/null || echo "torch: not installed"

stage "1 smoke (library, one episode, diff)" 60 smoke
stage "2 cuda tests (pytest -m cuda)" 150 cuda_tests
for wl in mlp transformer; do
  for dt in float64 float32; do
    for fuse in "" --fuse; do
      stage "3 parity $wl $dt ${fuse:-unfused}" 60 \
        tapescope parity --workload "$wl" --device "$DEV" --steps "$STEPS" --dtype "$dt" $fuse
    done
  done
done
stage "4 benchmark (bench_replay.py)" 120 \
  bash -c '"$0" benchmarks/bench_replay.py "$@" | tee "'"$LOG"'/bench.txt"' "$PY" "${BENCH[@]}"

echo
echo "device check summary ($([ $DRY = 1 ] && echo "dry run, host" || echo cuda))"
printf '%-40s %-18s %6s\n' stage result time
for r in "${ROWS[@]}"; do echo "$r"; done
echo
cat "$LOG/bench.txt" 2>/dev/null
exit $status
