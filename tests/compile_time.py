"""How long XLA compiles three packed golden steps under the XLA_FLAGS in the environment:
the measure behind tests/compile_flags.py's choices. Backend compile only (tracing and
lowering excluded), no compilation cache, wall and CPU seconds (CPU seconds are what to
compare on a shared box). Run from the checkout's root, e.g.

    XLA_FLAGS="--xla_backend_optimization_level=1" python tests/compile_time.py
"""
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
sys.path.insert(0, str(Path(__file__).parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

import jaxsel  # noqa: E402
import test_golden as golden  # noqa: E402
from helpers import R, softmax_params  # noqa: E402
from jaxsel.strategies import build_strategy  # noqa: E402

CASES = ("bsp", "selsync", "hierarchical-groups4")
DEVICES = 2   # 4 replicas packed on each


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def compile_seconds(case: str) -> tuple[float, float]:
    """(wall, CPU) seconds of compiling `case`'s lowered step."""
    name, options, _ = golden.CASES[case]
    strategy = build_strategy(name, options, **golden.CONTEXT)
    mesh = jaxsel.data_mesh(replicas=R, devices=DEVICES)
    opt = optax.sgd(0.1, momentum=0.9)
    state = jaxsel.init_state(softmax_params(golden.D, golden.C), opt, strategy, mesh,
                              model_state={"mean": jnp.zeros(golden.D)})
    lowered = jaxsel.make_train_step(golden.loss_fn, opt, strategy, mesh, stateful=True).lower(
        state, golden.batches()[0])
    wall, cpu = time.perf_counter(), cpu_seconds()
    lowered.compile()
    return time.perf_counter() - wall, cpu_seconds() - cpu


def main() -> None:
    total_wall = total_cpu = 0.0
    for case in CASES:
        wall, cpu = compile_seconds(case)
        total_wall, total_cpu = total_wall + wall, total_cpu + cpu
        print(f"{case}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"total: {total_wall:.2f} s wall, {total_cpu:.2f} s CPU "
          f"(jax {jax.__version__}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r})")


if __name__ == "__main__":
    main()
