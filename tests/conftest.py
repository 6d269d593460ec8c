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

os.environ.setdefault("JAXSEL_DATA_DIR", tempfile.mkdtemp(prefix="jaxsel-test-data-"))
# One compilation cache for the session, subprocesses included: many tests compile the same
# step (measured: test_methods + test_step + test_selsync + test_packing 188 s -> 144 s).
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="jaxsel-test-xla-cache-"))
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
    return f"XLA_FLAGS: {os.environ['XLA_FLAGS']} (jaxlib {COMPILE_FLAGS['jaxlib']}, tests/compile_flags.py{dropped})"


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


# ------------------------------------------------------------------ scheduling on xdist workers
# `python -m pytest -n 2` runs with `--dist loadgroup` (pyproject.toml): every test is its own
# unit of work, handed to whichever worker is free, except the tests that share a module-scoped
# fixture (a trained grid, a prepared folder, ...): they are one unit, so the fixture is built
# once, not once per worker. Units start longest first so that the workers end together,
# instead of one starting a minute-long test while the other has nothing left.

#: the longest tests (seconds of setup + call, the whole suite on the 2-core box with load
#: 9-13, JAX 0.10.2: only the order counts)
LONGEST = {
    "test_newcomer.py::test_newcomer_runs_the_main_job_then_the_other_commands": 198,
    "test_multihost.py::test_two_processes_match_one_process": 101,
    "test_bench.py::test_bench_command_tiny": 94,
    "test_headline_projections.py::test_quick_run_writes_finite_positive_ratios": 76,
    "test_readme.py::test_readme_library_loop_as_written_outlasts_a_busy_cpu": 70,
    "test_multihost.py::test_a_process_that_never_joins_or_a_duplicate_process_id_is_named_in_one_line": 63,
    "test_grain_loader.py::test_a_run_killed_mid_training_leaves_no_worker_and_resumes_bit_for_bit": 48,
    "test_fair_compare.py::test_grid_rows_follow_the_results_contract": 48,
    "test_multihost.py::test_dead_process_makes_the_other_exit[1]": 43,
    "test_grain_loader.py::test_grain_trains_to_the_threaded_loaders_parameters": 36,
    "test_run_safety.py::test_a_truncated_checkpoint_fallback_prints_one_line_not_a_flood": 35,
    "test_faults.py::test_sigterm_from_outside_saves_exits_143_and_resumes": 33,
    "test_prepare.py::test_four_processes_preparing_digits_at_once_make_one_dataset": 32,
    "test_multihost.py::test_dead_process_makes_the_other_exit[0]": 31,
    "test_fair_compare.py::test_grid_prints_the_table_the_verdict_and_the_true_layout": 28,
    "test_resume_new_states.py::test_interrupted_run_resumes_bit_for_bit[demo]": 25,
    "test_checkpoint.py::test_resume_on_one_device_is_bit_for_bit[auto]": 25,
    "test_costmodel_validation.py::test_script_runs_two_processes_end_to_end": 24,
    "test_experiments.py::test_tiny_run[selsync_transformer_lm1b]": 24,
    "test_readme.py::test_readme_library_example_runs_8_replicas_on_one_cpu": 23,
    "test_run_safety.py::test_processes_with_different_settings_both_exit_2_naming_the_setting": 22,
    "test_codecs_ef.py::test_interrupted_run_resumes_bit_for_bit": 22,
    "test_golden.py::test_golden[syncswitch-online]": 19,
    "test_resume_new_states.py::test_interrupted_run_resumes_bit_for_bit[selsync-max-local]": 19,
    "test_models_zoo.py::test_transformer_is_causal_and_lm_loss_starts_near_log_vocab": 18,
    "test_multihost.py::test_distributed_auto_without_a_cluster_is_a_clear_error": 17,
    "test_fair_compare.py::test_a_grid_seed_is_the_lone_run_of_that_seed_bit_for_bit": 17,
    "test_experiments.py::test_superstep_grid_tiny": 17,
    "test_resume_new_states.py::test_interrupted_run_resumes_bit_for_bit[accordion]": 17,
    "test_golden.py::test_golden[demo]": 16,
    "test_declarations.py::test_check_config_runs_once_per_run_and_once_per_compared_variant": 16,
}


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
        group = module_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        units.setdefault(group or item.nodeid, []).append(item)
    seconds = {unit: sum(LONGEST.get(i.nodeid.rsplit("/", 1)[-1], 1) for i in members)
               for unit, members in units.items()}
    # a stable sort: a unit keeps its tests together and in order, equal units keep theirs
    items[:] = [i for unit in sorted(units, key=lambda u: -seconds[u]) for i in units[unit]]
