"""A long job's record: what `jaxsel compare` or `jaxsel frontier` was asked to do in its
directory, and with which code, so that `--resume` continues exactly that job and
`jaxsel report` can make its tables again.

job.json is written once, when the job starts in an empty directory: its kind, its
settings (the task's TrainConfig less where and how it is shown, and the command's own
options), the code (`code_identity`: a SHA-256 of jaxsel's sources, the git commit when
there is one, the JAX version) and the command line. `--resume` refuses a directory whose
job is of another kind, ran other code or other settings, naming the first difference:
cells from different code or settings are never mixed in one table. Without `--resume` a
directory that holds a job (or its runs) is refused: nothing is overwritten.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import hmac
import json
import os
import secrets
import shlex
import shutil
import sys
from pathlib import Path

from ..training.config import PROCESS_LOCAL, ConfigError
from ..training.rundir import CACHE_DIR, CACHE_SEAL, JOB_FILE
from ..training.rundir.links import refuse_links
from ..training.rundir.records import Found, Record, read_record, read_text
from ..training.rundir.write import jsonable, write_record, write_text

#: a run's settings that change neither its trajectory nor its figures: where and how it
#: is shown (multi-host runs may set them per process for the same reason)
NOT_SETTINGS = PROCESS_LOCAL


def settings_of(cfg) -> dict:
    """A TrainConfig's settings as JSON values (tuples as lists), less `NOT_SETTINGS`."""
    values = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in NOT_SETTINGS}
    return json.loads(json.dumps(jsonable(values), sort_keys=True))


@functools.cache
def code_identity() -> dict:
    """The code a job runs: a SHA-256 over jaxsel's own sources (every .py file, by path),
    which a dirty checkout or an installed wheel has too; the git commit where there is
    one; the JAX and jaxlib versions, which decide the numbers as much."""
    from ..training.environment import git_commit, version

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    git = git_commit() or {}
    return {"sources": h.hexdigest(), "commit": git.get("commit"), "dirty": git.get("dirty"),
            "jax": version("jax"), "jaxlib": version("jaxlib")}


#: what makes two runs' numbers comparable: the same sources and the same JAX
CODE_KEYS = ("sources", "jax", "jaxlib")


def same_code(recorded: dict, current: dict) -> bool:
    return all(recorded.get(k) == current.get(k) for k in CODE_KEYS)


def describe_code(code: dict) -> str:
    """"commit 1a2b3c4d, sources 5e6f7a8b9c0d, jax 0.10.2"."""
    commit = code.get("commit")
    where = f"commit {commit[:8]}{' with uncommitted changes' if code.get('dirty') else ''}" if commit else "no git"
    return f"{where}, sources {str(code.get('sources'))[:12]}, jax {code.get('jax')}"


def first_difference(recorded, current, where: str = "") -> str | None:
    """"steps=40 where this has steps=30" for the first setting that differs, else None."""
    if isinstance(recorded, dict) and isinstance(current, dict):
        for key in sorted(set(recorded) | set(current)):
            diff = first_difference(recorded.get(key), current.get(key), f"{where}.{key}" if where else key)
            if diff is not None:
                return diff
        return None
    if recorded != current:
        return f"{where}={json.dumps(recorded)} where this has {where}={json.dumps(current)}"
    return None


def read_json(path: Path, remedy: str) -> Record:
    """A job's or a cell's JSON record as the home reads it: a value, or missing; one that is
    not JSON is a ConfigError saying `remedy`, one the OS cannot read its OSError."""
    read = read_record(path, object)
    if read.found is Found.UNREADABLE:
        raise read.error
    if read.found in (Found.NOT_TEXT, Found.NOT_JSON):
        raise ConfigError(f"{path} is not valid JSON ({read.error}); {remedy}")
    return read


def read_job(out: Path) -> dict | None:
    path = out / JOB_FILE
    read = read_json(path, "it cannot be resumed or reported")
    if not read.ok:
        return None
    job = read.value
    if not isinstance(job, dict) or not {"kind", "settings", "code"} <= set(job):
        raise ConfigError(f"{path} is not a job record (kind, settings, code); it cannot be resumed or reported")
    return job


#: what a job's directory is called in messages
NOUNS = {"compare": "comparison", "frontier": "frontier", "calibrate": "calibration"}


def check_start(out: Path, kind: str, *, resume: bool, held: list[str]) -> dict | None:
    """Whether a `kind` job may start (or, with `resume`, continue) in `out`: the recorded
    job when resuming (its settings are checked by `begin`), None for a fresh start.
    `held`: what of a job's results and runs `out` holds already, which a fresh start
    refuses. Creates nothing."""
    refuse_links(out, f"{kind} directory")   # its runs' files are its own (rundir/links.py)
    recorded = read_job(out)
    if resume:
        if recorded is None:
            raise ConfigError(f"--resume: {str(out)!r} holds no {kind} job to continue (no {JOB_FILE}"
                              f"{'; its runs were made by a jaxsel without resumable jobs' if held else ''}); "
                              f"start it without --resume")
        return recorded
    found = ([JOB_FILE] if recorded is not None else []) + held
    if found:
        raise ConfigError(f"{kind} directory {str(out)!r} already holds a {NOUNS.get(kind, kind)} ({found[0]}"
                          f"{f' and {len(found) - 1} more' if len(found) > 1 else ''}); continue it with "
                          f"--resume, or choose another --out")
    return None


def begin(out: Path, kind: str, settings: dict, *, resume: bool, held: list[str]) -> None:
    """Start the job in `out` (locked by the caller): record it, or, with `resume`, check
    that `out` holds this very job (`check_job`)."""
    settings = json.loads(json.dumps(jsonable(settings), sort_keys=True))
    recorded = check_start(out, kind, resume=resume, held=held)
    if recorded is None:
        write_record(out / JOB_FILE, {"kind": kind, "settings": settings, "code": code_identity(),
                                    "command": shlex.join(sys.argv)})
    else:
        check_job(recorded, out, kind, settings)


def check_job(job: dict, out: Path, kind: str, settings: dict) -> None:
    """The job recorded in `out` is `kind` with `settings`, run by this code."""
    if job["kind"] != kind:
        raise ConfigError(f"{str(out)!r} holds a {job['kind']} job, not a {kind} one; resume it with "
                          f"`jaxsel {job['kind']} --resume`, or choose another --out")
    if not same_code(job["code"], code_identity()):
        raise ConfigError(f"{str(out)!r} was started by other jaxsel code ({describe_code(job['code'])}) than this "
                          f"one ({describe_code(code_identity())}); its cells would not be comparable with new "
                          f"ones: finish it with that code, or start afresh in another --out")
    diff = first_difference(job["settings"], settings)
    if diff is not None:
        raise ConfigError(f"{str(out)!r} holds a {kind} job started with {diff}; resume with its settings (it was "
                          f"started as: {job.get('command', '?')}), or choose another --out")


@contextlib.contextmanager
def kept_compilations(out: str | Path):
    """`seed_grid.reuse_compilations` in OUT/.xla-cache: a resumed job loads the programs
    the stopped one compiled. Removed once the job has finished (nothing reads it then);
    a cache the user set (JAX_COMPILATION_CACHE_DIR) is used instead and left alone. The
    cache holds native code that this process would run, so only a cache this user made
    on this machine is loaded (`trusted_cache`)."""
    import jax

    from .seed_grid import reuse_compilations

    folder = Path(out) / CACHE_DIR
    if not jax.config.jax_compilation_cache_dir:
        trusted_cache(folder)
    with reuse_compilations(folder):
        yield
    shutil.rmtree(folder, ignore_errors=True)


def trusted_cache(folder: Path) -> None:
    """Leave in `folder` only a compilation cache this user made on this machine: a job
    directory handed over by someone else (copied from another machine, or another user's)
    may hold compiled code that is not what its programs compile to, and loading it runs it.
    A cache is sealed with an HMAC under a key only this user can read (`_seal_key`, kept
    beside jaxsel's other caches); one without a valid seal is removed, in one line, and
    compiled again."""
    seal = folder / CACHE_SEAL
    key = _seal_key()
    expected = hmac.new(key, b"jaxsel job compilation cache", hashlib.sha256).hexdigest() if key else None
    if folder.exists():
        recorded = read_text(seal)
        found = recorded.value.strip() if recorded.ok else None
        if expected is not None and found is not None and hmac.compare_digest(found, expected):
            return
        shutil.rmtree(folder, ignore_errors=True)
        print(f"jaxsel: {folder} was not made by this user on this machine (or cannot be checked): its compiled "
              f"programs are not loaded, they are compiled again", file=sys.stderr, flush=True)
    if expected is not None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_text(seal, expected)
        except OSError:
            pass   # an unwritable job directory: the job reports that itself


def _seal_key() -> bytes | None:
    """This user's key for sealing compilation caches: 32 random bytes in jaxsel's cache
    folder, readable by this user only, made on first use (None where it cannot be)."""
    from ..core.packing import cache_dir

    path = cache_dir().parent / "compilation-seal.key"
    try:
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        key = path.read_bytes()
    except FileExistsError:   # made by another process just now
        key = path.read_bytes()
    except OSError:
        return None
    return key if len(key) == 32 else None
