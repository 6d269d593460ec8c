"""One process of the 2-process test job (tests/test_multihost.py starts two of these).

Usage: python tests/multihost_worker.py PORT NUM_PROCESSES PROCESS_ID OUT_DIR
Trains a few strategies for a few steps (the SelSync run checkpoints), then resumes the
SelSync run; process 0 writes the final parameters to OUT_DIR as .npz files, every process
its layout line (how its packed replicas ran: the processes must agree).
"""
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import dataclasses  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from jaxsel.training import distributed  # noqa: E402

STEPS = 4


#: one of each way a strategy synchronizes: gradient mean every step, a triggered sync of the
#: pre-update parameters, periodic model averaging (weighted), the staleness ring, and a
#: sync with work of its own (DiLoCo's outer step). The rest reuse these collectives and
#: are checked on one process (tests/test_methods.py, tests/test_packing.py). And a
#: two-level one with its default groups, one per process (the reference: groups=2 on one
#: process with 4 devices).
MULTIHOST_STRATEGIES = ("bsp", "selsync", "fedavg", "ssp", "diloco", "hierarchical")


def configs(out: Path, reference: bool = False):
    """(name, TrainConfig) pairs; shared with the single-process reference in the test
    (`reference`: the one-process run of the same job)."""
    from jaxsel import TrainConfig

    base = TrainConfig(steps=STEPS, batch_size=4, log_every=2, eval_every=STEPS, progress=False,
                       seed=1, replicas=8)
    options = {"selsync": {"window": 2, "delta": 0.05}, "localsgd": {"period": 2},
               "fedavg": {"period": 2}, "diloco": {"period": 2},
               # BSP inside each group, averaging over all after step 2: the groups differ at the end
               "hierarchical": {"inner": "bsp", "outer": "localsgd", "outer.period": 3}}
    for name in MULTIHOST_STRATEGIES:
        cfg = dataclasses.replace(base, strategy=name, strategy_options=options.get(name, {}))
        if name == "hierarchical" and reference:
            cfg = dataclasses.replace(cfg, devices=4, strategy_options={**cfg.strategy_options, "groups": 2})
        if name == "selsync":
            # SelSync's run is also the checkpointed first half of the resumed run below: saving
            # (every 2 steps and at the end) does not change what it trains, so its parameters
            # are still compared with the one-process run's, and no run trains it twice (it
            # did: a "ckpt-first" run of the same settings, only saving as well).
            cfg = dataclasses.replace(cfg, checkpoint_dir=str(out / "ck"), checkpoint_every=2)
        yield name, cfg
        if name == "selsync":
            ck = cfg
    yield "ckpt-resumed", dataclasses.replace(ck, steps=STEPS + 2, resume=True)


def flat(tree) -> dict:
    import jax

    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def main(port: str, nproc: str, pid: str, out: str) -> None:
    dog = distributed.start(f"127.0.0.1:{port}", int(nproc), int(pid), peer_timeout=30)
    from jaxsel import train

    out, name = Path(out), "before the first run"
    try:
        for name, cfg in configs(out):
            result = train(cfg)
            params = distributed.to_host(result.state.params)
            (out / f"{name}.layout.{pid}").write_text(result.final["layout"])   # what each process ran
            if int(pid) == 0:
                np.savez(out / f"{name}.npz", **flat(params))
                (out / f"{name}.json").write_text(json.dumps(result.final))
    except BaseException as err:   # as `jaxsel train` leaves: the other process exits at once, naming it
        distributed.leave_after_error(dog, err, f"multihost_worker ({name})")
        raise
    dog.finish()


if __name__ == "__main__":
    main(*sys.argv[1:])
