#!/usr/bin/env bash
# The issue-16 measurements on a lent H200 (the device tool's $OUT collects the logs and JSON).
#   bash bench/h200.sh learner tests epoch env backtest smoke stages kernels
# Per-stage limits (seconds) by env vars: LEARNER_S, TESTS_S, EPOCH_S, ENV_S, BACKTEST_S, SMOKE_S,
# STAGES_S, KERNELS_S; GPU_TESTS overrides the test files, LEARNER_ARGS adds bench/learner.py flags,
# ENV_ENVS sets bench/env.py's --envs.
# Each stage runs under its own time limit and logs to $OUT/<stage>.log; a failing stage does not
# stop the others. The last lines are a short summary (the tool returns the output's tail).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/inductor}
GPU_TESTS=${GPU_TESTS:-"tests/agent/test_graph.py tests/agent/test_replay.py tests/agent/test_learner.py
 tests/backtest/test_graphed_evaluate.py tests/backtest/test_decisions.py tests/env/test_sizing.py
 tests/agent/test_collect.py tests/env/test_graph.py"}
summary=()
stage() {  # name, limit seconds, command...
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    summary+=("$name rc=$rc $((SECONDS - t0)) s")
    echo "== $name rc=$rc $((SECONDS - t0)) s"; tail -n 25 "$OUT/$name.log"
}
for s in "$@"; do
    case $s in
        learner) stage learner ${LEARNER_S:-400} python3 bench/learner.py --iters 10 --repeats 3 ${LEARNER_ARGS:-} --out "$OUT" ;;
        tests) stage tests ${TESTS_S:-300} python3 -m pytest -m gpu $GPU_TESTS -p no:cacheprovider -q -x ;;
        epoch) stage epoch ${EPOCH_S:-400} python3 bench/epoch.py --epochs 2 --out "$OUT/epoch_h200.json" ;;
        env) stage env ${ENV_S:-200} python3 bench/env.py --envs ${ENV_ENVS:-16384,1048576} --modes compiled --out "$OUT/env.json" ;;
        backtest) stage backtest ${BACKTEST_S:-200} python3 bench/backtest.py --out "$OUT/backtest.json" ;;
        smoke) stage smoke ${SMOKE_S:-300} bash -c 'time python3 -m foxhunt.cli run --profile smoke --out /tmp/r' ;;
        smoke_gpu) stage smoke_gpu 400 bash -c 'time python3 -m foxhunt.cli run --profile gpu --out /tmp/rg' ;;
        stages) stage stages ${STAGES_S:-300} python3 bench/stages.py --profile smoke --json "$OUT/stages.json" ;;
        kernels) stage kernels ${KERNELS_S:-120} python3 bench/kernels.py --out "$OUT" ;;
        *) echo "unknown stage $s" ;;
    esac
done
printf '%s\n' "${summary[@]}"
