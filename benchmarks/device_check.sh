#!/usr/bin/env bash
# device_check.sh: everything that needs a GPU, sized for a lent GPU machine (one command is cut
# at 600 s; the whole lease is ~15 min). It installs nothing and needs no network: Python with
# numpy + CuPy (+ PyTorch, pytest when there) is enough; no PySide6, onnx or Hypothesis needed.
#
# Stages, in order (ids for --only in brackets; "quick" marks what --quick runs):
#   [env]        driver, CUDA, sm, versions (quick)
#   [nvrtc]      `tapescope kernels --arch <the device's sm> --audit`: every unit, real NVRTC (quick)
#   [parity]     `tapescope parity` per workload x dtype x fused/unfused x math: refmath must be
#                bit-identical (exit 0), platform may drift (exit 1 is ok; its table is kept)
#                (quick: 5 of the 16 cases)
#   [provenance] `parity --inject` on the device: exactly the injected node is introduced (quick:
#                1 of 2)
#   [torch]      PyTorch on the GPU as a candidate (`parity --device torch:cuda`), when the CLI
#                has it; otherwise "skipped: not implemented yet" (quick)
#   [pytest]     pytest -m cuda on the files holding the CUDA tests
#   [bench]      bench_replay.py (tape vs our eager / graph / fused graph vs PyTorch eager and
#                CUDA graph, f64 and f32) and bench_fusion.py (per workload: launches, fused vs
#                unfused) (quick: small size, fewer repeats)
#   [extra]      each --extra CMD, run by bash with pipefail
# Every stage runs under its own time limit, clamped to what is left of the budget (default form
# 470 s, --quick 170 s): a stage that does not fit is "not run: out of budget", never a cut run.
# As soon as a stage ends, its result, its real exit code, its time and its table rows are
# appended to DIR/device_check.md (DIR: --out, else $OUT, else a new temp folder); its whole log
# is DIR/device_check_logs/NN-<stage>.log. The summary table is printed and appended at the end.
#
# Usage: bash benchmarks/device_check.sh [--dry-run] [--quick] [--out DIR] [--only IDS]
#                                        [--budget S] [--repeat N] [--extra CMD]...
#   --dry-run  the same stages on the host backend (no GPU; what CI and the tests run)
#   --only     comma-separated stage ids, e.g. --only env,parity (several commands can fill one
#              report: it is appended to)
# Exit status: 0 when every stage that ran passed and none was cut, 1 otherwise, 2 bad usage.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
DRY=0 QUICK=0 OUTDIR="${OUT:-}" ONLY="" BUDGET="" REPEAT="" EXTRAS=()
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --quick) QUICK=1 ;;
    --out|--only|--budget|--repeat|--extra)
      if [ $# -lt 2 ]; then echo "device_check.sh: $1 needs a value" >&2; exit 2; fi
      case "$1" in
        --out) OUTDIR="$2" ;; --only) ONLY="$2" ;; --budget) BUDGET="$2" ;;
        --repeat) REPEAT="$2" ;; --extra) EXTRAS+=("$2") ;;
      esac
      shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "device_check.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done
for id in ${ONLY//,/ }; do
  case "$id" in env|nvrtc|parity|provenance|torch|pytest|bench|extra) ;;
    *) echo "device_check.sh: --only: unknown stage '$id' (env nvrtc parity provenance torch" \
            "pytest bench extra)" >&2; exit 2 ;;
  esac
done
case "$BUDGET$REPEAT" in *[!0-9]*) echo "device_check.sh: --budget and --repeat take whole" \
                                         "numbers" >&2; exit 2 ;; esac
[ -n "$BUDGET" ] || BUDGET=$([ $QUICK = 1 ] && echo 170 || echo 470)

PY="${PYTHON:-$(command -v python3 || command -v python)}"
# run from this checkout as it is (no install needed): a folder `tapescope` of links laid out as
# a wheel installs it (pyproject.toml's package-dir: the package itself is app/_top, then the
# checkout's folders; app/capture/bootstrap.py's package_parent does the same for a capture)
SHIM="$(mktemp -d "${TMPDIR:-/tmp}/tapescope_path.XXXXXX")" || exit 2
trap 'rm -rf "$SHIM"' EXIT  # (links only: rm does not follow them into the checkout)
mkdir "$SHIM/tapescope" || exit 2
for f in "$PWD"/app/_top/*.py "$PWD"/app "$PWD"/core "$PWD"/gpu "$PWD"/views "$PWD"/resources; do
  ln -s "$f" "$SHIM/tapescope/" || exit 2
done
export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
if [ -z "$OUTDIR" ]; then OUTDIR="$(mktemp -d "${TMPDIR:-/tmp}/device_check.XXXXXX")"; fi
mkdir -p "$OUTDIR/device_check_logs" || exit 2
OUTDIR="$(cd "$OUTDIR" && pwd)"
REPORT="$OUTDIR/device_check.md"
LOGS="$OUTDIR/device_check_logs"
if [ $DRY = 1 ]; then
  DEV=host; STEPS=1; MODE="dry run (host backend)"; REPEAT="${REPEAT:-3}"
else
  DEV=cuda; STEPS=3; MODE="cuda"; REPEAT="${REPEAT:-$([ $QUICK = 1 ] && echo 5 || echo 20)}"
  # a fresh kernel cache: every compile in this run is real (and timed)
  export TAPESCOPE_CACHE_DIR="${TAPESCOPE_CACHE_DIR:-$LOGS/kernels}"
fi
export PY DEV STEPS DRY QUICK REPEAT LOGS

# `tapescope` = python -m tapescope.app.cli; if the full CLI cannot even build its parser here (some other
# command's import-time dependency missing), run each subcommand on its own instead.
if "$PY" -c "import tapescope.app.cli as c; c.build_parser()" 2>"$LOGS/cli.err"; then
  tapescope() { "$PY" -m tapescope.app.cli "$@"; }
else
  echo "note: python -m tapescope.app.cli does not start here ($(tail -1 "$LOGS/cli.err")); running" \
       "the subcommands directly"
  tapescope() {
    "$PY" -c 'import argparse, importlib, sys
m = importlib.import_module("tapescope.app.commands." + sys.argv[1])
p = argparse.ArgumentParser(prog="tapescope"); m.register(p.add_subparsers())
a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a) or 0)' "$@"
  }
fi

# ---- the stage runner --------------------------------------------------------------------------
T0=$SECONDS N=0 status=0
SUMMARY=()
selected() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

record() {  # record NAME RESULT RC SECONDS LIMIT [ROWS_FILE] [LOG]: append to the report now
  local name="$1" res="$2" rc="$3" secs="$4" limit="$5" rows="${6:-}" log="${7:-}"
  SUMMARY+=("| ${name//|/\\|} | ${res//|/\\|} | $rc | $secs | $limit |")
  {
    echo
    echo "### $name: $res (exit $rc, ${secs} s of ${limit} s)"
    if [ -n "$rows" ] && [ -s "$rows" ]; then
      echo; echo '```text'; cat "$rows"; echo '```'
    elif [ -n "$log" ] && [ -s "$log" ]; then
      echo; echo '```text'; tail -n 15 "$log"; echo '```'
    fi
    [ -n "$log" ] && echo && echo "log: \`device_check_logs/$(basename "$log")\`"
  } >>"$REPORT"
}

stage() {  # stage ID NAME LIMIT OK_CODES CMD...: run CMD under min(LIMIT, budget left), record
  local id="$1" name="$2" limit="$3" okcodes="$4"; shift 4
  selected "$id" || return 0
  N=$((N + 1))
  local left=$((BUDGET - (SECONDS - T0))) slug
  slug="$(printf '%02d-%s' "$N" "$name" | tr -c 'A-Za-z0-9._-' '_' | cut -c1-60)"
  local log="$LOGS/$slug.log" rows="$LOGS/$slug.rows" rc t0=$SECONDS res
  if [ "$left" -lt 5 ]; then
    echo "== $name: not run, out of budget (${left}s of ${BUDGET}s left)"
    record "$name" "not run: out of budget" - 0 0
    status=1
    return 0
  fi
  [ "$limit" -gt $((left - 2)) ] && limit=$((left - 2))
  echo "== $name (limit ${limit}s)"
  # pipefail in the stage's own shell too: a stage that pipes through tee keeps its exit code
  { STAGE_ROWS="$rows" timeout -k 5 "$limit" bash -o pipefail -c '"$@"' stage "$@" \
      </dev/null; echo $? >"$LOGS/rc"; } 2>&1 | tee "$log"
  rc="$(cat "$LOGS/rc")"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then res="TIMEOUT after ${limit}s"; status=1
  elif [ "$rc" = 77 ]; then
    res="$(grep -v '^\s*$' "$log" | tail -1 | cut -c1-160)"
    [[ "$res" == skipped:* ]] || res="skipped: $res"
  elif [[ ",$okcodes," == *",$rc,"* ]]; then
    res="ok"; [ "$rc" != 0 ] && res="ok: $(cat "$LOGS/okwhy" 2>/dev/null || echo "exit $rc")"
  else res="FAIL"; status=1
  fi
  rm -f "$LOGS/okwhy"
  record "$name" "$res" "$rc" $((SECONDS - t0)) "$limit" "$rows" "$log"
}

# ---- the stages (run in a child bash: exported below) ------------------------------------------
env_stage() {
  if [ "$DEV" = cuda ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
  fi
  "$PY" - <<'EOF' | tee "$STAGE_ROWS"
import importlib.metadata as md, os, platform, sys
dists = md.packages_distributions()  # versions without importing (torch alone takes seconds)
def version(name):
    found = [f"{d} {md.version(d)}" for d in sorted(set(dists.get(name, ())))]
    return ", ".join(found) or "absent"
print("python", sys.version.split()[0], platform.platform(), f"{os.cpu_count()} CPUs")
for m in ("numpy", "cupy", "torch", "pytest", "hypothesis", "onnx", "PySide6"):
    print(f"  {m:<11}{version(m)}")
from gpu.cuda import cuda_unavailable_reason
from gpu.nvrtc import cuda_version_text, nvrtc_version
try:
    print("NVRTC", cuda_version_text(nvrtc_version()))
except Exception as e:
    print("NVRTC cannot load:", " ".join(str(e).split()))
why, sm = cuda_unavailable_reason(), "sm_90"
if why is None:
    import cupy
    import gpu
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(0)
    cc = cupy.cuda.Device(0).compute_capability
    sm = f"sm_{cc}"
    print(f"GPU {props['name'].decode()}, {sm}, {props['totalGlobalMem'] / 2**30:.0f} GiB; "
          f"driver CUDA {cuda_version_text(rt.driverGetVersion())}, runtime "
          f"{cuda_version_text(rt.runtimeGetVersion())}")
    print(gpu.open_device("cuda").describe())
else:
    print("CUDA:", why)
if os.environ["DEV"] == "cuda":
    try:
        import torch
        ok = torch.cuda.is_available()
        print(f"torch CUDA {torch.version.cuda}, available {ok}"
              + (f", {torch.cuda.get_device_name(0)}" if ok else ""))
    except ImportError:
        pass
with open(os.path.join(os.environ["LOGS"], "sm"), "w") as f:
    f.write(sm)
sys.exit(2 if why is not None and os.environ["DEV"] == "cuda" else 0)
EOF
}

nvrtc_stage() {
  local arch
  arch="$(cat "$LOGS/sm" 2>/dev/null || echo sm_90)"
  tapescope kernels --arch "$arch" --audit | tee "$STAGE_ROWS"
}

parity_case() {  # parity_case ARGS...: `tapescope parity`, rows: its summary and node table
  local out="$LOGS/parity.out" rc
  tapescope parity --device "$DEV" --steps "$STEPS" "$@" | tee "$out"
  rc=$?
  # the node table (the first 30 differing nodes), the summary, what introduced the error
  { grep '^ *node op ' "$out"; grep -E '^ +[0-9]+ ' "$out" | head -n 30
    grep -E ' steps on |^introduced' "$out"; } >"$STAGE_ROWS"
  [ "$rc" = 1 ] && echo "differs: drift, expected for platform math" >"$LOGS/okwhy"
  return "$rc"
}

inject_case() {  # inject_case WORKLOAD SPEC DTYPE: exactly that node is reported as introduced
  local json="$LOGS/inject.json" rc
  tapescope parity --workload "$1" --device "$DEV" --steps 3 --dtype "$3" --inject "$2" \
    --json "$json" | tee "$LOGS/inject.out"
  rc=$?
  grep -E ' steps on |^introduced' "$LOGS/inject.out" >"$STAGE_ROWS"
  if [ "$rc" != 1 ]; then echo "expected exit 1 (the injected flip differs), got $rc"; return 1; fi
  "$PY" - "$json" "$2" <<'EOF' | tee -a "$STAGE_ROWS"
import json, re, sys
intro = json.load(open(sys.argv[1]))["introduced"]
node, grad, step = re.fullmatch(r"(\d+)(:grad)?@(\d+)", sys.argv[2]).groups()
want = [(int(step), int(node), "grad" if grad else "value")]
got = [(e["step"], e["node"], e["which"]) for e in intro]
print(f"introduced: {got}; expected exactly {want}")
sys.exit(0 if got == want and intro[0]["n_diff"] == 1 and intro[0]["max_ulp"] == 1 else 1)
EOF
}

torch_stage() {  # torch_stage DEVICE
  if ! tapescope parity --help 2>/dev/null | grep -q -- "$1"; then
    echo "skipped: not implemented yet (tapescope parity --device has no $1)"
    return 77
  fi
  local wl dt rc=0 r
  for wl in mlp transformer; do
    for dt in float64 float32; do
      tapescope parity --workload "$wl" --device "$1" --steps "$STEPS" --dtype "$dt" \
        | tee "$LOGS/torch.out"
      r=$?
      grep ' steps on ' "$LOGS/torch.out" | sed "s/^/$wl $dt: /" >>"$STAGE_ROWS"
      [ "$r" -gt 1 ] && rc=$r   # 1 = differs: a candidate is measured, not required exact
    done
  done
  return "$rc"
}

pytest_stage() {
  if ! "$PY" -c "import pytest" 2>/dev/null; then
    echo "skipped: pytest is not installed (the parity stages cover the device)"
    return 77
  fi
  # --confcutdir: only tests/gpu/conftest.py (the suite-wide one wants Hypothesis); no plugin
  # autoload: whatever pytest plugins the machine has (or half has) stay out of it, and so
  # pyproject's addopts go too (-o addopts=): its "-n 3" is pytest-xdist's, which is not loaded
  # ("unrecognized arguments: -n" ended this stage before any test ran, issue 49); -m cuda
  # is all of them this stage wants
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$PY" -m pytest -o addopts= -m cuda tests/gpu/test_cuda.py \
    tests/gpu/test_backends.py tests/gpu/test_fusion.py -q -rs -p no:cacheprovider \
    --confcutdir=tests/gpu -W ignore::pytest.PytestConfigWarning | tee "$LOGS/pytest.out"
  local rc=$?
  grep -E '^(SKIPPED|FAILED|ERROR)|passed|failed|skipped|error' "$LOGS/pytest.out" \
    | tail -n 20 >"$STAGE_ROWS"
  return "$rc"
}

bench_stage() {
  local rc=0 size=both episodes=50
  [ "$QUICK" = 1 ] && size=small episodes=20
  [ "$DRY" = 1 ] && size=small episodes=3
  "$PY" benchmarks/bench_replay.py --device "$DEV" --size "$size" --dtype both \
    --repeat "$REPEAT" | tee "$STAGE_ROWS" || rc=$?
  echo | tee -a "$STAGE_ROWS"
  "$PY" benchmarks/bench_fusion.py --device "$DEV" --episodes "$episodes" \
    | tee -a "$STAGE_ROWS" || rc=$?
  return "$rc"
}

export -f tapescope env_stage nvrtc_stage parity_case inject_case torch_stage pytest_stage \
  bench_stage

# ---- the run -----------------------------------------------------------------------------------
{
  echo
  echo "## device check: $MODE$([ $QUICK = 1 ] && echo ", --quick")"
  echo
  echo "- started $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), commit" \
       "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)," \
       "\`bash benchmarks/device_check.sh $ARGS\`"
  echo "- budget ${BUDGET} s; python $PY; stage logs in \`device_check_logs/\`"
} >>"$REPORT"
echo "device check: $MODE, $PY, budget ${BUDGET}s; report: $REPORT"

stage env "env" 30 0 env_stage
stage nvrtc "nvrtc compile + audit" 180 0 nvrtc_stage
if [ $QUICK = 1 ]; then
  CASES=("mlp float64 refmath -" "mlp float32 refmath --fuse"
         "transformer float64 refmath --fuse" "transformer float32 refmath -"
         "transformer float32 platform --fuse")
else
  CASES=()
  for math in refmath platform; do
    for wl in mlp transformer; do
      for dt in float64 float32; do
        for fuse in - --fuse; do CASES+=("$wl $dt $math $fuse"); done
      done
    done
  done
fi
for c in "${CASES[@]}"; do
  read -r wl dt math fuse <<<"$c"
  [ "$fuse" = - ] && fuse=""
  ok=0; [ "$math" = platform ] && ok=0,1
  stage parity "parity $wl $dt $math ${fuse:-unfused}" 40 "$ok" \
    parity_case --workload "$wl" --dtype "$dt" --math "$math" $fuse
done
stage provenance "provenance transformer float64 --inject 44@2" 40 0 \
  inject_case transformer 44@2 float64
[ $QUICK = 1 ] || stage provenance "provenance transformer float32 --inject 44:grad@2" 40 0 \
  inject_case transformer 44:grad@2 float32
stage torch "torch candidate (--device torch:$([ $DRY = 1 ] && echo cpu || echo cuda))" 90 0 \
  torch_stage "torch:$([ $DRY = 1 ] && echo cpu || echo cuda)"
[ $QUICK = 1 ] || stage pytest "pytest -m cuda" 120 0 pytest_stage
stage bench "benchmark (bench_replay.py, bench_fusion.py)" 180 0 bench_stage
i=0
for cmd in "${EXTRAS[@]}"; do
  i=$((i + 1))
  stage extra "extra $i: ${cmd:0:50}" 120 0 bash -o pipefail -c "$cmd"
done

{
  echo
  echo "### summary: $([ $status = 0 ] && echo "every stage passed" || echo "NOT all passed")" \
       "($((SECONDS - T0)) s of ${BUDGET} s)"
  echo
  echo "| stage | result | exit | s | limit s |"
  echo "|---|---|---|---|---|"
  for r in "${SUMMARY[@]}"; do echo "$r"; done
} >>"$REPORT"
echo
echo "device check summary ($MODE): $([ $status = 0 ] && echo "every stage passed" \
  || echo "NOT all passed"), $((SECONDS - T0)) s of ${BUDGET} s; report: $REPORT"
for r in "${SUMMARY[@]}"; do echo "$r"; done
exit $status
