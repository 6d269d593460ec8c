#!/usr/bin/env bash
# The first thing any GPU session runs (issue 34): the figures every GPU question needs, in
# under 8 minutes, into at most 8 files of OUTDIR, most important first, each written as its
# step runs (a step cut by the time budget keeps what it printed):
#   1-default-job.txt          the device, versions, and `jaxsel compare` (the default job): table and time
#   2-packing-sweep.txt        8 packed ResNet-18 replicas, every loop, against one replica at 8x the batch
#   3-bench-cnn-fp32.txt       `jaxsel bench` CNN fp32 (step overheads, kernel counts)
#   4-bench-resnet18-bf16.txt  `jaxsel bench` ResNet-18 bf16, batch 256 (no --hlo: it compiles every step twice)
#   5-resnet18-vs-pytorch.txt  plain JAX, jaxsel BSP and PyTorch (max-autotune + CUDA graphs, default)
#   5-resnet18-vs-pytorch.json the same rows as JSON
#   6-xla-ab.txt               XLA GPU options A/B on the CNN step (command buffers): gets what is left of
#                              the budget, often nothing; `experiments/xla_ab.py` alone takes about 2 minutes
#   8-session-log.txt          each step's time, and the wheel install
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

left() { echo $((budget - ($(date +%s) - start))); }

# run FILE CAP CMD...: CMD for at most CAP seconds (less if the budget is nearly spent), its
# output appended to OUTDIR/FILE as it comes, its exit status and time at the end
run() {
    local file=$1 cap=$2 limit began status
    shift 2
    limit=$(left)
    [ "$smoke" != 1 ] && [ "$limit" -gt "$cap" ] && limit=$cap   # a smoke run: the budget alone
    if [ "$limit" -lt 20 ]; then
        echo "skipped, the session's ${budget} s are spent: $*" >>"$out/$file"
        echo "$(date +%T) $file skipped" >>"$log"
        return 0
    fi
    began=$(date +%s)
    echo "\$ $*   # at most ${limit} s" >>"$out/$file"
    timeout -k 10 "$limit" "$@" >>"$out/$file" 2>&1
    status=$?
    echo "exit ${status} after $(($(date +%s) - began)) s" >>"$out/$file"
    echo "$(date +%T) $file exit ${status} after $(($(date +%s) - began)) s" >>"$log"
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

if [ "$smoke" = 1 ]; then
    export JAXSEL_PACKING_MEASURE=1   # "auto" measures on the CPU as it does on a GPU
    compare=(--steps 20 --seeds 1 --eval-every 10 --devices 1)
    sweep=(--models mlp --ks 2 --batches 2 --repeats 2 --warmup 1)
    cnn=(--size tiny)
    resnet=(--size tiny)
    versus=(--tiny)
    ab=(--tiny --sets baseline,no-graphs)
else
    compare=()
    sweep=(--models resnet18 --ks 8 --batches 128,32 --repeats 20 --warmup 3)
    cnn=(--repeats 200)
    resnet=(--batch 256 --repeats 30 --dispatch-steps 60)
    versus=()
    ab=(--sets baseline,graphs+cond,no-graphs,baseline --repeats 100)
fi

run 1-default-job.txt 100 "$py" -m jaxsel.cli compare --out "$work/compare" "${compare[@]}"
grep -h '"layout"' "$work"/compare/*/seed0/environment.json 2>/dev/null | sort -u >>"$out/1-default-job.txt"
run 2-packing-sweep.txt 130 "$py" experiments/packing_bench.py --gpu-sweep "${sweep[@]}"
run 3-bench-cnn-fp32.txt 50 "$py" -m jaxsel.cli bench --model cnn --dtype fp32 --hlo "${cnn[@]}"
run 4-bench-resnet18-bf16.txt 90 "$py" -m jaxsel.cli bench --model resnet18 --dtype bf16 --packed 0 "${resnet[@]}"
run 5-resnet18-vs-pytorch.txt 150 "$py" experiments/gpu_throughput.py --models resnet18 \
    --json "$out/5-resnet18-vs-pytorch.json" "${versus[@]}"
run 6-xla-ab.txt 150 "$py" experiments/xla_ab.py --model cnn "${ab[@]}"
echo "$(date +%T) done in $(($(date +%s) - start)) s" >>"$log"
rm -rf "$work"
