"""`jaxsel bench`: step overheads side by side (analysis/bench.py): a table on stdout, JSON to --json."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..compat.packing_names import OLD_PACKED_COUNT_FLAGS, OLD_PACKING_FLAGS, old_flag_note
from ..core.checks import INT32_MAX
from ..core.choices import PACKING_LOOPS
from .common import UsageError, ensure_writable, start_jax, user_input


class OldBenchFlag(argparse.Action):
    """A flag of the last release, hidden: sets its dest as the new flag does, with one
    note naming the new form (`compat/packing_names.py`, issue 59: one name per concept)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"jaxsel: note: {old_flag_note(option_string, values)}", file=sys.stderr, flush=True)
        setattr(namespace, self.dest, values)


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="step overheads: SelSync vs local/BSP, BSP vs hand-written, async dispatch")
    p.add_argument("--model", default="mlp", help="model of jaxsel.models fed random data (mlp, cnn, resnet18, ...)")
    p.add_argument("--replicas", type=int, default=None,
                   help="model replicas (default: one per device of the platform, the accelerator's if any)")
    p.add_argument("--platform", default=None, help="this platform's devices (default: the accelerator if any)")
    p.add_argument("--devices", type=int, default=None, help="use the first N devices; replicas are packed on them")
    p.add_argument("--batch", type=int, default=None, help="examples per replica (default: the size's)")
    p.add_argument("--repeats", type=int, default=None, help="timed steps per variant (medians)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per variant first")
    p.add_argument("--size", choices=("default", "tiny"), default="default", help="defaults of the above")
    p.add_argument("--input-shape", default=None, metavar="HxWxC", help="e.g. 32x32x3 (default: the size's)")
    p.add_argument("--log-every", type=int, default=None, help="metric reads of the lazy dispatch loop (100)")
    p.add_argument("--dispatch-steps", type=int, default=None, help="steps per async-dispatch loop")
    p.add_argument("--dtype", default="fp32",
                   help="fp32, or bf16: bf16 compute, fp32 params (jaxsel.analysis.precision)")
    p.add_argument("--packed-replicas", type=int, default=8, metavar="N",
                   help="replicas of the packed row, all packed on one device (0: no packed row)")
    p.add_argument(*OLD_PACKED_COUNT_FLAGS, dest="packed_replicas", type=int, action=OldBenchFlag,
                   help=argparse.SUPPRESS)
    p.add_argument("--hlo", action="store_true", help="also count each variant's compiled fusions and ops")
    p.add_argument("--hlo-only", action="store_true",
                   help="only compile each variant and count its fusions and ops (no timing)")
    p.add_argument("--variants", default=None, metavar="NAMES",
                   help="comma-separated variants to run (default all): selsync_local, local, selsync_sync, bsp, "
                        "bsp_norm, user_bsp, user_selsync, minimal, selsync_local_packed, local_packed")
    p.add_argument("--packing", default="auto", metavar="LOOP",
                   help=f"how jaxsel's steps loop over a device's replicas: {', '.join(PACKING_LOOPS)} "
                        "(vmap: a GPU's path for one replica per device, on any platform)")
    p.add_argument(*OLD_PACKING_FLAGS, dest="packing", action=OldBenchFlag, help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, metavar="PATH", help="also write the result as JSON")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    """Step overheads side by side: table on stdout, JSON to --json."""
    shape = input_shape(args.input_shape)
    start_jax(args.replicas or 1)
    from ..analysis.bench import TARGET, hlo_report, missed_targets, run_bench

    variants = [v.strip() for v in args.variants.split(",") if v.strip()] if args.variants else None
    if args.hlo_only:
        with user_input():
            print(hlo_report(args.model, variants, size=args.size, replicas=args.replicas, devices=args.devices,
                             platform=args.platform, dtype=args.dtype, packing=args.packing,
                             packed_replicas=args.packed_replicas, batch=args.batch, input_shape=shape))
        return 0
    if args.json:
        ensure_writable(str(Path(args.json).parent or "."), "--json")
    with user_input():
        result = run_bench(args.model, args.replicas, args.batch, args.repeats, args.warmup, args.json,
                           size=args.size, input_shape=shape, log_every=args.log_every,
                           dispatch_steps=args.dispatch_steps, devices=args.devices, platform=args.platform,
                           dtype=args.dtype, packed_replicas=args.packed_replicas, hlo=args.hlo, packing=args.packing,
                           variants=variants)
    missed = missed_targets(result)
    print(f"\ntargets: overhead ratios <= {TARGET}; {'all met' if not missed else 'missed: ' + ', '.join(missed)}")
    if args.json:
        print(f"wrote {args.json}")
    return 0


def input_shape(text: str | None) -> tuple[int, ...] | None:
    """`--input-shape HxWxC` (or any number of dimensions), each an integer >= 1."""
    if text is None:
        return None
    try:
        shape = tuple(int(d) for d in text.split("x"))
    except ValueError:
        shape = ()
    if not shape or not all(1 <= d <= INT32_MAX for d in shape):
        raise UsageError(f"--input-shape {text!r}: each dimension must be an integer >= 1 (and <= {INT32_MAX}), "
                         f"written HxWxC, e.g. 32x32x3")
    return shape
