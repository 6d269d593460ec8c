"""The states issue 25 added resume bit for bit: Accordion's gradient sum, SelSync's
local-step count under max_local, DeMo's momenta, and local SGD whose momentum is averaged
on its own period (the codecs' residuals: tests/test_codecs_ef.py)."""
import dataclasses

import pytest

CASES = {
    "accordion": ("accordion", {"interval": 3, "low": 2, "high": 4}),
    "selsync-max-local": ("selsync", {"window": 1, "delta": 1e9, "max_local": 2}),
    "demo": ("demo", {"lr": 0.01, "chunk": 8, "topk": 4}),
    "localsgd-opt-state-period": ("localsgd", {"period": 2, "opt_state_period": 3}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.slow
def test_interrupted_run_resumes_bit_for_bit(tmp_path, case):
    from run_hooks import signal_at, trees_equal
    from jaxsel.training.faults import TrainingInterrupted
    from jaxsel.training.train import TrainConfig, plan_run, train

    name, options = CASES[case]

    def config(where):
        return TrainConfig(strategy=name, strategy_options=options, steps=8, batch_size=8, log_every=2,
                           eval_every=8, checkpoint_every=2, keep=2, progress=False, seed=3,
                           checkpoint_dir=str(where / "ckpt"), out_dir=str(where / "out"))

    full = train(config(tmp_path / "ref"))
    cfg = config(tmp_path / "cut")
    with pytest.raises(TrainingInterrupted):
        train(signal_at(plan_run(cfg), 5))
    done = train(dataclasses.replace(cfg, resume=True))
    assert 0 < done.final["resumed_from_step"] < 8
    for field in ("params", "opt_state", "strategy_state"):
        assert trees_equal(getattr(done.state, field), getattr(full.state, field)), field
