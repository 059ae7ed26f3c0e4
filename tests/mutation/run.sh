#!/usr/bin/env bash
# A mutation run (docs/testing.md, "Mutation testing"): slow, never part of the default suite.
#
#   pip install -e '.[mutation]'               # mutmut 3.8
#   tests/mutation/run.sh core/cache.py         # one module, against its own tests
#   tests/mutation/run.sh all                   # every module in [tool.tapescope.mutation]
#
# Each module runs in a scratch copy of the working tree (tracked and untracked files, what git
# does not ignore) under $MUTATION_DIR (default /tmp/tapescope-mutation/<module>), so nobody's
# tree, and no kernel cache of the real source, is touched: the copy gets its own
# TAPESCOPE_CACHE_DIR (a mutant of core/cache.py may break the cache it runs on). The copy's
# [tool.mutmut] is narrowed to the module and its tests from [tool.tapescope.mutation]
# (pyproject.toml); mutmut then runs, per mutant, only the tests that reach the mutated function.
# MUTATION_JOBS (default 1) is mutmut's --max-children; MUTATION_SAMPLE=k runs every k-th
# mutant only, MUTATION_ONLY=REGEX those whose names match (e.g. 'ǁ_tagged'). Output: <dir>/results.txt (every mutant
# that is not killed, with `mutmut show NAME` for its diff) and <dir>/stats.json (the counts).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
if [ $# -ne 1 ]; then
    echo "usage: tests/mutation/run.sh MODULE.py | all" >&2
    exit 2
fi
modules=$(python - "$1" <<'PY'
import sys, tomllib
table = tomllib.load(open("pyproject.toml", "rb"))["tool"]["tapescope"]["mutation"]
want = sys.argv[1]
if want != "all" and want not in table:
    sys.exit(f"tests/mutation/run.sh: {want}: not a module of [tool.tapescope.mutation] "
             f"({', '.join(table)})")
print("\n".join(table if want == "all" else [want]))
PY
)
python -c "import mutmut" 2>/dev/null || { echo "tests/mutation/run.sh: mutmut is not installed (pip install -e '.[mutation]')" >&2; exit 2; }
for module in $modules; do
    name=$(basename "$module" .py)
    dir=${MUTATION_DIR:-/tmp/tapescope-mutation}/$name
    rm -rf "$dir" && mkdir -p "$dir"
    git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$dir"
    (
        cd "$dir"
        python - "$module" <<'PY'
import re, sys, tomllib
module = sys.argv[1]
text = open("pyproject.toml").read()
conf = tomllib.loads(text)["tool"]
mm, tests = conf["mutmut"], conf["tapescope"]["mutation"][module]
mm["only_mutate"], mm["pytest_add_cli_args_test_selection"] = [module], tests
if "-m" in tests:  # each mutant's run names its tests with pytest_add_cli_args only: without the
    i = tests.index("-m")  # selection's marker filter there, addopts' "not slow" drops the slow ones
    mm["pytest_add_cli_args"] = mm["pytest_add_cli_args"] + tests[i:i + 2]
# mutmut reads [tool.mutmut] from pyproject.toml, else setup.cfg: move the narrowed one there
text = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", "", text)
open("pyproject.toml", "w").write(text)
with open("setup.cfg", "w") as f:
    f.write("[mutmut]\n")
    for k, v in mm.items():
        f.write(f"{k}=\n" + "".join(f"    {x}\n" for x in v) if isinstance(v, list)
                else f"{k}={v}\n")
PY
        export TAPESCOPE_CACHE_DIR="$dir/.kernel-cache" QT_QPA_PLATFORM=offscreen
        start=$(date +%s)
        jobs=${MUTATION_JOBS:-1} sample=${MUTATION_SAMPLE:-1}
        if [ "$sample" -gt 1 ] || [ -n "${MUTATION_ONLY:-}" ]; then
            # generate the mutants and the test map without running any, then run a subset:
            # those matching MUTATION_ONLY (a glob of mutant names), every MUTATION_SAMPLE-th
            python -m mutmut run --max-children "$jobs" "no-such-mutant" > run.log 2>&1 || true
            names=$(python -m mutmut results --all true 2>/dev/null | tr -d ':' | awk '{print $1}' \
                    | grep -E "${MUTATION_ONLY:-.}" | awk -v k="$sample" 'NR % k == 1 || k == 1')
            # shellcheck disable=SC2086
            python -m mutmut run --max-children "$jobs" $names >> run.log 2>&1 || true
        else
            python -m mutmut run --max-children "$jobs" > run.log 2>&1 || true
        fi
        python -m mutmut results > results.txt 2>&1 || true
        python -m mutmut export-cicd-stats > /dev/null 2>&1 || true
        cp mutants/mutmut-cicd-stats.json stats.json 2>/dev/null || true
        counts=$(python -c "import json; d=json.load(open('stats.json')); print(' '.join(f'{k}={v}' for k, v in d.items() if v))" 2>/dev/null || echo "no stats: see run.log")
        echo "$module: $counts in $(( $(date +%s) - start )) s ($dir)"
    )
done
