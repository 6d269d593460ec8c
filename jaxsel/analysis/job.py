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
from ..training.rundir.job_files import JOB, read_job_file, write_job_file
from ..training.rundir.records import read_record
from ..training.rundir.write import jsonable, write_record

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


def read_job(out: Path) -> dict | None:
    return read_job_file(out, JOB, "it cannot be resumed or reported")


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
        write_job_file(out, JOB, {"kind": kind, "settings": settings, "code": code_identity(),
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
def kept_compilations(out: str | Path, shard=None):
    """`seed_grid.reuse_compilations` in OUT/.xla-cache: a resumed job loads the programs
    the stopped one compiled. Removed once the job has finished (nothing reads it then);
    a cache the user set (JAX_COMPILATION_CACHE_DIR) is used instead and left alone. The
    cache holds native code that this process would run, so only entries this user sealed
    on this machine are loaded (`trusted_cache`); a job that stops seals what it compiled
    (`seal_cache`; one killed with SIGKILL seals nothing, and its resume compiles again).
    A `shard` (shard.py) keeps its own folder in it: shards that share the job directory
    neither remove nor unseal each other's programs."""
    import jax

    from .seed_grid import reuse_compilations

    folder = Path(out) / CACHE_DIR
    if shard is not None:
        folder = folder / f"shard-{shard.index}-of-{shard.count}"
    own = not jax.config.jax_compilation_cache_dir
    if own:
        trusted_cache(folder)
    try:
        with reuse_compilations(folder):
            yield
    except BaseException:
        if own:
            seal_cache(folder)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):   # the job's folder, once no shard's is left in it
        (Path(out) / CACHE_DIR).rmdir()


#: JAX's record of an entry's last use, rewritten on every read: no code, never loaded as one
ACCESS_TIMES = "-atime"


def _entries(folder: Path) -> list[Path]:
    """The files of a compilation cache that a seal covers (all but the seal and access times)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != CACHE_SEAL
                  and not p.name.endswith(ACCESS_TIMES))


def _entry_mac(key: bytes, folder: Path, entry: Path) -> str:
    """HMAC-SHA256 over the entry's name (its path in the cache, the program's key) and its bytes."""
    name = entry.relative_to(folder).as_posix().encode()
    return hmac.new(key, name + b"\0" + entry.read_bytes(), hashlib.sha256).hexdigest()


def seal_cache(folder: Path) -> None:
    """Record in `folder`'s seal an HMAC of each entry's name and bytes, under this user's key
    (`_seal_key`), so that the resume loads these very entries and no other."""
    key = _seal_key()
    if key is None or not folder.is_dir():
        return
    try:
        write_record(folder / CACHE_SEAL, {"entries": {e.relative_to(folder).as_posix(): _entry_mac(key, folder, e)
                                                       for e in _entries(folder)}})
    except OSError:
        pass   # an unwritable job directory: the resume compiles again


def trusted_cache(folder: Path) -> None:
    """Leave in `folder` only the compiled programs this user sealed on this machine: a job
    directory handed over by someone else (copied from another machine, or another user's)
    may hold compiled code that is not what its programs compile to, and loading it runs it.
    Each entry is sealed by an HMAC of its name and bytes under a key only this user can
    read (`seal_cache`), so an entry planted, edited or swapped with another's name fails its
    seal; every entry that fails is removed, in one line, and compiled again."""
    if not folder.is_dir():
        return
    key = _seal_key()
    sealed = _sealed_entries(folder / CACHE_SEAL) if key is not None else {}
    foreign = [e for e in _entries(folder) if key is None
               or not hmac.compare_digest(sealed.get(e.relative_to(folder).as_posix(), ""), _entry_mac(key, folder, e))]
    for entry in foreign:
        entry.unlink()
    if foreign:
        print(f"jaxsel: {len(foreign)} compiled program(s) in {folder} were not sealed by this user on this machine "
              f"(or cannot be checked): they are not loaded, they are compiled again", file=sys.stderr, flush=True)


def _sealed_entries(seal: Path) -> dict[str, str]:
    """The entries' HMACs a seal records ({} where it is missing or not a seal)."""
    read = read_record(seal, dict)
    entries = read.value.get("entries") if read.ok else None
    ok = isinstance(entries, dict) and all(isinstance(v, str) for v in entries.values())
    return entries if ok else {}


#: the seal key's permissions: this user's alone
KEY_MODE = 0o600


def _seal_key() -> bytes | None:
    """This user's key for sealing compilation caches: 32 random bytes in jaxsel's cache
    folder, made on first use, owned by this user and readable by no one else: a key file
    of another owner or that others may read or write is not used (said in one line), and
    no cache is sealed or loaded with it. None where there is none."""
    from ..core.packing import cache_dir

    path = cache_dir().parent / "compilation-seal.key"
    try:
        if not os.path.lexists(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, KEY_MODE)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
    except FileExistsError:   # made by another process just now
        pass
    except OSError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info, key = os.fstat(f.fileno()), f.read()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        print(f"jaxsel: {path} (the compilation caches' seal key) is {oct(info.st_mode & 0o777)} and owned by uid "
              f"{info.st_uid}: it must be this user's (uid {os.getuid()}) and {oct(KEY_MODE)}; compiled programs are "
              f"neither sealed nor loaded until it is (chmod {oct(KEY_MODE)[2:]} it, or remove it to make a new "
              f"one)", file=sys.stderr, flush=True)
        return None
    return key if len(key) == 32 else None
