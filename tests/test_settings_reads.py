"""Who reads a run's settings through the whole record (issue 59: at most 8 modules).

The count is the issue's AST count: `cfg.SECTION.FIELD` (a section reached from a whole
TrainConfig held as `cfg`, `config`, `base` or `c`) and flat `cfg.FIELD` reads. The
modules that keep the record are where a run is defined, planned, assembled and trained,
and where a job makes each cell's settings; every other module is handed the sections or
values it needs, so a new reader here is a choice this test makes someone write down.
"""
import ast
import dataclasses
from pathlib import Path

import jaxsel
from jaxsel.training.config import SectionView, TrainConfig

#: the modules that read settings through the whole record, and why they hold it
OWNERS = {
    "training/config.py": "defines the record",
    "training/plan.py": "composes the run",
    "training/run.py": "assembles it",
    "training/train.py": "the loop (and what it hands the run log)",
    "training/cell_batch.py": "the loop of a batch of cells (issue 62)",
    "analysis/cells.py": "a job's cells, each with its own settings",
    "analysis/compare.py": "varies the settings per cell",
    "analysis/frontier.py": "varies the settings per cell",
}
HOLDERS = ("cfg", "config", "base", "c")


FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}
SECTIONS = {n for n, v in vars(TrainConfig).items() if isinstance(v, SectionView)}


def reads_in(source: str) -> set[str]:
    """The reads through the whole record that `source` makes, as written."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        held = node.value
        if isinstance(held, ast.Attribute):
            found = ((held.attr in SECTIONS and getattr(held.value, "id", None) in HOLDERS)
                     or (node.attr in FIELDS and held.attr in ("cfg", "config")))
        else:
            found = node.attr in FIELDS and getattr(held, "id", None) in HOLDERS
        if found:
            out.add(ast.unparse(node))
    return out


def test_settings_are_read_through_the_whole_record_only_by_its_owners():
    root = Path(jaxsel.__file__).parent
    found = {str(p.relative_to(root)): reads_in(p.read_text()) for p in sorted(root.rglob("*.py"))}
    others = {module: sorted(reads)[:3] for module, reads in found.items() if reads and module not in OWNERS}
    assert not others, f"modules reading settings through the whole record: {others}; hand them sections or values"
    assert len(OWNERS) <= 8


def test_the_count_sees_a_read_through_the_record_not_a_section_handed_over():
    source = "def f(cfg, optim, run):\n    return cfg.optim.lr + optim.lr + cfg.lr + run.cfg.seed + run.optim.seed\n"
    assert reads_in(source) == {"cfg.optim.lr", "cfg.lr", "run.cfg.seed"}
