"""Who reads a run's settings through the whole record (issue 59: at most 8 modules).

The count is the issue's AST count: `cfg.SECTION.FIELD` (a section reached from a whole
TrainConfig held as `cfg`, `config`, `base` or `c`: such a holder may hand a section on),
flat `cfg.FIELD` reads, and any section reached from a record held by something else
(`run.config.optim.seed`, `plan.cfg.evaluation`: a finished run's or a plan's recorded
settings) or by a local name given such a record (`ran = run.config; ran.projection`). The
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


def is_record(node: ast.expr, aliases: set[str]) -> bool:
    """Whether `node` is a whole record: a holder's name, a local name given one, or
    something's `.cfg` / `.config` (a run's, a plan's, a cell's)."""
    if isinstance(node, ast.Name):
        return node.id in HOLDERS or node.id in aliases
    return isinstance(node, ast.Attribute) and node.attr in ("cfg", "config")


def record_aliases(tree: ast.AST) -> set[str]:
    """The local names a record is given from something's `.cfg` / `.config` (`ran = run.config`)."""
    return {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Attribute) and node.value.attr in ("cfg", "config")
            for target in node.targets if isinstance(target, ast.Name)}


def reads_in(source: str) -> set[str]:
    """The reads through the whole record that `source` makes, as written."""
    tree = ast.parse(source)
    aliases = record_aliases(tree)
    attributes = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    sections = [n for n in attributes if n.attr in SECTIONS and is_record(n.value, aliases)]
    fields = {n.value: n for n in attributes if n.value in sections}
    handed = [n for n in sections if n not in fields and getattr(n.value, "id", None) not in HOLDERS]
    flat = [n for n in attributes if n.attr in FIELDS and is_record(n.value, aliases)]
    return {ast.unparse(n) for n in (*fields.values(), *handed, *flat)}


def test_settings_are_read_through_the_whole_record_only_by_its_owners():
    root = Path(jaxsel.__file__).parent
    found = {str(p.relative_to(root)): reads_in(p.read_text()) for p in sorted(root.rglob("*.py"))}
    others = {module: sorted(reads)[:3] for module, reads in found.items() if reads and module not in OWNERS}
    assert not others, f"modules reading settings through the whole record: {others}; hand them sections or values"
    assert len(OWNERS) <= 8


def test_the_count_sees_a_read_through_the_record_not_a_section_handed_over():
    source = "def f(cfg, optim, run):\n    return cfg.optim.lr + optim.lr + cfg.lr + run.cfg.seed + run.optim.seed\n"
    assert reads_in(source) == {"cfg.optim.lr", "cfg.lr", "run.cfg.seed"}


def test_the_count_sees_a_finished_run_s_record_and_a_local_name_for_it():
    source = ("def f(run, plan, jax, optim):\n    ran = run.config\n    got = ran.projection\n"
              "    return run.config.optim.seed, plan.cfg.evaluation.out_dir, ran.placement.replicas, run.seed, "
              "run.method.strategy, jax.config.update, optim.seed, run.config.data\n")
    assert reads_in(source) == {"ran.projection", "run.config.optim.seed", "plan.cfg.evaluation.out_dir",
                                "ran.placement.replicas", "run.config.data"}
