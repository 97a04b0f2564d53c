#!/usr/bin/env bash
# The GPU check of issues 26 and 39 in one script: environment, the CUDA suite, the benchmark (workloads 1, 2,
# 4, 3, BlazeFL in the same run; workload 1 also with tf32, bf16, CUDA graphs, batched_conv = "gemm" and "grouped") and the
# issue's targets, met or missed; then the diagnostics: workload 1's convolutions op by op in
# every form and setting (conv_kernels.py), profiles of workload 1's round (with CUDA graphs, eager), workload 2's
# start-up phase by phase, one chunk of workload 1's clients with batched_conv = "grouped", "gemm", "nhwc" and "loop"
# (conv_layouts.py), profiles of workload 2's round and of workload 1's with "gemm", and the vmapped step eager
# against torch.compile (compile_step.py).
#
#   bash benchmarks/gpu-check.sh OUTDIR [--setup|--no-setup] [--smoke] [--budget SECONDS] [--only STEP,STEP...]
#
# Run from anywhere; it works in the checkout that holds it. Every step has its own timeout and the whole
# script a budget (default 540 s, inside one 600 s device call): a step gets at most what is left, a step with
# under 20 s left is skipped, and a failing step never stops the ones after it. The default budget holds the
# issue's targets (suite, W1-W4, table); W1's accuracy curves and the diagnostics need a second call, at once (a
# machine left idle for 30 s goes back, and its OUTDIR with it): --only w1-curves,targets-curves,conv-kernels,profile-w1-gemm
# --budget 280. Each step's output is
# tee'd into OUTDIR/<step>.log; OUTDIR/summary.txt lists every step's exit status and seconds.
#
# --setup (the default where torch sees a GPU; --no-setup turns it off): the offline GPU machine's recipe
# (/work/shared/gpu/README.md): the wheels in .whl/ (tomli-w, blazefl; or $WHL_DIR) go to /tmp/site, a
# .pth file puts /tmp/site and this checkout's src/ on the path of every python3 process (benchmark
# workers start with a clean PYTHONPATH), and benchmarks/.venv-peers/bin/python wraps python3, whose
# torch has CUDA (run.py gets --no-install).
# --smoke: the same steps, tiny and on the CPU (no setup unless --setup): checks this script and its
# commands on a machine without a GPU. Its timings mean nothing. Its budget defaults to 3600 s and every step's
# timeout is 4x the GPU one (the tiny steps still take minutes on 2 cores). Without a GPU and without --smoke the
# script exits 2 at once (every CUDA step would only fail).
# --only: just the steps named (e.g. bench-w4,bench-w3), setup still first: a second call that finishes what a
# first one's budget cut.
set -u

USAGE="usage: bash benchmarks/gpu-check.sh OUTDIR [--setup|--no-setup] [--smoke] [--budget SECONDS] [--only STEP,STEP...]"
usage() { echo "$USAGE" >&2; exit 2; }
for arg in "$@"; do  # -h/--help anywhere: the usage and this header, nothing run (--help as OUTDIR once ran the whole check)
    case $arg in -h|--help) echo "$USAGE"; sed -n '2,/^set -u$/{/^set -u$/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;; esac
done
[ $# -ge 1 ] || usage
OUT=$1; shift
case $OUT in -*) echo "gpu-check.sh: OUTDIR '$OUT' starts with '-': give the output folder first ($USAGE)" >&2; exit 2 ;; esac
SETUP=auto SMOKE=0 BUDGET= ONLY=
while [ $# -gt 0 ]; do
    case $1 in
        --setup) SETUP=1 ;;
        --no-setup) SETUP=0 ;;
        --smoke) SMOKE=1 ;;
        --budget) shift; BUDGET=${1:-}; case $BUDGET in ''|*[!0-9]*) usage ;; esac ;;
        --only) shift; ONLY=${1:-}; [ -n "$ONLY" ] || usage ;;
        *) usage ;;
    esac
    shift
done
[ -n "$BUDGET" ] || BUDGET=$([ "$SMOKE" = 1 ] && echo 3600 || echo 540)
START=$(date +%s)  # before the probe below: a cold CUDA import torch counts in the budget
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || PY=python
HAS_CUDA=$("$PY" -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)
# before anything is written (OUTDIR, --setup's .pth and wrapper): without a GPU every CUDA step would run to failure
if [ "$HAS_CUDA" != 1 ] && [ "$SMOKE" = 0 ]; then echo "gpu-check.sh: no GPU here: --smoke checks the script on the CPU" >&2; exit 2; fi
mkdir -p -- "$OUT" || exit 2
OUT=$(cd -- "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
export PYTHONUNBUFFERED=1
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

left() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME TIMEOUT_S CMD...: run CMD under `timeout`, output tee'd to OUTDIR/NAME.log, never fatal.
step() {
    local name=$1 limit=$2; shift 2
    if [ -n "$ONLY" ] && [ "$name" != setup ] && [[ ",$ONLY," != *",$name,"* ]]; then return 0; fi
    local remain; remain=$(left)
    [ "$limit" -gt $((remain - 5)) ] && limit=$((remain - 5))
    if [ "$limit" -lt 20 ]; then
        printf '%-28s skipped: %s s of the %s s budget left\n' "$name" "$remain" "$BUDGET" | tee -a "$SUMMARY"
        return 0
    fi
    echo "=== $name (timeout ${limit} s, ${remain} s of the budget left): $*" | tee "$OUT/$name.log"
    local t0 rc; t0=$(date +%s)
    if declare -F "$1" >/dev/null; then set -- bash -c "$1"; fi  # a function of this script (exported below)
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    local verdict="exit $rc"; [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && verdict="TIMED OUT after ${limit} s (exit $rc)"
    printf '%-28s %-34s %4s s\n' "$name" "$verdict" "$(( $(date +%s) - t0 ))" | tee -a "$SUMMARY"
    return 0
}

[ "$SETUP" = auto ] && SETUP=$([ "$HAS_CUDA" = 1 ] && [ "$SMOKE" = 0 ] && echo 1 || echo 0)
DEVICE=cuda; [ "$SMOKE" = 1 ] && DEVICE=cpu

setup() {
    local whl=${WHL_DIR:-$ROOT/.whl}
    ls "$whl"/*.whl >/dev/null 2>&1 || { echo "no wheels in $whl: BlazeFL will be reported as not available"; }
    if ls "$whl"/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --ignore-requires-python --target /tmp/site "$whl"/*.whl || echo "pip install of the wheels failed"
    fi
    local sp; sp=$("$PY" -c "import site; print(site.getsitepackages()[0])") || return 1
    printf '/tmp/site\n%s\n' "$ROOT/src" > "$sp/zz-chillfl.pth" || return 1
    # bytecode now, as `pip install` writes it: on a fresh machine the first import of chillfl compiles ~300 modules,
    # which start-up timings would count (chillfl's import took 0.54 s on the H200, 2026-12-04, 0.12 s on a CPU)
    "$PY" -m compileall -q "$ROOT/src/chillfl" > /dev/null || echo "compileall of src/chillfl failed"
    mkdir -p benchmarks/.venv-peers/bin
    printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$PY")" > benchmarks/.venv-peers/bin/python
    chmod +x benchmarks/.venv-peers/bin/python
    "$PY" -c "import chillfl, sys; print('chillfl from', chillfl.__file__)"
    # chillfl's package import loads no tomli-w, but every run does (chillfl.runner): without it each step below would fail
    "$PY" -c "import tomli_w" 2>/dev/null \
        || echo "WARNING: tomli-w is not importable: every chillfl step below will fail; put its wheel in $whl (benchmarks/README.md, the GPU check)"
    benchmarks/.venv-peers/bin/python -c "import blazefl, torch; print('blazefl', getattr(blazefl, '__version__', '?'), 'torch', torch.__version__, 'cuda', torch.cuda.is_available())" \
        || echo "blazefl not importable: BlazeFL modes will be reported as not available"
}

environment() {
    date -u
    git -C "$ROOT" log -1 --oneline 2>/dev/null
    nvidia-smi 2>&1 | head -25 || echo "nvidia-smi: not available"
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv 2>&1 || true
    "$PY" - <<'EOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.1f} GiB", "SMs", p.multi_processor_count, "capability", f"{p.major}.{p.minor}")
    print("defaults: matmul.allow_tf32", torch.backends.cuda.matmul.allow_tf32, "cudnn.allow_tf32", torch.backends.cudnn.allow_tf32)
try:
    import chillfl
    print("chillfl", chillfl.__file__)
except ImportError as exc:
    print("chillfl not importable:", exc)
EOF
}

# The CUDA suite in 11 parallel shards (one GPU, 16 cores): the registry's cases are most of its time (on the
# H200 on 2026-11-30, in 8 shards, the vectorized "algorithm-fed" shard took 138 s, the others 28-91 s). The CNN
# methods under the nhwc and loop convolutions (8 runs) have a shard of their own.
cuda_suite() {
    local env=()
    [ "$SMOKE" = 1 ] && env=(env CHILLFL_CUDA_SUITE_DEVICE=cpu)
    local shards=("not every_method and not every_cnn_method" "every_cnn_method"
                  "every_method and algorithm-fed and sequential"
                  "every_method and algorithm-fed and vectorized and fp32" "every_method and algorithm-fed and vectorized and not fp32"
                  "every_method and algorithm and not algorithm-fed and sequential"
                  "every_method and algorithm and not algorithm-fed and vectorized and fp32"
                  "every_method and algorithm and not algorithm-fed and vectorized and not fp32"
                  "every_method and distillation and sequential" "every_method and distillation and vectorized"
                  "every_method and not algorithm and not distillation")
    [ "$SMOKE" = 1 ] && shards=("not every_method" "every_method and fedavg" "every_method and scarlet")
    local pids=() i=0
    # timeout's SIGTERM would not end a shard whose chillfl run turns it into RunInterrupted: that shard went on
    # after the step's end and shared the GPU with the benchmark (H200, 2026-11-30); the shards die with the step
    trap 'kill -KILL "${pids[@]}" 2>/dev/null; exit 124' TERM
    for k in "${shards[@]}"; do
        ${env[@]+"${env[@]}"} "$PY" -m pytest tests/test_cuda.py -rs -q -p no:cacheprovider -k "$k" > "$OUT/cuda-suite-shard$i.log" 2>&1 &
        pids+=($!); i=$((i + 1))
    done
    local rc=0 j=0
    for pid in "${pids[@]}"; do
        wait "$pid" || rc=1
        echo "--- shard $j: -k \"${shards[$j]}\""; tail -n 40 "$OUT/cuda-suite-shard$j.log"; j=$((j + 1))
    done
    return $rc
}

# GPU peaks (dense, no sparsity) for "% of peak": fp32 (CUDA cores), TF32 and bf16 (tensor cores), in GFLOP/s.
PEAKS=()
if [ "$HAS_CUDA" = 1 ] && [ "$SMOKE" = 0 ]; then
    GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    case $GPU in
        *H100*PCIe*) PEAKS=(--peak-gflops 51200 --peak-gflops-tf32 378000 --peak-gflops-bf16 756000) ;;
        *H100*|*H200*) PEAKS=(--peak-gflops 67000 --peak-gflops-tf32 494700 --peak-gflops-bf16 989400) ;;
        *A100*) PEAKS=(--peak-gflops 19500 --peak-gflops-tf32 156000 --peak-gflops-bf16 312000) ;;
    esac
fi

# --timeout: seconds per measured process, so that a workload's step ends with its JSON written even when one run hangs.
BENCH=("$PY" benchmarks/run.py --device "$DEVICE" --repeats 1 ${PEAKS[@]+"${PEAKS[@]}"})
if [ "$SMOKE" = 1 ]; then
    BENCH+=(--no-peers)
    W1=(--workload 1 --scale 0.02 --rounds 1 --no-bound --ops-modes "chillfl[auto]" --modes "chillfl[auto],chillfl[sequential]" --timeout 200)
    W2=(--workload 2 --rounds 1 --no-bound --no-ops --modes "chillfl[auto],chillfl[auto+compile]" --timeout 200)
    W3=(--workload 3 --rounds 1 --modes "chillfl[auto]" --timeout 200)
    W4=(--workload 4 --rounds 1 --modes "chillfl[auto]" --timeout 200)
    PROFILE=(--workload 1 --scale 0.02 --device cpu)
    EAGER=()
    LAYOUTS=(--device cpu --clients 2 --samples 50 --repeats 1)
    KERNELS=(--device cpu --clients 2 --batch 4 --repeats 1)
    COMPILE=(--device cpu --clients 2 --steps 4)
    CURVES=(--device cpu --scale 0.01 --seeds 2 --rounds 1 --test-size 100 --variants "sequential")
else
    BENCH+=(--no-install)
    # Modes run in the order listed (run.py), most telling first, so that a step that runs out of time (its JSON
    # keeps what was measured) loses the least: graphed fp32 and bf16, BlazeFL, the GEMM convolutions, then the rest.
    # The fp32 target is fp32/tf32: W1 also with tf32 tensor cores, graphed; `+gemm` (batched_conv = "gemm": the
    # windows gathered, one batched GEMM a layer for all clients) in fp32, bf16 and tf32; bf16 and tf32 run the
    # default `auto`, which graphed on CUDA is `nhwc` there (the grouped convolutions channels-last, measured fastest
    # on 2026-12-04), and `+bf16+grouped` keeps the grouped NCHW twin; `auto` and `auto+bf16` are the eager twins
    # (grouped: `auto` picks nhwc only with graphs). Only W3's target reads the compute bound,
    # and only W1's the launch counts (graphed: the eager count took over 35 s on 2026-12-04 and was cut): the rest
    # skip them. Left to the diagnostics since 2026-12-04, measured then on the H200: `+loop` (1.43 s a round in
    # bf16, 4.32 s in tf32), `+nondet` (0.808 s against 0.809 s deterministic) and W2's `compile` (0.025 s against
    # 0.021 s graphed); BlazeFL `threads` on W4 (serial was its best on W2).
    W1=(--workload 1 --rounds 2 --no-bound --ops-modes "chillfl[auto+graphs],chillfl[auto+gemm+graphs]" --timeout 35
        --modes "chillfl[auto+graphs],chillfl[auto+bf16+graphs],blazefl[threads],chillfl[auto+gemm+graphs],chillfl[auto+bf16+gemm+graphs],chillfl[auto+bf16+grouped+graphs],chillfl[auto+tf32+graphs],chillfl[auto+tf32+gemm+graphs],chillfl[auto],chillfl[auto+bf16]")
    W2=(--workload 2 --rounds 3 --no-bound --no-ops --modes "chillfl[auto],chillfl[auto+graphs],blazefl[serial],blazefl[threads]" --timeout 40)
    W3=(--workload 3 --rounds 3 --no-ops --modes "chillfl[auto],chillfl[auto+bf16]" --timeout 25)
    W4=(--workload 4 --rounds 3 --no-bound --no-ops --modes "chillfl[auto],chillfl[auto+graphs],blazefl[serial]" --timeout 20)
    PROFILE=(--workload 1 --scale 1.0 --device cuda)
    EAGER=(--scale 0.25)
    LAYOUTS=(--device cuda --clients 50 --samples 500)
    KERNELS=(--device cuda --clients 100 --batch 50)
    COMPILE=(--device cuda --clients 50 --steps 30)
    # the issue's accuracy condition: W1's test-accuracy curve in the fast modes against fp32 `auto`, 3 seeds x 8 rounds
    # on learnable CIFAR-shaped data (w1_curves.py; ~30 s a mode at 0.8 s a round, untimed so far)
    CURVES=(--device cuda --seeds 3 --rounds 8 --variants "auto+bf16+graphs,auto+bf16+gemm+graphs,auto+tf32+graphs,auto+gemm+graphs")
fi

export ROOT OUT PY SMOKE
export -f setup environment cuda_suite
echo "gpu-check: $ROOT -> $OUT (device $DEVICE, setup $SETUP, budget $BUDGET s)" | tee -a "$SUMMARY"
TARGETS=("$PY" benchmarks/gpu_targets.py); [ "$SMOKE" = 1 ] && TARGETS+=(--any-device)  # the smoke run's reports are CPU ones
SLOW=1; [ "$SMOKE" = 1 ] && SLOW=4  # the CPU smoke run's tiny steps still take minutes on 2 cores
[ "$SETUP" = 1 ] && step setup 30 setup
step environment 30 environment
step cuda-suite $((150 * SLOW)) cuda_suite
# The issue's targets first (W1, W2, W4, W3 and the table), the diagnostic profiles after: a budget that runs out
# then cuts a profile, not a target.
step bench-w1 $((180 * SLOW)) "${BENCH[@]}" "${W1[@]}" --out "$OUT/bench-w1.json"
step bench-w2 $((120 * SLOW)) "${BENCH[@]}" "${W2[@]}" --out "$OUT/bench-w2.json"
step bench-w4 $((75 * SLOW)) "${BENCH[@]}" "${W4[@]}" --out "$OUT/bench-w4.json"
step bench-w3 $((50 * SLOW)) "${BENCH[@]}" "${W3[@]}" --out "$OUT/bench-w3.json"
# shellcheck disable=SC2046
step targets 20 "${TARGETS[@]}" $(ls "$OUT"/bench-w*.json 2>/dev/null)
# W1's accuracy curves (the issue's condition on its bf16 and other fast modes), then the table again with them
step w1-curves $((170 * SLOW)) "$PY" benchmarks/w1_curves.py "${CURVES[@]}" --out "$OUT"
# shellcheck disable=SC2046
step targets-curves 20 "${TARGETS[@]}" $(ls "$OUT"/bench-w*.json "$OUT"/curves-w1.json 2>/dev/null)
# where workload 1's 20 ms a vmapped step go: its convolutions op by op, grouped (today) / per client / on streams /
# as GEMMs, fp32 and bf16, NCHW and channels-last, deterministic or not, with each one's kernel count
step conv-kernels $((60 * SLOW)) "$PY" benchmarks/conv_kernels.py "${KERNELS[@]}" --out "$OUT"
# cuda_graphs: one graph launch a replayed step instead of its ~1,500 kernels (chillfl.executors.step_graphs)
step profile-w1-graphs $((45 * SLOW)) "$PY" benchmarks/profile_round.py "${PROFILE[@]}" --variant auto+graphs --out "$OUT"
step startup-w2 $((40 * SLOW)) "$PY" benchmarks/profile_startup.py --workload 2 --device "$DEVICE" --out "$OUT"
# the eager round at a quarter of the clients (the same kernels per client): the whole round's 75,647 launches kept
# the profiler busy past 42 s on the H200 (2026-11-30)
step profile-w1 $((60 * SLOW)) "$PY" benchmarks/profile_round.py "${PROFILE[@]}" ${EAGER[@]+"${EAGER[@]}"} --out "$OUT"
step conv-layouts $((45 * SLOW)) "$PY" benchmarks/conv_layouts.py "${LAYOUTS[@]}" --out "$OUT"
# workload 2's round (0.11 s on the H200, median twice its min; 5 vmapped steps of 100 clients): kernels or host?
step profile-w2 $((40 * SLOW)) "$PY" benchmarks/profile_round.py --workload 2 --rounds 2 --device "$DEVICE" --out "$OUT"
# batched_conv = "gemm": does one batched GEMM a layer take the round off cuDNN's per-client grouped kernels? (chillfl.training.conv_gemm)
step profile-w1-gemm $((45 * SLOW)) "$PY" benchmarks/profile_round.py "${PROFILE[@]}" --variant auto+gemm --out "$OUT"
# torch.compile of the vmapped step alone, eager against compiled (the option `compile = true`: run.py's `+compile` modes)
step compile-step $((90 * SLOW)) "$PY" benchmarks/compile_step.py "${COMPILE[@]}" --out "$OUT"
echo "total $(( $(date +%s) - START )) s" | tee -a "$SUMMARY"
