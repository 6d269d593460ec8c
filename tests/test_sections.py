"""A run's settings in typed sections (issue 59 item 1): each section is a frozen value with
its own check, every bad value one line naming it and what is allowed, and TrainConfig the
sections composed, read flat or by section."""
import dataclasses

import pytest

from jaxsel.training.config import TrainConfig, check_config
from jaxsel.training.declare import SECTIONS, section_of
from jaxsel.training.sections import (CHECK_ORDER, SECTION_TYPES, CheckpointSettings, ConfigError, DataSettings,
                                      EvalSettings, OptimSettings, ProjectSettings, ReplicaSettings, StrategySettings)

RUN = TrainConfig()

BAD = [  # section, field, bad value, what the one line must say
    (StrategySettings, "strategy", "selsinc", r"unknown strategy 'selsinc'; choose one of .*selsync"),
    (DataSettings, "dataset", "mnits", r"unknown dataset 'mnits'; choose one of .*digits"),
    (DataSettings, "partition", "iid", r"unknown partition 'iid'; choose one of .*seldp"),
    (DataSettings, "prefetch", -1, r"prefetch .*>= 0.*-1"),
    (DataSettings, "loader", "fork", r"loader must be one of .*got 'fork'"),
    (DataSettings, "dataset_options", {"seq_len": 8}, r"dataset 'digits' takes no option 'seq_len'"),
    (DataSettings, "partition_options", {"alpha": 0.5}, r"alpha"),
    (DataSettings, "data_dir", " ", r"data_dir \(--data-dir\) must be a non-empty path, got ' '"),
    (OptimSettings, "model", "mpl", r"unknown model 'mpl'; choose one of .*mlp"),
    (OptimSettings, "optimizer", "sdg", r"unknown optimizer 'sdg'; choose one of sgd"),
    (OptimSettings, "lr", 0.0, r"lr .*got 0.0"),
    (OptimSettings, "momentum", 1.0, r"momentum must be in \[0, 1\).*got 1.0"),
    (OptimSettings, "steps", 0, r"steps .*>= 1.*got 0"),
    (OptimSettings, "clip_at", "gradients", r"clip_at \(--clip-at\) gradients clips to clip_norm"),
    (OptimSettings, "lr_schedule", "cosine", r"cosine"),
    (ReplicaSettings, "replicas", 0, r"replicas .*>= 1.*got 0"),
    (ReplicaSettings, "faulty_replicas", 8, r"faulty_replicas .*<= 7.*got 8"),
    (ReplicaSettings, "packing", "scan", r"packing must be one of .*got 'scan'"),
    (ReplicaSettings, "platform", "", r"platform \(--platform\) must be a non-empty name"),
    (EvalSettings, "eval_every", 0, r"eval_every .*got 0"),
    (EvalSettings, "eval_replicas", "all", r"eval_replicas must be one of final, every, off, got 'all'"),
    (EvalSettings, "wandb_project", " ", r"wandb_project \(--wandb\) must be a W&B project name"),
    (CheckpointSettings, "keep", 0, r"keep .*got 0"),
    (CheckpointSettings, "nonfinite", "ignore", r"nonfinite must be one of .*got 'ignore'"),
    (ProjectSettings, "project_network", "56k", r"project_network \(--project network\): .*56k"),
    (ProjectSettings, "project_gpus_per_host", 3, r"--project gpus_per_host\) 3 must divide replicas 8"),
    (ProjectSettings, "project_stragglers", "slow", r"project_stragglers \(--project stragglers\)"),
]


@pytest.mark.parametrize("cls, name, value, says", BAD, ids=[f"{c.TABLE}.{n}" for c, n, _, _ in BAD])
def test_each_section_checks_its_own_values_in_one_line(cls, name, value, says):
    section = cls(**{name: value})
    with pytest.raises(ConfigError, match=says) as err:
        section.check(RUN)
    assert len(str(err.value).splitlines()) == 1
    with pytest.raises(ConfigError, match=says):   # the composed settings check it, once, in its section
        check_config(TrainConfig(**{name: value}))


@pytest.mark.parametrize("cls", SECTION_TYPES)
def test_the_default_sections_pass_their_checks(cls):
    cls().check(RUN)


def test_a_rule_across_sections_reads_the_other_section_of_the_run():
    """The partition's shards and the projected hosts are checked against the run's replicas."""
    ProjectSettings(project_gpus_per_host=3).check(TrainConfig(replicas=6))
    with pytest.raises(ConfigError, match="classes_per_replica"):
        DataSettings(partition="label_skew", partition_options={"classes_per_replica": 11}).check(TrainConfig())


def test_the_settings_are_their_sections_composed_in_the_sections_order():
    cfg = TrainConfig(lr=0.1, dataset="mnist1d", replicas=4, keep=2)
    assert cfg.optim == OptimSettings(lr=0.1) and cfg.data == DataSettings(dataset="mnist1d")
    assert cfg.placement == ReplicaSettings(replicas=4) and cfg.checkpoints == CheckpointSettings(keep=2)
    assert (cfg.method, cfg.evaluation, cfg.projection) == (StrategySettings(), EvalSettings(), ProjectSettings())
    assert TrainConfig.data is DataSettings
    owned = [f.name for cls in SECTION_TYPES for f in dataclasses.fields(cls)]
    assert [f.name for f in dataclasses.fields(TrainConfig)] == owned and len(set(owned)) == len(owned)
    assert [cls.TABLE for cls in SECTION_TYPES] == list(SECTIONS)
    assert set(CHECK_ORDER) == set(SECTION_TYPES) and CHECK_ORDER[0] is ReplicaSettings
    assert all(section_of(TrainConfig, f.name) == cls.TABLE for cls in SECTION_TYPES for f in dataclasses.fields(cls))


def test_settings_are_built_from_their_sections_each_kind_once():
    cfg = TrainConfig.of(DataSettings(dataset="mnist1d"), OptimSettings(lr=0.1))
    assert cfg == TrainConfig(dataset="mnist1d", lr=0.1) and cfg.placement == ReplicaSettings()
    assert TrainConfig.of() == TrainConfig()
    with pytest.raises(TypeError, match="OptimSettings given twice; give each section once"):
        TrainConfig.of(OptimSettings(), OptimSettings(lr=0.1))
    with pytest.raises(TypeError, match="is not a section of the settings"):
        TrainConfig.of(TrainConfig())


def test_the_settings_and_their_sections_are_frozen():
    cfg = TrainConfig()
    for value, name in ((cfg, "lr"), (cfg.optim, "lr"), (cfg.data, "dataset")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, 1)
    assert dataclasses.replace(cfg, lr=0.2).optim.lr == 0.2
