"""Every test sees 8 CPU devices (set before JAX starts its backends); most run 8 replicas,
one per device (the `mesh` fixture); tests/test_packing.py packs them onto fewer."""
import os

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

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", int(os.environ["JAX_NUM_CPU_DEVICES"]))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def mesh():
    """8 replicas, one per CPU device (real cross-device collectives only). Packed layouts
    are covered by tests/test_packing.py (every strategy on 1, 2, 4 and 8 devices) and
    tests/test_golden.py (8 on 1); as the common fixture they cost more here:
    a packed step compiles 1.5-3x longer, and these tests are dominated by compiling
    (test_methods + test_step + test_selsync: 46 s on 8 devices, 72 s packed on 2)."""
    import jaxsel

    return jaxsel.data_mesh(replicas=8, devices=8)

