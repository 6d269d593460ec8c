"""Every test sees 8 CPU devices (set before JAX starts its backends)."""
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

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", int(os.environ["JAX_NUM_CPU_DEVICES"]))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def mesh():
    import jaxsel

    return jaxsel.data_mesh(8)
