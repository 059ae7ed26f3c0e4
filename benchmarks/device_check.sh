#!/usr/bin/env bash
# device_check.sh: everything that needs a GPU, in one command, for a lent GPU machine.
#   1. the CUDA tests (pytest -m cuda; they skip with the reason when no device answers)
#   2. `tapescope parity` on cuda for both workloads (exit 0 = bit-identical every step)
#   3. the replay benchmark (host and cuda rows; its table prints last)
# Usage: bash benchmarks/device_check.sh [repeat]   (run from the repository root)
set -u -o pipefail
cd "$(dirname "$0")/.."
REPEAT="${1:-20}"
# the GPU image's interpreter is python3 (the one holding CuPy and PyTorch)
PY="${PYTHON:-$(command -v python3 || command -v python)}"
export TAPESCOPE_CACHE_DIR="${TAPESCOPE_CACHE_DIR:-$(mktemp -d)/kernels}"
"$PY" -c "import cupy, sys; print('cupy', cupy.__version__, 'devices', cupy.cuda.runtime.getDeviceCount())" \
  || echo "CuPy missing: the cuda rows and tests will skip (pip install cupy-cuda12x)"
status=0
"$PY" -m pytest -m cuda tests/gpu -q -rs -p no:cacheprovider || status=1
for wl in mlp transformer; do
  for dt in float64 float32; do
    "$PY" -m app.cli parity --workload "$wl" --device cuda --steps 5 --dtype "$dt" | tail -1 \
      || status=1
  done
done
"$PY" benchmarks/bench_replay.py --device all --repeat "$REPEAT" || status=1
exit $status
