"""Golden parameters and packed replicas: every strategy's final state, as recorded in
tests/golden/ (to a tolerance on any JAX and CPU, bit for bit where its environment is
recorded), and the same on every layout of its 8 replicas.

A refactor must not change what any strategy computes. For every registered strategy (its
default options) and the variants that take other code paths (compression, order-statistic
and sampled aggregators, gradient sync, groups, staleness, ...), a tiny stateful model runs
K steps on a fixed batch stream. Each case runs 8 replicas on 8 devices and packed 8 on 1;
the strategies' defaults and the packing variants also run on 4 and 2 devices (2 and 4
replicas per device). Three checks share these runs (each layout compiles once):
- **Packing** (the cases run on every layout). Every layout makes the same sync decisions
  and reaches the parameters, optimizer, model and strategy state of one replica per
  device (to float32 rounding: a packed device sums its replicas in another order). This
  holds on any machine. The other variants are held to their records alone: a packed bf16
  payload, for one, agrees with 8x1 only to bf16 rounding.
- **Portable record** (tests/portable_record.py), on any JAX and CPU. Each step's
  `synced` / `bytes_allreduced` / `vote_bytes` (every integer metric) and every integer leaf
  exactly; each float leaf of the final params / opt_state / model_state / strategy_state
  by its float64 sum, norms and values at fixed positions, and each float metric step by
  step, to `portable_record.RTOL` (ten times the largest difference measured between JAX
  releases and flag sets), on each layout the case runs. A new JAX or CPU is checked
  against it on its first run.
- **Exact record**, where the environment is recorded. The SHA-256 of the final params /
  opt_state / model_state / strategy_state bytes, each step's `synced` /
  `bytes_allreduced` / `vote_bytes`, and a SHA-256 of every other metric equal the recorded
  ones exactly, on each layout the case runs (a metric added later is not compared).

The fast tier checks every case's 8-device run against its records
(`test_golden_on_eight_devices`); the layout tier (`-m layouts`: the whole suite and both CI
legs run it) checks every layout and the packing (`test_golden_on_every_layout`), sharing
the case's 8-device run when both run in one process.

Each case's file holds its portable record ("portable": layout -> record) and one exact
record per environment, side by side: XLA:CPU's bytes depend on the JAX and jaxlib
versions, the architecture, the vector instruction sets and XLA_FLAGS (the suite's own
compile flags, tests/compile_flags.py, which follow the jaxlib): XLA compiles for the host
CPU, so the same code on a CPU with other vector extensions (AVX-512 against AVX2, say),
another jaxlib or other flags legitimately rounds differently. Where no exact record
matches the environment, the test runs the case, checks the packing and the portable
record, and then skips the exact check alone, saying which environments are recorded.

A case's options are what it runs, so a changed default does not change a record: when
SelSync's default became the raw statistic and its W-1 warm-up (issue 42), the cases recorded
before were pinned to what they ran (`SMOOTHED`, statistic="smoothed" with the 2W-1 warm-up;
their files' "case" says so, their records are as recorded) and new cases record the raw one.

Regenerating (`JAXSEL_REGENERATE_GOLDEN=1 python -m pytest -n 2 tests/test_golden.py`)
checks the portable record, then writes this environment's exact record of every case and
keeps the other environments' records and the portable one (it writes a portable record only
for a case that has none). To add an environment (a new JAX, another CPU), run it there on
the unchanged code: the packing and portable checks still run while it writes.
`JAXSEL_REGENERATE_GOLDEN=cross` rewrites the portable record as well, from this
environment's run: only for a deliberate change of semantics, which regenerates every
recorded environment too (CI runs the suite on the oldest and the newest JAX); the commit
message says which strategies changed and why. A refactor regenerates nothing.
"""
from __future__ import annotations

import json
import os
import platform
import re
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsel
from helpers import R, run, softmax_params
from jaxsel.analysis.cells import state_digest as digest   # SHA-256 of every leaf's dtype, shape, bytes
from jaxsel.strategies import STRATEGIES, build_strategy
from jaxsel.training.old_records import renamed
from portable_record import STATE_FIELDS, assert_portable_record, portable_record

GOLDEN = Path(__file__).parent / "golden"
#: "1": write this environment's exact records; "cross": the portable records as well
REGENERATE_AS = os.environ.get("JAXSEL_REGENERATE_GOLDEN", "")
REGENERATE = REGENERATE_AS in ("1", "cross")
REGENERATE_PORTABLE = REGENERATE_AS == "cross"
B, D, C, K = 4, 6, 3, 10
CONTEXT = dict(replicas=R, total_steps=K, steps_per_epoch=5, base_lr=0.1)
#: devices x replicas per device
EIGHT_AND_ONE = {"8x1": 8, "1x8": 1}
EVERY_LAYOUT = {"8x1": 8, "4x2": 4, "2x4": 2, "1x8": 1}
REPORTED = ("synced", "bytes_allreduced", "vote_bytes")
#: the variants beyond each strategy's defaults: name -> (strategy, options)
#: SelSync's statistic and warm-up as they were before `statistic="raw"` (and its W-1
#: warm-up) became the default (issue 42): the cases recorded before keep their records
SMOOTHED = {"statistic": "smoothed", "warmup": 3}   # 2W-1 at W = 2
VARIANTS = {
    "selsync-grads": ("selsync", {"sync": "grads", "window": 2, "delta": 0.25, **SMOOTHED}),
    "selsync-median": ("selsync", {"window": 2, "delta": 0.25, "aggregator": "median", **SMOOTHED}),
    "localsgd-median": ("localsgd", {"period": 3, "aggregator": "median"}),
    "fedavg-sampled": ("fedavg", {"period": 3, "fraction": 0.5}),
    "bsp-int8": ("bsp", {"compress": "int8"}),
    "diloco-int8": ("diloco", {"period": 3, "compress": "int8"}),
    "streamingdiloco-h4": ("streamingdiloco", {"period": 4, "fragments": 2}),
    "hierarchical-groups2": ("hierarchical", {"inner": "bsp", "outer": "selsync", "groups": 2,
                                              "outer.window": 2, "outer.delta": 0.3, "outer.statistic": "smoothed",
                                              "outer.warmup": 3}),
    "ssp-s2": ("ssp", {"staleness": 2}),
    "syncswitch-online": ("syncswitch", {"policy": "online", "staleness": 2}),
    "triggered-periodic-bf16": ("triggered", {"trigger": "periodic", "trigger.period": 3, "compress": "bf16"}),
    "diloco-sparta": ("diloco", {"period": 3, "sparta": 0.2}),
    # the raw statistic (the default since issue 42): SelSync's defaults (W = 25: 10 forced
    # steps), a warm-up of 0 (Delta_bar 0 until its window fills) on gradients, a two-level run
    "selsync-defaults": ("selsync", {}),
    "selsync-raw-grads-w0": ("selsync", {"statistic": "raw", "window": 2, "delta": 0.5, "sync": "grads",
                                         "warmup": 0}),
    "hierarchical-raw-groups4": ("hierarchical", {"groups": 4, "inner": "localsgd", "inner.period": 2,
                                                  "outer": "selsync", "outer.window": 2, "outer.delta": 0.5,
                                                  "outer.statistic": "raw"}),
    # issue 58: SelSync averaging after the update (local SGD's order), and its momentum averaged at a sync
    "selsync-model": ("selsync", {"sync": "model", "window": 2, "delta": 0.5}),
    "selsync-opt-state": ("selsync", {"sync_opt_state": True, "window": 2, "delta": 0.5}),
}
#: the variants that also run on every layout: decisions taken on packed replicas' votes,
#: order statistics, sampling and groups inside a device as well as across devices
PACKING_VARIANTS = {
    "selsync-w2": ("selsync", {"window": 2, "delta": 0.05, **SMOOTHED}),
    "selsync-median-w2": ("selsync", {"window": 2, "delta": 0.05, "aggregator": "median", **SMOOTHED}),
    "selsync-raw-w2": ("selsync", {"statistic": "raw", "window": 2, "delta": 0.5}),   # syncs 1111001010
    "fedavg-half": ("fedavg", {"fraction": 0.5}),
    "localsgd-trimmed": ("localsgd", {"period": 2, "aggregator": "trimmed:2"}),
    "superstep-random": ("superstep", {"aggregator": "random"}),
    # exactly 7 of the 10 steps, evenly spread (a budget-matched baseline): steps 1 2 4 5 7 8 9
    "localsgd-syncs7": ("localsgd", {"syncs": 7}),
    # 4 groups of 2: inside a device on 1 and 2 devices, whole devices on 4 and 8
    "hierarchical-groups4": ("hierarchical", {"groups": 4, "inner": "localsgd", "inner.period": 2,
                                              "inner.aggregator": "median", "outer": "selsync",
                                              "outer.window": 2, "outer.delta": 0.05, "outer.statistic": "smoothed",
                                              "outer.warmup": 3}),
    # a shared draw of entries every step, a full average every 3rd (the sparse sync under a cond)
    "sparta-period3": ("sparta", {"fraction": 0.2, "period": 3}),
    # random islands of 4: members on one device and across devices, on every packing
    "localsgd-islands4": ("localsgd", {"period": 2, "islands": 4}),
}
#: case -> (strategy, options, layouts)
CASES = {**{name: (name, {}, EVERY_LAYOUT) for name in sorted(STRATEGIES)},
         **{case: (*spec, EIGHT_AND_ONE) for case, spec in VARIANTS.items()},
         **{case: (*spec, EVERY_LAYOUT) for case, spec in PACKING_VARIANTS.items()}}
CASES["syncswitch-online"] = (*VARIANTS["syncswitch-online"], EVERY_LAYOUT)
CASES["selsync"] = ("selsync", {"statistic": "smoothed", "warmup": 49}, EVERY_LAYOUT)   # 2W-1 at W = 25
CASES["hierarchical"] = ("hierarchical", {"outer.statistic": "smoothed", "outer.warmup": 49}, EVERY_LAYOUT)


def loss_fn(params, model_state, batch):
    """Softmax regression on inputs centred by a running mean (the model state)."""
    mean = 0.9 * model_state["mean"] + 0.1 * batch["x"].mean(0)
    logits = (batch["x"] - mean) @ params["w"] + params["b"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean(), {"mean": mean}


def batches():
    """Inputs centred on 1, so that the running mean (the model state) matters."""
    rng = np.random.default_rng(0)
    return [{"x": rng.normal(1.0, 1.0, size=(R * B, D)).astype(np.float32), "y": rng.integers(0, C, R * B)}
            for _ in range(K)]



def train(strategy, devices: int):
    """(final state on the host, [metrics of each step]) of K steps on `devices` devices."""
    mesh = jaxsel.data_mesh(replicas=R, devices=devices)
    state, history = run(strategy, mesh, batches(), loss=loss_fn, params=softmax_params(D, C),
                         model_state={"mean": jnp.zeros(D)}, stateful=True, grad_norm_metric=True)
    return jax.device_get(state), [m for _, m in history]


#: (case, layout) -> its run: a case's two tests share its 8-device run (one xdist unit)
RUNS: dict[tuple[str, str], tuple] = {}


def case_run(case: str, layout: str):
    """The case's run on `layout`, trained once per process."""
    if (case, layout) not in RUNS:
        name, options, _ = CASES[case]
        RUNS[case, layout] = train(build_strategy(name, options, **CONTEXT), EVERY_LAYOUT[layout])
    return RUNS[case, layout]


def record(state, steps: list) -> dict:
    """The final state's digests and the per-step metrics."""
    out = {field: digest(getattr(state, field)) for field in STATE_FIELDS}
    out.update({key: [np.asarray(m[key]).item() for m in steps] for key in REPORTED})
    out["metrics"] = {key: digest([m[key] for m in steps]) for key in sorted(steps[0]) if key not in REPORTED}
    return out


#: CPU features that change what XLA:CPU generates (vector width, fused multiply-add)
CODEGEN_FEATURES = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl",
                    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "asimd", "sve", "sve2")


def cpu_features() -> list[str]:
    """The host's CODEGEN_FEATURES (Linux's /proc/cpuinfo; elsewhere the processor's name)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith(("flags", "Features"))).split(":", 1)[1].split()
    except (OSError, StopIteration):
        return [platform.processor()]
    return [f for f in CODEGEN_FEATURES if f in flags]


def environment() -> dict:
    """What XLA:CPU's rounding depends on besides the code."""
    return {"jax": jax.__version__, "jaxlib": version("jaxlib"), "machine": platform.machine(),
            "cpu": cpu_features(), "xla_flags": os.environ.get("XLA_FLAGS", "")}


def write_records(path: Path, case: list, portable: dict, records: list[dict]) -> None:
    """The case's file: its portable record, its exact records sorted by environment, short
    lists on one line."""
    records = sorted(records, key=lambda r: json.dumps(r["environment"], sort_keys=True))
    text = json.dumps({"case": case, "portable": portable, "records": records}, indent=1)
    path.write_text(re.sub(r"\[[^\[\]{}]*\]", lambda m: " ".join(m[0].split()), text) + "\n")


def assert_layouts_agree(case: str, runs: dict) -> None:
    """Packing: every layout decides the same syncs and reaches the 8-device state."""
    ref_state, ref_steps = runs["8x1"]
    for layout, (state, steps) in runs.items():
        assert [bool(m["synced"]) for m in steps] == [bool(m["synced"]) for m in ref_steps], (case, layout)
        for field in STATE_FIELDS:
            jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6,
                                                                 err_msg=f"{case} {field} on {layout}"),
                         getattr(state, field), getattr(ref_state, field))


def stored_case(case: str) -> dict:
    """The case's file (its options by today's names; "as_recorded": as the file names
    them, kept when it is rewritten), or an empty one not yet written."""
    name, options, _ = CASES[case]
    path = GOLDEN / f"{case}.json"
    stored = json.loads(path.read_text()) if path.exists() else {"case": [name, options], "records": []}
    stored["as_recorded"], stored["case"] = stored["case"], named_now(stored["case"])
    stored.setdefault("portable", {})
    return stored


def check_portable(case: str, stored: dict, runs: dict) -> None:
    """`runs` (layout -> run) agree with the case's portable record, layout by layout."""
    name, options, layouts = CASES[case]
    assert stored["case"] == [name, options], f"tests/golden/{case}.json is another case: regenerate"
    assert sorted(stored["portable"]) == sorted(layouts), \
        (f"tests/golden/{case}.json: portable record of layouts {sorted(stored['portable'])}, {sorted(layouts)} "
         "run (JAXSEL_REGENERATE_GOLDEN=cross on unchanged code writes it)")
    for layout, result in runs.items():
        assert_portable_record(portable_record(*result), stored["portable"][layout], f"{case} on {layout}")


def regenerate(case: str, stored: dict, runs: dict) -> None:
    """Writes this environment's exact record of the case (the others kept while the case is
    the same) and, asked or where it has none, its portable record."""
    name, options, layouts = CASES[case]
    if sorted(runs) != sorted(layouts):
        pytest.skip("a record is written by test_golden_on_every_layout, which runs every layout")
    got = {"environment": environment(), **{layout: record(*result) for layout, result in runs.items()}}
    same = stored["case"] == [name, options]
    others = [r for r in stored["records"] if r["environment"] != got["environment"]] if same else []
    portable = stored["portable"] if same and stored["portable"] and not REGENERATE_PORTABLE else \
        {layout: portable_record(*result) for layout, result in runs.items()}
    write_records(GOLDEN / f"{case}.json", stored["as_recorded"] if same else [name, options], portable,
                  [*others, got])


def check_records(case: str, runs: dict) -> None:
    """`runs` (layout -> run) agree with the case's portable record and equal its exact
    record for this environment, layout by layout; a skip of the exact check alone where
    this environment has none. With JAXSEL_REGENERATE_GOLDEN and every layout of the case
    run, writes the records instead of the exact check."""
    name, options, layouts = CASES[case]
    stored = stored_case(case)
    kept = stored["case"] == [name, options] and stored["portable"] and not REGENERATE_PORTABLE
    if kept or not REGENERATE:   # regenerating checks a portable record it keeps
        check_portable(case, stored, runs)
    if REGENERATE:
        regenerate(case, stored, runs)
        return
    want = next((r for r in stored["records"] if r["environment"] == environment()), None)
    if want is None:
        pytest.skip(f"portable record checked; exact check skipped: no exact record for {environment()}; "
                    f"recorded: {[r['environment'] for r in stored['records']]} "
                    "(JAXSEL_REGENERATE_GOLDEN=1 on unchanged code adds one)")
    got = {layout: record(*result) for layout, result in runs.items()}
    assert sorted(want) == sorted(["environment", *layouts]), \
        f"tests/golden/{case}.json: layouts {sorted(want)} recorded, {sorted(layouts)} run"
    for layout in runs:
        w, g = want[layout], got[layout]
        for key in ("params", "opt_state", "model_state", "strategy_state", *REPORTED):
            assert g[key] == w[key], f"{case} on {layout}: {key} differs from tests/golden/{case}.json"
        for key, value in w["metrics"].items():
            assert g["metrics"].get(key) == value, f"{case} on {layout}: metric {key!r} differs"


def named_now(case: list) -> list:
    """A recorded case with its options by today's names: a record is never edited, and one
    written before an option was renamed (DiLoCo's `inner_steps`, now `period`; issue 44)
    names it by the strategy's old name, read as jaxsel reads an old run's record."""
    name, options = case
    return [name, renamed({"strategy": name, "strategy_options": options})["strategy_options"]]


#: each case's two tests are one unit of work on xdist (conftest.py), so they share its runs
BY_CASE = [pytest.param(case, marks=pytest.mark.xdist_group(f"golden-{case}")) for case in sorted(CASES)]


@pytest.mark.parametrize("case", BY_CASE)
def test_golden_on_eight_devices(case):
    """The fast tier's check: every case's run of 8 replicas on 8 devices against its
    portable record, and bit for bit where this environment is recorded."""
    check_records(case, {"8x1": case_run(case, "8x1")})


@pytest.mark.slow
@pytest.mark.layouts
@pytest.mark.parametrize("case", BY_CASE)
def test_golden_on_every_layout(case):
    """Every layout the case runs (packed: 1x8, and 2x4, 4x2 for many) agrees with its
    records, and the packing check: every layout decides the same syncs and reaches the
    8-device state. A packed step compiles 1.5-3x longer than the 8-device one: the layout
    tier (docs/DEVELOPMENT.md)."""
    layouts = CASES[case][2]
    runs = {layout: case_run(case, layout) for layout in layouts}
    if layouts is EVERY_LAYOUT:
        assert_layouts_agree(case, runs)
    check_records(case, runs)


def test_every_strategy_has_a_golden_record():
    """A newly registered strategy gets its record (regenerate) rather than going unchecked."""
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(CASES)


def test_a_portable_record_takes_rounding_but_no_change():
    """Float32 rounding of every value passes the portable check; a value moved by 1e-4 of
    its leaf's scale, a changed decision, an extra leaf or a metric moved beside a NaN
    (SelSync's `delta` before its window fills) fails it."""
    rng = np.random.default_rng(0)
    state = SimpleNamespace(params={"w": rng.normal(size=(8, 6, 3)).astype(np.float32)},
                            opt_state=(), model_state={"count": np.arange(8, dtype=np.int32)},
                            strategy_state={"h": np.zeros(4, np.float32)})
    steps = [{"synced": np.bool_(t % 2), "delta": np.float32(np.nan if t == 0 else t)} for t in range(4)]
    want = portable_record(state, steps)
    ulp = SimpleNamespace(**{**vars(state), "params": {"w": np.nextafter(state.params["w"], np.float32(np.inf))}})
    assert_portable_record(portable_record(ulp, steps), want, "one ulp")
    moved = state.params["w"].copy()
    moved[0, 0, 0] += 1e-4 * np.linalg.norm(moved)
    changed = [SimpleNamespace(**{**vars(state), "params": {"w": moved}}),
               SimpleNamespace(**{**vars(state), "model_state": {"count": np.arange(1, 9, dtype=np.int32)}}),
               SimpleNamespace(**{**vars(state), "strategy_state": {"h": np.zeros(4, np.float32), "k": np.ones(1)}})]
    for other in changed:
        with pytest.raises(AssertionError, match="differ from the portable record"):
            assert_portable_record(portable_record(other, steps), want, "changed")
    flipped = [{**m, "synced": np.bool_(not m["synced"]) if t == 3 else m["synced"]} for t, m in enumerate(steps)]
    with pytest.raises(AssertionError, match="steps/synced"):
        assert_portable_record(portable_record(state, flipped), want, "flipped")
    for delta in (np.nan, 2.0 * (1 + 1e-4)):
        moved_metric = [{**m, "delta": np.float32(delta) if t == 2 else m["delta"]} for t, m in enumerate(steps)]
        with pytest.raises(AssertionError, match=r"steps/delta\[2\]"):
            assert_portable_record(portable_record(state, moved_metric), want, "moved metric")
