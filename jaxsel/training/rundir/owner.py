"""Which run directory owns a checkpoint folder, and the fork of a copied run directory.

A run directory records where its checkpoints are (config.json's `checkpoint_root`), so a
copy of it (`cp -r a b`) records a's folder too. Resuming the copy there would continue
from a's state and then write into a's folder, and `--keep` would delete a's newest steps:
two runs silently sharing one history. So each checkpoint folder names its owner, the run
directory (resolved) that wrote it, in `OWNER_FILE`, and a resumed run directory whose
recorded folder is owned, and still recorded, by another run directory *forks*: the
checkpoints are copied into a folder of the run's own, beside the original (`fork_root`),
and the run continues there from the newest that reads back intact. A folder whose owner
no longer records it (the run directory was moved, or the folder is itself a copy) is
nobody else's: the run claims it.
The original folder and run directory are only read. Forking, rather than refusing, is
what the user of `cp -r a b; jaxsel train --out b --resume` asked for: b continues from
a's newest state, a can still be resumed from its own. A folder named explicitly with
`--checkpoint-dir` that belongs to another run directory is refused instead
(`foreign_owner`): jaxsel cannot fork into a folder the user chose.

Folders written before owners were recorded carry their owner's path in their name's
hash (checkpoints/<run>-<sha8>, `config.default_checkpoint_name`), which identifies it.

A path is not an identity: after `mv r8 r8old`, a new run directory `r8` has r8old's path
(and its default folder's name). So a run directory also records a random identity of its
own (config.json's `run_id`, kept by every resume, `run_id_of`), and the owner file records
it beside the path: a folder owned by this very path but by another identity, that holds
checkpoints, belongs to the run directory that was here before (moved or replaced), and
the new one neither continues nor prunes it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import uuid
from pathlib import Path

from ...data.paths import WRITE_PROBES
from ..checkpoint import existing_steps
from ..config import TrainConfig, default_checkpoint_name
from .names import CONFIG_FILE, LOCK_NAME, OWNER_FILE
from .records import read_record
from .write import write_text
#: checkpoints/<run dir name>-<8 hex digits of its resolved path>: jaxsel's own naming
DEFAULT_NAME = re.compile(r".+-[0-9a-f]{8}")


def resolved(run_dir: str | os.PathLike) -> str:
    return str(Path(run_dir).expanduser().resolve())


def owner_of(root: str | os.PathLike) -> str | None:
    """The run directory recorded as the owner of checkpoint folder `root` (None if none)."""
    owner = _owner_record(root).get("run_dir")
    return owner if isinstance(owner, str) else None


def _owner_record(root: str | os.PathLike) -> dict:
    """The owner file's record; {} where there is none or it is not a whole JSON object."""
    return _recorded(Path(root) / OWNER_FILE)


def _recorded(path: Path) -> dict:
    record = read_record(path, dict)
    return record.value if record.ok else {}


def run_id_of(run_dir: str | os.PathLike | None) -> str | None:
    """The identity run directory `run_dir` records (config.json's `run_id`), None if none."""
    recorded = _recorded(Path(run_dir) / CONFIG_FILE).get("run_id") if run_dir else None
    return recorded if isinstance(recorded, str) else None


def new_run_id() -> str:
    return uuid.uuid4().hex


def foreign_owner(root: str | os.PathLike, run_dir: str | os.PathLike | None) -> str | None:
    """Which other run directory uses `root`, as a phrase ("run directory '/x/a'", "another
    run directory" when only the folder's default name says so, "the run directory that was
    at '/x/r8' before ..." when this path's earlier run owns it), or None when `run_dir` may
    use it: it owns it, nobody does, the run has no run directory, or the recorded owner no
    longer records `root` as its checkpoints (it was moved away, or `root` is a copy of its
    folder: then the folder is nobody else's, and this run claims it)."""
    if run_dir is None or not Path(root).is_dir():
        return None
    owner, identity = owner_of(root), _owner_record(root).get("run_id")
    if owner is not None and owner == resolved(run_dir) and identity is not None \
            and identity != run_id_of(run_dir) and existing_steps(root):
        return (f"the run directory that was at {owner!r} before (moved or replaced since; its config.json "
                f"records this folder)")
    if owner is not None:
        return f"run directory {owner!r}" if owner != resolved(run_dir) and records(owner, root) else None
    name = Path(root).name
    if DEFAULT_NAME.fullmatch(name) and name != default_checkpoint_name(TrainConfig(out_dir=str(run_dir))):
        return "another run directory"   # a folder of jaxsel's naming, named for another path
    return None


#: what jaxsel (and Orbax for it) writes into a checkpoint folder besides step folders: its
#: lock and owner files, the owner file's temporary, a fork's half copy, a step set aside as
#: corrupt, a save's temporary folder, and the probe of a process checking it can write there
#: (process 0 of a multi-host run probes while the others check the folder: one of them
#: refused the run, and the rest waited at its start)
OWN_NAMES = re.compile(rf"{re.escape(LOCK_NAME)}|{re.escape(OWNER_FILE)}(\.\d+\.tmp)?|\.fork-\d+-\d+"
                       rf"|corrupt-\d+-[\d-]+|\d+\.orbax-checkpoint-tmp.*|{WRITE_PROBES}")
#: what a step folder of jaxsel's holds (any one of them; an empty one is a save cut short)
STEP_PARTS = frozenset({"meta", "state", "_CHECKPOINT_METADATA", "commit_success.txt"})


def not_jaxsels(root: str | os.PathLike) -> list[str]:
    """The entries of folder `root` that jaxsel did not write there, when no owner file says
    the folder is jaxsel's ([] for a folder that is missing, empty, owned, or holds only
    checkpoints: one of a jaxsel from before owner files): a user's folder named as a
    checkpoint folder (config.json edited, a --checkpoint-dir typo) gets nothing written."""
    root = Path(root)
    if not root.is_dir() or (root / OWNER_FILE).is_file():
        return []
    return sorted(p.name for p in root.iterdir() if not _jaxsels(p))


def _jaxsels(entry: Path) -> bool:
    if entry.name.isdigit() and entry.is_dir() and not entry.is_symlink():
        parts = {p.name for p in entry.iterdir()}
        return not parts or bool(parts & STEP_PARTS)
    return OWN_NAMES.fullmatch(entry.name) is not None


def records(run_dir: str | os.PathLike, root: str | os.PathLike) -> bool:
    """Whether run directory `run_dir`'s config.json records `root` as its checkpoint folder."""
    recorded = _recorded(Path(run_dir) / CONFIG_FILE).get("checkpoint_root")
    return isinstance(recorded, str) and resolved(recorded) == resolved(root)


def claim(root: str | os.PathLike, run_dir: str | os.PathLike, run_id: str | None = None) -> None:
    """Record `run_dir` (identity `run_id`, which its config.json records) as the owner of
    checkpoint folder `root` (the run holds its lock)."""
    path = Path(root) / OWNER_FILE
    text = json.dumps({"run_dir": resolved(run_dir), **({"run_id": run_id} if run_id else {})})
    if path.is_file() and path.read_text() == text:
        return
    write_text(path, text, temporary=f"{OWNER_FILE}.{os.getpid()}.tmp")   # a reader sees the old owner or the new one


def fork_root(source: Path, fresh_name: str) -> Path:
    """The folder of a copied run directory's own checkpoints: beside the original's, under
    `fresh_name`, the name a fresh run in that directory would get
    (`config.default_checkpoint_name`)."""
    return source.parent / fresh_name


def fork_source(resume: bool, out_dir: str | None, recorded: str | None) -> Path | None:
    """The checkpoint folder a resumed run directory (`out_dir`, when `resume`) must fork
    from: the one its config.json records (`recorded`), when another run directory owns it."""
    if not (resume and out_dir and recorded):
        return None
    return Path(recorded) if foreign_owner(recorded, out_dir) is not None else None


#: a step being copied by `fork`: .fork-<step>-<pid> (a rename makes it a checkpoint)
PARTIAL = re.compile(r"\.fork-\d+-(\d+)")


def fork(source: Path, target: Path, run_dir: str) -> None:
    """Copy `source`'s checkpoints into `target` (empty of checkpoints; the caller holds its
    lock), each through a temporary name so that an interrupted copy is never a checkpoint;
    say so in one line. `source` is only read. Every step is copied, not only the newest:
    the resume verifies them newest first (checkpoint.py) and falls back past one that is
    unreadable or corrupt, as a resume of the original does, so a fork of a folder whose
    newest checkpoint is damaged continues from the newest good one. The copies of a fork
    killed mid-copy (SIGKILL: no handler ran) are removed first."""
    clear_partial_forks(target)
    if existing_steps(target):
        return   # forked already (a resume of the copy that stopped before it wrote its config)
    steps = existing_steps(source)
    if not steps:
        return
    partial = {step: target / f".fork-{step}-{os.getpid()}" for step in steps}
    try:
        for step in steps:
            shutil.copytree(source / str(step), partial[step])
    except BaseException:   # a full disk, a signal: no half copy left behind
        for path in partial.values():
            shutil.rmtree(path, ignore_errors=True)
        raise
    for step in reversed(steps):   # all copied: the newest becomes a checkpoint first
        partial[step].rename(target / str(step))
    which = f"step {steps[0]}" if len(steps) == 1 else f"steps {', '.join(map(str, steps))}"
    print(f"jaxsel: run directory {run_dir!r} records the checkpoints of another run directory "
          f"({source}); forked its checkpoints ({which}) into {target}, and {source} is left as "
          f"it was", file=sys.stderr, flush=True)


def clear_partial_forks(target: Path) -> None:
    """Remove the half copies (`PARTIAL`) a killed fork left in `target` (the caller holds
    its lock, so no fork is copying there now)."""
    if not target.is_dir():
        return
    for path in target.iterdir():
        if PARTIAL.fullmatch(path.name):
            shutil.rmtree(path, ignore_errors=True)
