"""`jaxsel report`: accuracy against measured and projected time for a run or a compare
directory (analysis/report.py); a compare or frontier directory's own tables and pictures
made again from its records (analysis/job_report.py)."""
from __future__ import annotations

from pathlib import Path

from .common import user_input


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="plot accuracy against measured and projected time of a run; remake a "
                                      "compare or frontier dir's tables and pictures from its records")
    p.add_argument("run_dir", help="a `jaxsel train` run dir, or a `jaxsel compare` or `jaxsel frontier` dir")
    p.add_argument("--networks", default="10gbe", help="comma-separated network presets to project onto")
    p.add_argument("--stragglers", default=None, metavar="SPEC", help="straggler model of the projections")
    p.add_argument("--compute-s", type=float, default=None, metavar="SECONDS",
                   help="per-step compute time (default: each run's measured step time)")
    p.add_argument("--gpus-per-host", type=int, default=1, metavar="K",
                   help="project onto hosts of K replicas, --networks between them (default 1: one network)")
    p.add_argument("--intra-network", default="nvlink", metavar="PRESET",
                   help="network inside a host with --gpus-per-host > 1 (nvlink, pcie, ...)")
    p.add_argument("--target", type=float, default=None, metavar="ACC",
                   help="also show each run's projected time to this test accuracy")
    p.add_argument("--out", default=None, help="picture path: a file (no suffix: .png), or a directory for "
                                                "DIR/report.png (default RUN_DIR/report.png)")
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    """Accuracy against measured and projected time for one run or a compare dir; a
    compare or frontier dir's own tables and pictures made again from its records."""
    from ..analysis.job_report import report_job
    from ..analysis.report import report

    with user_input():
        remade = report_job(Path(args.run_dir))
    if remade is not None:
        print(remade[1] + "\n")
        if remade[0] in ("frontier", "calibrate"):   # its runs are points or probes, not curves to overlay
            return 0
    with user_input():
        text = report(args.run_dir, networks=args.networks.split(","), stragglers=args.stragglers,
                      compute_s=args.compute_s, out=args.out, gpus_per_host=args.gpus_per_host,
                      intra_network=args.intra_network, target=args.target)
    print(text)
    return 0
