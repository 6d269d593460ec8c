#!/usr/bin/env bash
# The first thing any GPU session runs (issues 34, 45): the figures every GPU question needs, in
# under 8 minutes, into at most 8 files of OUTDIR, most important first, each written as its
# step runs (a step cut by the time budget keeps what it printed). Each step file's first
# line says how the step ended: "OK", "CAPPED" (stopped at its cap: what follows is partial),
# "FAILED" or "SKIPPED".
#   1-default-job.txt          the device, versions, and `jaxsel compare` (the default job): table and time
#   2-packing-sweep.txt        8 packed ResNet-18 replicas (unroll, map) against one replica at 8x the
#                              batch, batch 32 then 128 per replica (vmap and matmul: issue 34's session)
#   3-bench-cnn-fp32.txt       `jaxsel bench` CNN fp32 (step overheads, kernel counts, the user-loop variant)
#   4-bench-resnet18-bf16.txt  `jaxsel bench` ResNet-18 bf16, batch 256 (no --hlo: it compiles every step
#                              twice), then BSP and the user loop again on the unroll loop (a smoke
#                              run: the same commands on the CNN)
#   5-resnet18-vs-pytorch.txt  plain JAX, jaxsel BSP and PyTorch (max-autotune, convolutions left to
#                              cuDNN, CUDA graphs), beside the unbounded anchor an earlier session measured
#   5-resnet18-vs-pytorch.json the same rows as JSON
#   6-xla-ab.txt               XLA GPU options A/B on the CNN step (command buffers): 4 sets, one process each
#   8-session-log.txt          each step's time, and the wheel install
#
# Every step shares one persistent XLA compilation cache ($work/jax-cache, or the caller's
# JAX_COMPILATION_CACHE_DIR): a program compiled twice (bench --hlo's second compile, the A/B's
# baseline set run first and last) compiles once. The suite's smoke run hands it the suite's
# kept cache, so a developer's second run loads what the first compiled (tests/test_gpu_session.py).
#
#   experiments/gpu_session.sh OUTDIR                        # on the GPU host, from anywhere
#   JAXSEL_SESSION_SMOKE=1 experiments/gpu_session.sh OUTDIR # a CPU dry run at toy sizes
#
# Wheels: a host without tensorflow-datasets / array-record / mnist1d gets them from .whl/*.whl
# (experiments/README.md: how to fetch them and carry them), installed offline into a folder
# on PYTHONPATH. PYTHON (default python3) is the interpreter; JAXSEL_SESSION_BUDGET (default
# 465 s) the time every step shares (each step has a cap too, except in a smoke run).
set -u -o pipefail
out=${1:?usage: experiments/gpu_session.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$root" || exit 2
py=${PYTHON:-python3}
smoke=${JAXSEL_SESSION_SMOKE:-0}
budget=${JAXSEL_SESSION_BUDGET:-465}
start=$(date +%s)
work=$(mktemp -d /tmp/jaxsel-session.XXXXXX)
log=$out/8-session-log.txt
export PYTHONUNBUFFERED=1
export JAXSEL_CACHE_DIR=$work/cache   # auto's measurements: this session's own
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$work/jax-cache}
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0}

left() { echo $((budget - ($(date +%s) - start))); }

# first FILE LINE: LINE becomes FILE's first line (how its step ended)
first() {
    { echo "$2"; if [ -f "$1" ]; then cat "$1"; fi; } >"$1.new"
    mv "$1.new" "$1"
}

# run FILE CAP CMD...: CMD for at most CAP seconds (less if the budget is nearly spent), its
# output appended to OUTDIR/FILE as it comes, its exit status and time at the end, and how it
# ended as the file's first line
run() {
    local file=$1 cap=$2 limit began status took
    shift 2
    limit=$(left)
    [ "$smoke" != 1 ] && [ "$limit" -gt "$cap" ] && limit=$cap   # a smoke run: the budget alone
    if [ "$limit" -lt 20 ]; then
        first "$out/$file" "SKIPPED: the session's ${budget} s were spent before this step: $*"
        echo "$(date +%T) $file skipped" >>"$log"
        return 0
    fi
    began=$(date +%s)
    echo "\$ $*   # at most ${limit} s" >>"$out/$file"
    timeout -k 10 "$limit" "$@" >>"$out/$file" 2>&1
    status=$?
    took=$(($(date +%s) - began))
    echo "exit ${status} after ${took} s" >>"$out/$file"
    case $status in
        0) first "$out/$file" "OK: exit 0 after ${took} s" ;;
        124|137) first "$out/$file" "CAPPED: stopped at its ${limit} s limit after ${took} s (exit ${status}); what follows is what it printed before" ;;
        *) first "$out/$file" "FAILED: exit ${status} after ${took} s" ;;
    esac
    echo "$(date +%T) $file exit ${status} after ${took} s" >>"$log"
}

echo "$(date -u +%FT%TZ) gpu_session.sh smoke=${smoke} budget=${budget}s git $(git rev-parse --short HEAD 2>/dev/null)" >"$log"
if compgen -G ".whl/*.whl" >/dev/null; then
    if "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$work/site" \
        .whl/*.whl >>"$log" 2>&1; then
        export PYTHONPATH=$root:$work/site${PYTHONPATH:+:$PYTHONPATH}
        echo "installed $(ls .whl/*.whl | wc -l) wheels from .whl into $work/site" >>"$log"
    else
        echo "the wheels of .whl did not install (above); going on without them" >>"$log"
        export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}
    fi
else
    export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}
fi

{
    nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
    "$py" - <<'EOF'
import importlib.metadata as md, platform
names = ("jax", "jaxlib", "jax-cuda13-plugin", "flax", "optax", "orbax-checkpoint", "torch", "tensorflow-datasets",
         "array-record", "mnist1d", "protobuf", "numpy")
def version(n):
    try:
        return md.version(n)
    except md.PackageNotFoundError:
        return "-"
print("python", platform.python_version(), " ".join(f"{n}={version(n)}" for n in names))
import jax
print("devices:", jax.devices())
EOF
    uptime
} >"$out/1-default-job.txt" 2>&1

# ResNet-18's variants (issue 45's questions: jaxsel's step against a user's loop with
# as_optax, the grad-norm metric's price, SelSync's local step against BSP's and a plain one)
resnet_variants=bsp,user_bsp,bsp_norm,selsync_local,local,user_selsync,minimal
if [ "$smoke" = 1 ]; then
    export JAXSEL_PACKING_MEASURE=1   # "auto" measures on the CPU as it does on a GPU
    compare=(--steps 20 --seeds 1 --eval-every 10 --devices 1)
    sweep=(--models mlp --ks 2 --batches 2 --repeats 2 --warmup 1)
    # one replica, as on the one-GPU host (the CPU has 8 devices), and a packed row of 2: the
    # CPU compiles 8 unrolled replicas for most of a minute
    cnn=(--size tiny --replicas 1 --packed-replicas 2)
    # step 4's commands on the CNN and three of its variants: ResNet-18 (11 M parameters)
    # took 106 of a smoke run's 249 s on the CPU; the model is tested by
    # tests/test_models_zoo.py and every variant by tests/test_bench.py
    resnet_model=cnn resnet_variants=bsp,user_bsp,selsync_local
    resnet=(--size tiny --replicas 1)
    versus=(--tiny)
    ab=(--tiny --sets baseline,no-graphs --replicas 1)
else
    compare=()
    # both batches, the two loops issue 34's session found fastest (vmap and matmul ran at
    # under 0.4 of one replica at batch 128; all four took its whole 130 s at one batch)
    sweep=(--models resnet18 --ks 8 --batches 32,128 --loops unroll,map --repeats 10 --warmup 2)
    cnn=(--repeats 200)
    resnet_model=resnet18
    resnet=(--batch 256 --repeats 30 --dispatch-steps 60)
    versus=(--torch-modes max-autotune-bounded --steps 30 --repeats 3)
    ab=(--sets baseline,graphs+cond,no-graphs,baseline --repeats 100)
fi

run 1-default-job.txt 75 "$py" -m jaxsel.cli compare --out "$work/compare" "${compare[@]}"
grep -h '"layout"' "$work"/compare/*/seed0/environment.json 2>/dev/null | sort -u >>"$out/1-default-job.txt"
run 2-packing-sweep.txt 125 "$py" experiments/packing_bench.py --gpu-sweep "${sweep[@]}"
run 3-bench-cnn-fp32.txt 55 "$py" -m jaxsel.cli bench --model cnn --dtype fp32 --hlo "${cnn[@]}"
# the default loop (vmap for one replica on a GPU), then BSP and the user loop on unroll: which
# formulation of one replica per device costs less on this GPU
run 4-bench-resnet18-bf16.txt 90 bash -c '"$@" --variants '"$resnet_variants"' && "$@" --variants bsp,user_bsp \
    --packing unroll --dispatch-steps 1' bench "$py" -m jaxsel.cli bench \
    --model "$resnet_model" --dtype bf16 --packed-replicas 0 "${resnet[@]}"
run 5-resnet18-vs-pytorch.txt 110 "$py" experiments/gpu_throughput.py --models resnet18 \
    --json "$out/5-resnet18-vs-pytorch.json" "${versus[@]}"
run 6-xla-ab.txt 70 "$py" experiments/xla_ab.py --model cnn "${ab[@]}"
echo "$(date +%T) done in $(($(date +%s) - start)) s" >>"$log"
rm -rf "$work"
