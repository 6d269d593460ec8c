"""`jaxsel datasets` (what is known and what is prepared locally) and `jaxsel prepare`
(a dataset written into the data dir from the user's own files, no TensorFlow)."""
from __future__ import annotations


def add_parsers(sub) -> None:
    p = sub.add_parser("datasets", help="list known datasets and which are prepared locally")
    p.add_argument("--data-dir", default=None, help="TFDS data dir (default ~/.cache/jaxsel/tfds)")
    p.add_argument("-v", "--verbose", action="store_true", help="also describe each dataset")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("prepare", help="write a dataset into the data dir from local files (no TensorFlow)")
    p.add_argument("name", help="dataset: cifar10, cifar100, mnist, fashion_mnist, imagenet2012, cars196, "
                                "or an embedded one (digits, mnist1d)")
    p.add_argument("--from", dest="source", default=None, metavar="PATH",
                   help="the files you have: a CIFAR python tarball, a folder of MNIST IDX files, "
                        "or an image folder (SPLIT/CLASS/*.jpg)")
    p.add_argument("--data-dir", default=None, help="TFDS data dir (default ~/.cache/jaxsel/tfds)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_prepare)


def cmd_datasets(args) -> int:
    """List every known dataset and whether it is ready in the data dir."""
    from ..data.sources import KNOWN, resolve_data_dir, status

    root = resolve_data_dir(args.data_dir)
    print(f"data dir: {root}")
    print(f"{'name':<14} {'kind':<13} {'TFDS name':<13} status")
    for name, spec in sorted(KNOWN.items(), key=lambda kv: (kv[1].builder is None, kv[0])):
        line = f"{name:<14} {spec.kind:<13} {spec.source_name:<13} {status(name, root)}"
        print(line + (f"\n{'':<42}{spec.description}" if args.verbose and spec.description else ""))
    from ..data.prepare import SOURCES

    print("\n`jaxsel prepare NAME --from PATH` needs no TensorFlow; PATH is:")
    for name, what in SOURCES.items():
        print(f"  {name:<14} {what}")
    return 0


def cmd_prepare(args) -> int:
    """Prepare a dataset in the data dir: a real one from the user's files (no TensorFlow,
    no network), an embedded one offline; safe to run in several processes at once."""
    from ..data.prepare import prepare

    prepare(args.name, args.source, args.data_dir, progress=not args.no_progress)
    return 0
