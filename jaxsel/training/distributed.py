"""Multi-host runs through `jax.distributed`, and what keeps them from hanging.

A multi-controller job advances only while every process enters every collective. When
one process dies the others block inside a collective that can never finish; jax's own
coordination heartbeat eventually aborts them, but with a C++ fatal log. The watchdog here
says what happened sooner and in one line: every process bumps a counter in the
coordination service's key-value store each second and watches everybody's counters. A
counter that stops moving for `peer_timeout` seconds, a peer that reports a failure, or a
coordinator that no longer answers ends this process with exit code 1 and a message
naming the process, instead of a silent hang. jax's heartbeat stays on as a backstop
(`peer_timeout + 30` seconds).

CPU runs use gloo collectives. Their multi-device programs must not overlap across steps
(in-flight programs from consecutive dispatches can deadlock on gloo in jax 0.10), so the
loop waits for each step there (`core.pacing.queue_limit`); accelerators keep async dispatch.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import threading
import time
from typing import Any

import jax
import numpy as np

from ..core.library_changes import LibraryChanged
from . import rendezvous
from .process_layout import check_process_layout
from .supervisor import EXIT_PEER_LOST

PREFIX = "jaxsel/"


class PeerLostError(RuntimeError):
    """Another process of a multi-host run died, failed or stopped answering."""


class SettingsMismatch(ValueError):
    """The processes of a multi-host run were started with different settings."""


def start(coordinator: str | None = None, num_processes: int | None = None,
          process_id: int | None = None, *, auto: bool = False, peer_timeout: float = 60.0,
          join_timeout: float = 120.0) -> "Watchdog | None":
    """Join the job (explicit layout, or the cluster's own detection with `auto`) and start
    the peer watchdog. Must run before anything initialises JAX's backends. Every process
    must join within `join_timeout` seconds (rendezvous.py: who did not is named)."""
    check_process_layout(coordinator, num_processes, process_id, auto, peer_timeout, join_timeout)
    if not auto and num_processes > 1:
        rendezvous.join(coordinator, num_processes, process_id, join_timeout)
    init_timeout = max(1, math.ceil(join_timeout))
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs = dict(initialization_timeout=init_timeout,
                  heartbeat_timeout_seconds=int(peer_timeout) + 30,
                  shutdown_timeout_seconds=int(peer_timeout) + 30)
    try:
        if auto:
            jax.distributed.initialize(**kwargs)
        else:
            jax.distributed.initialize(coordinator, num_processes=num_processes,
                                       process_id=process_id, **kwargs)
    except ValueError as err:  # cluster auto-detection found nothing
        raise ValueError(f"--distributed auto found no cluster environment ({err}); "
                         f"pass --coordinator, --num-processes and --process-id") from None
    except Exception as err:  # connection / timeout errors from the coordination service
        raise PeerLostError(
            f"could not join the multi-host job at {coordinator or 'the detected coordinator'} "
            f"within {init_timeout} s: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
        ) from None
    if jax.process_count() == 1:
        return None
    without_persistent_cache_on_cpu()
    orbax_barriers_via_coordinator()
    dog = Watchdog(peer_timeout)
    dog.start()
    dog.fail_on_uncaught()
    return dog


#: lines this process's joining has to say, printed with the run's warnings once its checks pass
START_NOTES: list[str] = []


def without_persistent_cache_on_cpu() -> None:
    """A multi-process job on CPU devices compiles its programs afresh: on jaxlib 0.12.1 one
    whose step XLA loads from the persistent compilation cache (JAX_COMPILATION_CACHE_DIR)
    deadlocks, every process idle in block_until_ready, where the same job compiling ends in
    under a minute (issue 57: tests/test_multihost.py keeps the suite's cache to check this).
    Noted (`START_NOTES`) where a cache was set; GPU jobs keep theirs."""
    if jax.devices()[0].platform != "cpu" or not jax.config.jax_enable_compilation_cache:
        return
    if jax.config.jax_compilation_cache_dir and jax.process_index() == 0:
        START_NOTES.append("jaxsel: note: a multi-process run on CPU devices compiles without the persistent "
                           "compilation cache (JAX_COMPILATION_CACHE_DIR): loading a step from it deadlocks such a "
                           "job on jaxlib 0.12")
    jax.config.update("jax_enable_compilation_cache", False)


#: Orbax's switch from device-collective barriers to the coordination service's. Orbax
#: 0.12.8 has no public option for it: `AsyncOptions.barrier_sync_fn` reaches only the
#: async-save thread's own barrier, not the `sync_global_processes` calls around a save,
#: and `MultiprocessingOptions.active_processes` (which routes those through the service)
#: refuses `create=True`. So jaxsel sets this absl flag, and a missing flag is an error.
ORBAX_BARRIER_FLAG = "experimental_orbax_use_distributed_barrier"


def orbax_barriers_via_coordinator() -> None:
    """Orbax's default multi-process barrier is a device collective, run by its async-save
    thread while the training loop runs its own programs: two programs interleaving on
    the same gloo communicators. The coordination service's barrier never touches them.
    LibraryChanged where the installed Orbax lost the flag (silently keeping the collective
    barriers would bring the deadlock back)."""
    import orbax.checkpoint as ocp
    from absl import flags

    if ORBAX_BARRIER_FLAG not in flags.FLAGS:
        raise LibraryChanged(
            f"orbax-checkpoint {ocp.__version__} has no absl flag --{ORBAX_BARRIER_FLAG}, which "
            f"jaxsel sets so that checkpoint barriers go through the coordination service instead "
            f"of device collectives (0.12.8 has it)")
    flag = flags.FLAGS[ORBAX_BARRIER_FLAG]
    flag.value, flag.present = True, 1   # present: readable before (or without) absl parsing argv
    if getattr(flags.FLAGS, ORBAX_BARRIER_FLAG) is not True:   # what Orbax reads
        raise LibraryChanged(f"orbax-checkpoint {ocp.__version__}: setting absl flag --{ORBAX_BARRIER_FLAG} "
                             f"did not take effect")


def is_multiprocess() -> bool:
    return jax.process_count() > 1


def to_host(tree: Any) -> Any:
    """NumPy copy of a pytree of global arrays on every process.

    Multi-host: the arrays other processes hold shards of are replicated by one jitted
    program (one collective per call, not one per leaf), then read locally."""
    if not is_multiprocess():
        return jax.device_get(tree)
    leaves, treedef = jax.tree.flatten(tree)
    remote = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array) and not x.is_fully_addressable]
    named = [i for i in remote if isinstance(leaves[i].sharding, jax.sharding.NamedSharding)]
    if named:
        outs = _replicator(tuple(leaves[i].sharding.mesh for i in named))(*[leaves[i] for i in named])
        jax.block_until_ready(outs)   # every device, not only the shard read below
        for i, x in zip(named, outs):
            leaves[i] = x
    rest = sorted(set(remote) - set(named))
    if rest:
        from jax.experimental import multihost_utils

        for i, x in zip(rest, multihost_utils.process_allgather([leaves[i] for i in rest], tiled=True)):
            leaves[i] = x
    host = [np.asarray(x.addressable_data(0)) if isinstance(x, jax.Array) and not x.is_fully_addressable
            else np.asarray(x) for x in leaves]
    return jax.tree.unflatten(treedef, host)


_REPLICATORS: dict = {}


def _replicator(meshes: tuple):
    """A jitted identity whose outputs are replicated over each input's mesh (cached)."""
    if meshes not in _REPLICATORS:
        from jax.sharding import PartitionSpec

        out = tuple(jax.sharding.NamedSharding(m, PartitionSpec()) for m in meshes)
        _REPLICATORS[meshes] = jax.jit(lambda *xs: xs, out_shardings=out)
    return _REPLICATORS[meshes]


def agree_any(flag: bool) -> bool:
    """True on every process when `flag` is True on any (a collective: call it everywhere).

    The votes go through `to_host`, which waits for every local device before returning,
    so no two programs with collectives are ever in flight together (`process_allgather`
    waits for one device's shard only)."""
    if not is_multiprocess():
        return bool(flag)
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.make_mesh((jax.device_count(),), ("all",), devices=jax.devices())
    local = np.full((jax.local_device_count(),), bool(flag))
    votes = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("all")), local)
    return bool(np.any(to_host(votes)))


def barrier(name: str, timeout_s: float = 600.0) -> None:
    """Wait until every process gets here (through the coordination service, not a device
    collective: gloo gives up on a collective whose peers arrive 30 s apart, e.g. after
    one host took longer to load its data)."""
    if not is_multiprocess():
        return
    client = coordination_client()
    _BARRIERS[name] = _BARRIERS.get(name, 0) + 1
    client.wait_at_barrier(f"{PREFIX}{name}/{_BARRIERS[name]}", int(timeout_s * 1000))


_BARRIERS: dict[str, int] = {}


def all_gather_text(name: str, text: str, timeout_s: float = 600.0) -> list[str]:
    """Every process's `text`, in process order (through the coordination service's
    key-value store: small, and no device collective). Call it on every process."""
    if not is_multiprocess():
        return [text]
    client = coordination_client()
    _BARRIERS[name] = _BARRIERS.get(name, 0) + 1
    key = f"{PREFIX}gather/{name}/{_BARRIERS[name]}"
    client.key_value_set(f"{key}/{jax.process_index()}", text)
    return [client.blocking_key_value_get(f"{key}/{p}", int(timeout_s * 1000)) for p in range(jax.process_count())]


def agree_settings(settings: dict, remedy: str = "start every process with the same settings") -> None:
    """SettingsMismatch on every process, naming the first differing setting and `remedy`,
    unless all processes run with the same settings (each sends a digest per setting and its
    value)."""
    if not is_multiprocess():
        return
    mine = {k: [hashlib.sha256(json.dumps(v, sort_keys=True, default=str).encode()).hexdigest()[:16],
                repr(v)[:120]] for k, v in sorted(settings.items())}
    everyone = [json.loads(t) for t in all_gather_text("settings", json.dumps(mine))]
    for key in mine:
        seen = [tuple(e.get(key, ("missing", "missing"))) for e in everyone]
        if len({d[0] for d in seen}) > 1:
            values = ", ".join(f"process {p} has {key}={d[1]}" for p, d in enumerate(seen))
            raise SettingsMismatch(f"processes disagree on setting {key!r} ({values}); {remedy}")


#: why every process must name one checkpoint folder (`agree_checkpoint_folder`)
ONE_FOLDER = ("a multi-host run's checkpoints are saved by every process together into one folder (a folder per "
              "process waits forever at the first save): give every process the same --checkpoint-dir, or the same --out")


def agree_checkpoint_folder(root: str | os.PathLike | None) -> None:
    """SettingsMismatch on every process unless all save into the same checkpoint folder
    (absolute). A run directory per host (docs/RUNS.md: paths may differ per host) names a
    default folder per host (its name hashes the run directory's path), and Orbax's save,
    which every process joins, then waited forever at the end of the run."""
    agree_settings({"checkpoint folder": os.path.abspath(root) if root is not None else None}, ONE_FOLDER)


def coordination_client():
    """The coordination service's client, whose key-value store and barriers carry the peer
    watchdog, `barrier` and `all_gather_text` (no device collective, so no gloo timeout).

    JAX has no public handle on it: `jax.distributed` offers initialize, shutdown and
    is_initialized only, in 0.10.2 as in 0.12.0.1, and `jax.experimental.multihost_utils`
    reads the same private attribute itself. This function is jaxsel's one read of a
    JAX internal (tests/test_public_apis.py lists it and pins it on the installed JAX); where
    it moved, a multi-host run stops at start in one line instead of running unwatched."""
    try:
        from jax._src import distributed as jax_distributed

        client = jax_distributed.global_state.client
    except (ImportError, AttributeError) as err:
        raise LibraryChanged(
            f"jax {jax.__version__} moved its coordination-service client ({err}); jaxsel's "
            f"multi-host watchdog and barriers read jax._src.distributed.global_state.client "
            f"(jaxsel/training/distributed.py: coordination_client)") from None
    if client is None:
        raise RuntimeError("jax.distributed is not initialized: the coordination service's client "
                           "exists only in a multi-host run (jaxsel.training.distributed.start)")
    return client


class Watchdog(threading.Thread):
    """Heartbeat counters in the coordination key-value store; exits the process when a
    peer is gone. `finish()` before a clean shutdown, `fail(msg)` before exiting on error."""

    def __init__(self, peer_timeout: float, interval: float = 1.0):
        super().__init__(name="jaxsel-peer-watchdog", daemon=True)
        self.peer_timeout = float(peer_timeout)
        self.interval = float(interval)
        self.me, self.n = jax.process_index(), jax.process_count()
        self.client = coordination_client()
        self._halt = threading.Event()
        self._seen: dict[int, tuple[str, float]] = {}

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            problem = self.check()
            if problem and not self._halt.is_set():
                self.exit(problem)

    def check(self) -> str | None:
        """One round: beat, read every process's entry, describe a lost peer (or None)."""
        now = time.monotonic()
        try:
            self.client.key_value_increment(f"{PREFIX}beat/{self.me}", 1)
            entries = dict(self.client.key_value_dir_get(PREFIX))
        except Exception as err:  # the coordinator (process 0) is gone
            return (f"lost contact with the coordinator (process 0 of {self.n}): "
                    f"{str(err).splitlines()[0] if str(err) else type(err).__name__}")
        for p in range(self.n):
            if p == self.me:
                continue
            status = entries.get(f"{PREFIX}status/{p}", "")
            if status.startswith("failed"):
                return f"process {p} of {self.n} failed: {status.partition(':')[2] or 'see its log'}"
            if status == "done":
                continue
            beat = entries.get(f"{PREFIX}beat/{p}", "")
            last = self._seen.get(p)
            if last is None or last[0] != beat:
                self._seen[p] = (beat, now)
            elif now - last[1] > self.peer_timeout:
                return (f"process {p} of {self.n} stopped responding (no heartbeat for "
                        f"{now - last[1]:.0f} s; it probably died - see its log)")
        return None

    def _set_status(self, value: str) -> None:
        try:
            self.client.key_value_set(f"{PREFIX}status/{self.me}", value, allow_overwrite=True)
        except Exception:
            pass

    def finish(self) -> None:
        """This process is done: peers stop watching it; stop watching them."""
        self._halt.set()
        self._set_status("done")

    def fail(self, message: str) -> None:
        """Tell the peers why this process is about to exit."""
        self._halt.set()
        self._set_status("failed:" + message.replace("\n", " ")[:500])

    def fail_on_uncaught(self) -> None:
        """An error that ends this process uncaught (a library caller's own, before or
        after a run) tells the peers, as `leave_after_error` does for the command line:
        they exit at once naming it, instead of waiting at their next barrier until JAX's
        shutdown deadline aborts them."""
        previous = sys.excepthook

        def tell_peers(kind, err, trace):
            if not self._halt.is_set():
                text = str(err).strip().splitlines()[0] if str(err).strip() else ""
                self.fail(f"{kind.__name__}: {text}" if text else kind.__name__)
            previous(kind, err, trace)

        sys.excepthook = tell_peers

    def exit(self, problem: str) -> None:
        """Leave now: the main thread may be blocked in a collective that cannot finish."""
        print(f"jaxsel: error: process {self.me}: {problem}; exiting instead of waiting on "
              f"collectives that cannot complete", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(EXIT_PEER_LOST)

    def wait_for_problem(self, timeout: float) -> str | None:
        """After an error in the main thread: is a peer lost? (checks for up to `timeout` s)."""
        deadline = time.monotonic() + timeout
        while True:
            problem = self.check()
            if problem or time.monotonic() >= deadline:
                return problem
            time.sleep(self.interval)


def leave_after_error(dog: Watchdog, err: BaseException, prefix: str) -> None:
    """Handle an exception that ends this process's part of a multi-host run.

    Decisions every process takes at the same step (a stop signal, a non-finite loss)
    return normally so jax's shutdown barrier can see everybody. Anything else may leave
    the peers blocked in a collective: tell them (`fail`), name a lost peer if that is the
    cause (a runtime error in a collective usually is), and exit at once."""
    from .faults import NonFiniteError, TrainingInterrupted

    if isinstance(err, (TrainingInterrupted, NonFiniteError)):
        dog.finish()
        return
    if isinstance(err, SettingsMismatch):   # every process found it: none is to blame
        dog.finish()
        print(f"{prefix}: error: process {dog.me}: {err}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        try:   # leave together: process 0 hosts the coordination service, and a peer whose
            jax.distributed.shutdown()   # service vanishes first is aborted (SIGABRT)
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
        os._exit(2)
    problem = None
    if isinstance(err, jax.errors.JaxRuntimeError):
        problem = dog.wait_for_problem(dog.peer_timeout + 3 * dog.interval)
    text = problem or (str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__)
    dog.fail(text)
    if isinstance(err, KeyboardInterrupt):
        code = 130
    elif isinstance(err, ValueError) and problem is None:
        code = 2
    else:
        code = EXIT_PEER_LOST
    print(f"{prefix}: error: process {dog.me}: {text}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)
