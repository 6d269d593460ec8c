"""Malformed files and settings are one line naming the file or value and what is allowed,
exit code 2, never a traceback (issue 35): truncated CIFAR tarballs, image folders without
images, IDX files with a cut header, a JAX platform this machine lacks, damaged run logs
for `report`, impossible `bench --input-shape`s."""
import gzip
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from test_prepare import write_cifar_tarball, write_idx, write_image

from jaxsel.cli import main as cli_main


def one_line(err: str, command: str | None) -> str:
    """The one error line of `jaxsel COMMAND` (None: an error found before the command is
    known, "jaxsel: error: ...")."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    prefix = f"jaxsel {command}: error: " if command else "jaxsel: error: "
    assert len(lines) == 1 and lines[0].startswith(prefix), err[-3000:]
    assert "Traceback" not in err and "bug in jaxsel" not in err
    return lines[0]


def plain_tar(gz, out):
    """The same members as the .tar.gz `gz`, uncompressed."""
    with tarfile.open(gz) as src, tarfile.open(out, "w") as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member))


def prepare_error(tmp_path, name: str, source) -> str:
    """`jaxsel prepare NAME --from SOURCE` into an existing data dir: its one error line (exit
    2); the data dir is left as it was (lock files aside)."""
    import contextlib
    import io

    data = tmp_path / "data"
    data.mkdir()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli_main(["prepare", name, "--from", str(source), "--data-dir", str(data), "--no-progress"])
    assert code == 2, err.getvalue()[-3000:]
    assert {p.relative_to(data).parts[0] for p in data.rglob("*")} <= {".jaxsel-locks"}
    said = [line for line in err.getvalue().splitlines() if not line.startswith("preparing ")]   # progress
    return one_line("\n".join(said), "prepare")


def tar_cut_points(path) -> dict[str, int]:
    """Byte offsets inside the data of the first member and of the last one."""
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    return {"tar-first": members[0].offset_data + members[0].size // 2,
            "tar-last": members[-1].offset_data + members[-1].size // 2}


@pytest.mark.parametrize("variant", ["gz-half", "gz-end", "tar-first", "tar-last"])
def test_a_truncated_cifar_tarball_is_one_line(variant, tmp_path):
    source = tmp_path / "cifar-10-python.tar.gz"
    write_cifar_tarball(source, per_batch=8)
    if variant.startswith("tar"):
        plain_tar(source, tmp_path / "cifar-10-python.tar")
        source = tmp_path / "cifar-10-python.tar"
        source.write_bytes(source.read_bytes()[:tar_cut_points(source)[variant]])
    else:
        raw = source.read_bytes()
        source.write_bytes(raw[:len(raw) // 2] if variant == "gz-half" else raw[:len(raw) * 9 // 10])
    line = prepare_error(tmp_path, "cifar10", source)
    assert str(source) in line and "truncated or damaged" in line, line


@pytest.mark.parametrize("layout", ["empty-classes", "no-image-files", "empty-val"])
def test_an_image_folder_split_without_images_is_one_line(layout, tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "imagenet"
    for split in ("train", "val"):
        (root / split / "n01440764").mkdir(parents=True)
    if layout == "no-image-files":
        (root / "train" / "n01440764" / "notes.txt").write_text("not an image")
    if layout == "empty-val":
        write_image(root / "train" / "n01440764" / "a.jpg", rng)
    line = prepare_error(tmp_path, "imagenet2012", root)
    split = "val" if layout == "empty-val" else "train"
    assert f"{root / split} holds no images" in line and ".jpg" in line, line


@pytest.mark.parametrize("compress", [False, True])
def test_an_idx_file_with_a_cut_header_is_one_line(compress, tmp_path):
    folder = tmp_path / "mnist"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("t10k", 4)):
        write_idx(folder / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), compress)
        write_idx(folder / f"{split}-labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8), compress)
    name = "train-images-idx3-ubyte"   # gzip or not, read by its magic number
    header = bytes([0, 0, 8, 3, 0, 0, 0])   # 3 dimensions announced, 3 of their 12 bytes there
    (folder / name).write_bytes(gzip.compress(header) if compress else header)
    line = prepare_error(tmp_path, "mnist", folder)
    assert name in line and "header" in line and "cut short" in line, line


@pytest.mark.slow
@pytest.mark.parametrize("env, shown", [({"JAX_PLATFORMS": "gpu"}, "JAX_PLATFORMS='gpu'"),
                                        ({"JAX_PLATFORMS": "cuda"}, "JAX_PLATFORMS='cuda'"),
                                        ({"JAX_PLATFORMS": "garbage"}, "JAX_PLATFORMS='garbage'"),
                                        ({"JAX_NUM_CPU_DEVICES": "0"}, "JAX_NUM_CPU_DEVICES='0'"),
                                        ({"JAX_NUM_CPU_DEVICES": "many"}, "JAX_NUM_CPU_DEVICES='many'")])
def test_a_jax_platform_this_machine_lacks_is_one_line(env, shown, tmp_path):
    done = subprocess.run([sys.executable, "-m", "jaxsel.cli", "train", "--steps", "2", "--no-progress",
                           "--out", str(tmp_path / "out"), "--no-checkpoint"],
                          env={**os.environ, "JAX_PLATFORMS": "cpu", **env}, capture_output=True, text=True,
                          timeout=120)
    line = one_line(done.stderr, None if "JAX_NUM_CPU_DEVICES" in env else "train")   # read before any command
    assert done.returncode == 2 and shown in line, line
    assert not (tmp_path / "out").exists()


def run_dir(tmp_path, metrics: str, evals: str | None = None):
    path = tmp_path / "run"
    path.mkdir()
    (path / "metrics.jsonl").write_text(metrics)
    if evals is not None:
        (path / "evals.json").write_text(evals)
    return path


GOOD_ROW = '{"step": 0, "train_time_s": 0.5, "synced": true, "bytes_allreduced": 100}\n'


@pytest.mark.parametrize("metrics, evals, message", [
    ("[]\n", None, "metrics.jsonl line 1 is not a step record"),
    ('{"step": "x"}\n', None, "metrics.jsonl line 1 is not a step record"),
    (GOOD_ROW + '{"step": 1, "train_time_s": "soon", "synced": false}\n', None, "metrics.jsonl line 2"),
    (GOOD_ROW, "[1, 2]", "evals.json entry 1 is not an evaluation"),
    (GOOD_ROW, '[{"step": 1, "test_accuracy": "high"}]', "evals.json entry 1 is not an evaluation"),
])
def test_report_on_a_damaged_run_log_is_one_line(metrics, evals, message, tmp_path, capsys):
    path = run_dir(tmp_path, metrics, evals)
    assert cli_main(["report", str(path)]) == 2
    line = one_line(capsys.readouterr().err, "report")
    assert str(path) in line and message in line and "restore" in line, line


@pytest.mark.parametrize("timing", ["5", '{"bogus": 1}'])
def test_report_on_a_damaged_strategy_json_is_one_line(timing, tmp_path, capsys):
    path = run_dir(tmp_path, GOOD_ROW)
    (path / "strategy.json").write_text(f'{{"name": "bsp", "timing": {timing}}}')
    assert cli_main(["report", str(path)]) == 2
    line = one_line(capsys.readouterr().err, "report")
    assert str(path / "strategy.json") in line and "timing must be a table of collective" in line, line


def test_report_out_names_the_file_it_wrote(tmp_path, capsys):
    path = run_dir(tmp_path, GOOD_ROW, '[{"step": 1, "test_accuracy": 0.5, "test_loss": 1.0, "train_time_s": 0.5}]')
    (tmp_path / "pictures").mkdir()
    for out, written in ((tmp_path / "pictures", tmp_path / "pictures" / "report.png"),
                         (tmp_path / "plain", tmp_path / "plain.png"),
                         (tmp_path / "fig.pdf", tmp_path / "fig.pdf")):
        assert cli_main(["report", str(path), "--out", str(out)]) == 0
        said = capsys.readouterr().out
        assert written.is_file() and f"wrote {written} and" in said, said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.pdf", "pictures", "plain.png", "run"]


@pytest.mark.parametrize("shape", ["0x0x0", "0x28x1", "-1x2x3", "28xx1", "axbxc"])
def test_bench_input_shape_that_cannot_exist_is_one_line(shape, capsys):
    code = cli_main(["bench", f"--input-shape={shape}", "--size", "tiny"])
    line = one_line(capsys.readouterr().err, "bench")
    assert code == 2 and f"--input-shape {shape!r}" in line and "integer >= 1" in line, line


# ---------------------------------------------------------------- decompression bombs (issue 48 items 7, 8)

def png_header_only(path, width: int, height: int) -> None:
    """A PNG whose header announces width x height RGB pixels, with one tiny IDAT chunk."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                     + chunk(b"IEND", b""))


def test_a_png_decompression_bomb_in_an_image_folder_is_one_line(tmp_path):
    rng = np.random.default_rng(0)
    bomb = tmp_path / "cars" / "train" / "Ram C-V Cargo Van Minivan 2012" / "bomb.png"
    png_header_only(bomb, 70000, 70000)
    write_image(tmp_path / "cars" / "test" / "AM General Hummer SUV 2000" / "a.jpg", rng)
    line = prepare_error(tmp_path, "cars196", tmp_path / "cars")
    assert str(bomb) in line and "too large an image to prepare" in line and "4900000000 pixels" in line, line


def peak_bytes(fn) -> tuple[int, Exception | None]:
    """The most memory Python allocated while `fn()` ran (tracemalloc), and what it raised."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        raised = None
    except Exception as err:  # noqa: BLE001
        raised = err
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, raised


BOMB = 64 << 20   # inflated bytes: a 64 MiB member compresses to about 64 KB


@pytest.mark.parametrize("packing", ["tar.gz", "folder"])
def test_a_cifar_member_larger_than_the_format_allows_is_refused_before_it_is_read(packing, tmp_path):
    """A batches.meta that declares 64 MiB (a CIFAR meta file holds ten class names): one
    line naming the file, read with far less memory than the member would take."""
    import io

    from jaxsel.data.formats import FormatError
    from jaxsel.data.formats.cifar import CIFAR10, read_cifar

    if packing == "tar.gz":
        source = tmp_path / "cifar-10-python.tar.gz"
        with tarfile.open(source, "w:gz") as tar:
            info = tarfile.TarInfo("cifar-10-batches-py/batches.meta")
            info.size = BOMB
            tar.addfile(info, io.BytesIO(bytes(BOMB)))
        named = f"{source}:cifar-10-batches-py/batches.meta"
    else:
        source = tmp_path / "cifar-10-batches-py"
        source.mkdir()
        with open(source / "batches.meta", "wb") as f:
            f.truncate(BOMB)   # sparse: the size is declared, not written
        named = str(source / "batches.meta")
    peak, raised = peak_bytes(lambda: read_cifar(source, CIFAR10))
    assert isinstance(raised, FormatError) and peak < BOMB // 8, (peak, raised)
    assert f"{named} declares {BOMB} bytes, more than the" in str(raised), raised
    line = prepare_error(tmp_path, "cifar10", source)
    assert named in line and "declares" in line, line


@pytest.mark.parametrize("header", ["honest", "huge"])
def test_a_gzip_idx_file_is_inflated_only_as_far_as_its_header_says(header, tmp_path):
    """An IDX file announcing 10 images followed by 64 MiB of zeros (or announcing 2**31
    images), gzip-compressed: one line naming the file, read with far less memory."""
    from jaxsel.data.formats import FormatError
    from jaxsel.data.formats.idx import read_idx

    n = 10 if header == "honest" else 2 ** 31
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 3]) + np.array([n, 28, 28], ">u4").tobytes() + bytes(BOMB),
                                   compresslevel=1))
    peak, raised = peak_bytes(lambda: read_idx(path))
    assert isinstance(raised, FormatError) and peak < BOMB // 8, (peak, raised)
    said = "holds more data than that" if header == "honest" else "more than the 268435456 bytes an IDX file"
    assert str(path) in str(raised) and said in str(raised), raised
