"""The run directory's home: what a run's, a comparison's or a job's directory and a
checkpoint folder hold, and who may use them.

- `names`: the one place that spells the files (constants, `RunDir(path)`);
- `lock`: the OS lock a training run holds on its run and checkpoint directories;
- `owner`: which run directory owns a checkpoint folder (and forking a copied run's);
- `claim`: claiming a new default run directory (runs/<what>-<time>, -2, -3, ...);
- `records`: the one reader of a run's records (`read_run`: what each file holds, or what is
  wrong with it; `jaxsel report` and a job's cells apply their own policies to the answer);
- `write`: the one writer of its JSON records (`write_record`: atomic);
- `job_files`: a long job's own files (job.json, derived_points.json, calibration.json,
  frontier.json, task.json, report.json), read strictly and written through one `JobFile` each;
- `metrics_file`: the one writer of metrics.jsonl (`MetricsFile`: appended, cut back on a resume);
- `links`: a run directory holds no symbolic links, and no file is written through one.

Why a package: the directory's names, its lock, its owner, its claiming, its writing and
its reading were spread over training/, data/paths.py and analysis/, each knowing part of
its layout. Only the names are re-exported here, so `from jaxsel.training.rundir
import X` stays as cheap as it was (no JAX, nothing else of jaxsel's); the others are
imported from their modules.
"""
from .names import (CACHE_DIR, CACHE_SEAL, CALIBRATION_FILE, CALIBRATION_PICTURE, CELL_FILE, CHECKPOINTS_DIR,
                    CONFIG_FILE, DERIVED_FILE, ENVIRONMENT_FILE, EVALS_FILE, FINAL_FILE, FRONTIER_FILE,
                    FRONTIER_PICTURE, FRONTIER_TABLE, JOB_FILE, LOCK_NAME, METRICS_FILE, OWNER_FILE, REPORT_FILE,
                    REPORT_PICTURE, RESULTS_FILE, RUN_FILES, RUN_RECORDS, STRATEGY_FILE, TASK_FILE, WANDB_ID_FILE,
                    RunDir, run_metrics_below)

__all__ = ["CACHE_DIR", "CACHE_SEAL", "CALIBRATION_FILE", "CALIBRATION_PICTURE", "CELL_FILE", "CHECKPOINTS_DIR",
           "CONFIG_FILE", "DERIVED_FILE", "ENVIRONMENT_FILE", "EVALS_FILE", "FINAL_FILE", "FRONTIER_FILE",
           "FRONTIER_PICTURE", "FRONTIER_TABLE", "JOB_FILE", "LOCK_NAME", "METRICS_FILE", "OWNER_FILE", "REPORT_FILE",
           "REPORT_PICTURE", "RESULTS_FILE", "RUN_FILES", "RUN_RECORDS", "STRATEGY_FILE", "TASK_FILE",
           "WANDB_ID_FILE", "RunDir", "run_metrics_below"]
