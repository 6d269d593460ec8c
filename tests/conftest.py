"""Every test sees 8 CPU devices (set before JAX starts its backends); most run 8 replicas,
one per device (the `mesh` fixture); tests/test_golden.py and tests/test_packing.py pack
them onto fewer."""
import os
import sys

# Byte-compiled modules are cached as Python does by default, even where the environment
# turns that off (PYTHONDONTWRITEBYTECODE): the suite starts about sixty Python processes
# (xdist workers, CLI runs, multi-host workers, scripts), and each compiled jaxsel's and the
# tests' sources again (measured: a 2-step `jaxsel train` 7.2 s -> 6.0 s).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Embedded datasets are built once per test session into a private data dir.
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

# Subprocesses (CLI, multi-host workers) import this checkout even without an install.
_ROOT = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))

#: what this process made and removes at its end (the controller's; workers inherit the paths)
_MADE_HERE: list[Path] = []
if "JAXSEL_DATA_DIR" not in os.environ:
    _MADE_HERE.append(Path(tempfile.mkdtemp(prefix="jaxsel-test-data-")))
    os.environ["JAXSEL_DATA_DIR"] = str(_MADE_HERE[-1])
# One compilation cache for the session, subprocesses included: many tests compile the same
# step (measured: test_methods + test_step + test_selsync + test_packing 188 s -> 144 s).
# It is kept across runs, one folder per machine and jaxlib (tests/compile_cache.py), unless
# JAXSEL_TEST_XLA_CACHE=fresh.
import compile_cache  # noqa: E402  (tests/ is on sys.path, as for helpers.py)

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _cache, _fresh = compile_cache.folder()
    if _fresh:
        _MADE_HERE.append(_cache)
    else:
        compile_cache.prune(_cache)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(_cache)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# The suite is compile-bound (half its time was XLA:CPU compiling tiny programs), so it
# compiles for speed of compiling, with the flags tests/compile_flags.py picks for the
# installed jaxlib (each tried first in a subprocess: a flag XLA does not know would abort
# every worker). What is compared stays compared under one set of flags (subprocesses
# inherit them). README's own commands run with XLA's defaults: the main job
# (test_newcomer, and CI's first step) and the library example (test_readme).
import compile_flags  # noqa: E402  (tests/ is on sys.path, as for helpers.py)

COMPILE_FLAGS = compile_flags.decide()
os.environ["XLA_FLAGS"] = compile_flags.with_flags(os.environ.get("XLA_FLAGS", ""), COMPILE_FLAGS["flags"])

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", int(os.environ["JAX_NUM_CPU_DEVICES"]))

import pytest  # noqa: E402


def pytest_report_header(config):
    dropped = "".join(f"; dropped {flag}: {why}" for flag, why in COMPILE_FLAGS["dropped"].items())
    cache = Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    kind = "fresh for this run" if cache in _MADE_HERE else "kept across runs, tests/compile_cache.py"
    return [f"XLA_FLAGS: {os.environ['XLA_FLAGS']} (jaxlib {COMPILE_FLAGS['jaxlib']}, tests/compile_flags.py{dropped})",
            f"XLA compilation cache: {cache} ({kind}; {sum(1 for _ in os.scandir(cache))} files at the start)"]


def pytest_unconfigure(config):
    """The run's temporary data directory and fresh cache go with it (before, every run left
    both in the temp dir). Workers and subprocesses inherit the paths; only the process
    that made them removes them."""
    import shutil

    for path in _MADE_HERE:
        shutil.rmtree(path, ignore_errors=True)


def pytest_sessionstart(session):
    """A dropped flag is said once, by the controller, even under -q."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if COMPILE_FLAGS["dropped"] and reporter is not None and not hasattr(session.config, "workerinput") \
            and session.config.get_verbosity() < 0:
        for flag, why in COMPILE_FLAGS["dropped"].items():
            reporter.write_line(f"tests/compile_flags.py: jaxlib {COMPILE_FLAGS['jaxlib']} does not take {flag}, "
                                f"the suite compiles without it ({why})")


@pytest.fixture(scope="session")
def mesh():
    """8 replicas, one per CPU device (real cross-device collectives only). Packed layouts
    are covered by tests/test_golden.py (every strategy on 1, 2, 4 and 8 devices) and
    tests/test_packing.py; as the common fixture they cost more here:
    a packed step compiles 1.5-3x longer, and these tests are dominated by compiling
    (test_methods + test_step + test_selsync: 46 s on 8 devices, 72 s packed on 2)."""
    import jaxsel

    return jaxsel.data_mesh(replicas=8, devices=8)


@pytest.fixture(autouse=True)
def _replica_counts_asked_by_this_test_only(monkeypatch):
    """`data_mesh(replicas=N)` records N for its mesh so that `init_state` need not be told
    again, and a mesh asked for two counts is refused (core/parallel.py). JAX interns
    meshes, so every test asking 1, 2 or 8 devices for some count shares one object: each
    test starts with an empty record, as a fresh program would, whichever tests its worker
    ran before."""
    import weakref

    from jaxsel.core import parallel

    monkeypatch.setattr(parallel, "_ASKED", weakref.WeakKeyDictionary())


@pytest.fixture(autouse=True)
def _comparison_pictures_only_where_a_test_looks(request, monkeypatch):
    """A comparison draws its five pictures (about 3 CPU-s, matplotlib) only in the tests
    marked `pictures`, the ones that look at them; every other test's comparison writes its
    records and skips the drawing. A module-scoped fixture is built before this one, so the
    comparisons such fixtures run draw theirs as a user's do. Comparisons run in a
    subprocess (the slow tier's CLI runs, the newcomer's) always draw."""
    if request.node.get_closest_marker("pictures") is None:
        monkeypatch.setattr("jaxsel.analysis.compare.write_pictures", lambda *args: None)


# ------------------------------------------------------------------ scheduling on xdist workers
# `python -m pytest -n 2` runs with `--dist loadgroup` (pyproject.toml): every test is its own
# unit of work, handed to whichever worker is free, except the tests that share a module-scoped
# fixture (a trained grid, a prepared folder, ...): they are one unit, so the fixture is built
# once, not once per worker. Units start longest first so that the workers end together,
# instead of one starting a minute-long test while the other has nothing left.

#: the longest tests (seconds of setup + call, the whole suite on the 2-core box at load 15-30,
#: Python 3.12, JAX 0.12.0.1, tests/measure's run of issue 43; the smoke session as it runs now,
#: on one device: only the order counts)
LONGEST = {
    "test_gpu_session.py::test_the_smoke_session_runs_every_step": 900,
    "test_newcomer.py::test_newcomer_s_main_job_writes_its_results_and_pictures_quietly": 581,
    "test_newcomer.py::test_newcomer_s_first_train_builds_its_data_in_an_empty_home": 100,
    "test_multihost.py::test_two_processes_match_one_process": 433,
    "test_headline_projections.py::test_quick_run_writes_finite_positive_ratios": 278,
    "test_bench.py::test_bench_command_tiny": 195,
    "test_packing_choice.py::test_every_candidate_trains_a_convolutional_model_alike[selsync]": 164,
    "test_packing_choice.py::test_every_candidate_trains_a_convolutional_model_alike[bsp]": 160,
    "test_optax.py::test_packed_and_vmapped_replicas_equal_eight_devices": 155,
    "test_fair_compare.py::test_grid_rows_follow_the_results_contract": 150,
    "test_long_jobs.py::test_a_killed_compare_resumes_to_the_results_of_an_uninterrupted_one": 149,
    "test_multihost.py::test_a_process_that_never_joins_or_a_duplicate_process_id_is_named_in_one_line": 143,
    "test_optax.py::test_the_transformation_is_make_train_steps_method[diloco-topk]": 118,
    "test_golden.py::test_golden_on_every_layout[fedavg-half]": 109,
    "test_multihost.py::test_dead_process_makes_the_other_exit[0]": 106,
    "test_multihost.py::test_dead_process_makes_the_other_exit[1]": 105,
    "test_checkpoint.py::test_resume_on_one_device_is_bit_for_bit[auto]": 101,
    "test_grain_loader.py::test_a_run_killed_mid_training_leaves_no_worker_and_resumes_bit_for_bit": 100,
    "test_long_jobs.py::test_a_killed_frontier_resumes_and_its_cell_is_the_lone_compare_run": 92,
    "test_golden.py::test_golden_on_every_layout[hierarchical]": 92,
    "test_golden.py::test_golden_on_every_layout[fedavg]": 92,
    "test_experiments.py::test_syncswitch_search_tiny": 91,
    "test_experiments.py::test_tiny_run[selsync_transformer_lm1b]": 86,
    "test_golden.py::test_golden_on_every_layout[hierarchical-groups4]": 84,
    "test_models_zoo.py::test_resnet20_batchnorm_statistics_stay_per_replica": 84,
    "test_dashboards.py::test_compare_writes_tensorboard_and_wandb_runs_per_strategy": 83,
    "test_costmodel_validation.py::test_script_runs_two_processes_end_to_end": 79,
    "test_run_safety.py::test_a_truncated_checkpoint_fallback_prints_one_line_not_a_flood": 79,
    "test_optax.py::test_the_transformation_is_make_train_steps_method[bsp-topk]": 75,
    "test_fair_compare.py::test_replica_accuracy_equals_the_evaluated_model_right_after_a_sync": 73,
    "test_readme.py::test_readme_library_loop_as_written_outlasts_a_busy_cpu": 72,
    "test_golden.py::test_golden_on_every_layout[localsgd]": 72,
    "test_golden.py::test_golden_on_every_layout[diloco]": 72,
}


def xdist_group(item) -> str | None:
    """The unit a test names itself (`pytest.mark.xdist_group(NAME)`: tests sharing runs)."""
    mark = item.get_closest_marker("xdist_group")
    return None if mark is None else (mark.args[0] if mark.args else mark.kwargs.get("name"))


def module_fixture_group(item) -> str | None:
    """The module's path when `item` uses a module-scoped fixture."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        if any(d.scope == "module" for d in defs):
            return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    units: dict[str, list] = {}
    for item in items:
        group = xdist_group(item) or module_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        units.setdefault(group or item.nodeid, []).append(item)
    seconds = {unit: sum(LONGEST.get(i.nodeid.rsplit("/", 1)[-1], 1) for i in members)
               for unit, members in units.items()}
    # a stable sort: a unit keeps its tests together and in order, equal units keep theirs
    items[:] = [i for unit in sorted(units, key=lambda u: -seconds[u]) for i in units[unit]]
