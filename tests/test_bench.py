"""`jaxsel bench` at the tiny size: every ratio comes back and the JSON is written."""
import json
import math

import jax
import pytest

from jaxsel.analysis import bench, precision
from jaxsel.cli import main


@pytest.mark.slow
def test_bench_command_tiny(tmp_path, capsys):
    """Packed (4 replicas, 2 on each of 2 devices): the bench's steps and its hand-written
    baseline both handle packing; bf16 (mixed precision), the packed row (4 on one device)
    and the compiled-op counts come back too. (4 replicas, not 8: the same packed code paths,
    and the packed row compiles half the unrolled replicas.)"""
    out = tmp_path / "bench.json"
    assert main(["bench", "--size", "tiny", "--replicas", "4", "--devices", "2", "--packed-replicas", "4", "--dtype", "bf16", "--hlo",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for key in bench.RATIOS + bench.PACKED_RATIOS + bench.INFO_RATIOS:
        value = result["ratios"][key]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, value)
    assert bench.ratios_ok(result)
    assert result["replicas"] == 4 and result["device_kind"] and result["size"] == "tiny"
    captured = capsys.readouterr()
    printed = captured.out
    progress = [line for line in captured.err.splitlines() if line.startswith("bench: [variant ")]
    assert len(progress) == len(result["median_step_ms"])   # a line before each variant compiles
    assert "bsp_over_minimal" in printed and "replicas=4" in printed and "targets:" in printed
    assert result["layout"] == "4 replicas on 2 x CPU (cpu), 2 per device"
    assert "layout: 4 replicas on 2 x CPU (cpu), 2 per device" in printed
    assert result["packed_layout"] == "4 replicas on 1 x CPU (cpu), 4 per device" and result["dtype"] == "bf16"
    assert "packed row layout: 4 replicas on 1 x CPU (cpu), 4 per device" in printed and "dtype=bf16" in printed
    counts = result["hlo"]
    assert set(counts) == set(result["median_step_ms"]) and all(c["ops"] >= c["fusions"] > 0 for c in counts.values())
    # the grad-norm metric is work of its own in the compiled step (off by default)
    assert counts["bsp_norm"]["fusions"] > counts["bsp"]["fusions"]
    extra = result["hlo_extra"]
    assert set(extra) == {f"{a}-{b}" for a, b in bench.COMPARED}
    assert any("square" in label for label in extra["bsp_norm-bsp"]["more"])   # the norm's squares
    assert "selsync_local-local: " in printed and "bsp-user_bsp: " in printed


@pytest.mark.parametrize("loop", ["auto", pytest.param("vmap", marks=pytest.mark.slow)])
def test_the_step_costs_what_its_transformation_costs(loop):
    """Issues 45 and 57, on the tiny CNN (one replica on one CPU device; "auto" is the CPU's
    unroll loop, "vmap" a GPU's path), only what holds on any XLA release: an op count is
    one release's (JAX 0.10.2 and 0.12.1 differ by up to 10 per step; `jaxsel bench
    --hlo-only` prints them, BENCHMARKS.md records them per JAX version).
    - `make_train_step(BSP)` runs no more ops than a user's own shard_map loop with
      `as_optax(BSP)`: its metrics and state layout cost no kernels the transformation does not;
    - SelSync's statistic reads each gradient tensor once (one reduction over each, as the
      plain local step's norm metric does), and a BSP step none: a second read anywhere
      (a norm recomputed for another consumer) counts twice here.
    Counted from the compiled programs, never timed."""
    texts = bench.compiled_programs("cnn", ("bsp", "user_bsp", "selsync_local", "local"), size="tiny",
                                    replicas=1, devices=1, packing=loop)
    ops = {name: bench.hlo_counts(text)["ops"] for name, text in texts.items()}
    assert ops["bsp"] <= ops["user_bsp"], (ops, bench.extra_ops(texts["bsp"], texts["user_bsp"]))
    params = jax.tree.leaves(precision.build("cnn", bench.SIZES["tiny"]["image_shape"], 10, 0, "fp32").params)
    reads = {name: bench.gradient_reductions(text, {p.size for p in params}) for name, text in texts.items()}
    assert reads == {"bsp": 0, "user_bsp": 0, "selsync_local": len(params), "local": len(params)}, reads


def test_gradient_reductions_count_whole_reads_of_a_parameter_sized_tensor():
    """A reduction reads a gradient whole when its operand (named, or printed with its shape)
    has a parameter's size, in whatever layout; a split's second stage and a reduction of
    activations do not count; names are looked up in their own computation."""
    text = """HloModule m

%fused (p: f32[64,10]) -> f32[] {
  %p = f32[64,10]{1,0} parameter(0)
  %w = f32[2,1]{1,0} reduce-window(%p, %c), window={size=32x10 stride=32x10}, to_apply=%add
  ROOT %r = f32[] reduce(%w, %c), dimensions={0,1}, to_apply=%add
}

%other (w: f32[2,16]) -> f32[2] {
  %w = f32[2,16]{1,0} parameter(0)
  ROOT %r = f32[2]{0} reduce(%w, %c), dimensions={1}, to_apply=%add
  %q = f32[] reduce(%p, %c), dimensions={0,1}, to_apply=%add
}

ENTRY %main (a: f32[10,64]) -> f32[] {
  %a = f32[10,64]{0,1} parameter(0)
  ROOT %s = f32[] reduce(f32[10,64]{0,1} %a, f32[] %c), dimensions={0,1}, to_apply=%add
}
"""
    assert bench.gradient_reductions(text, {640}) == 2   # the reduce-window's first stage, the entry's (%q's %p is not its)
    assert bench.gradient_reductions(text, {2}) == 1     # the split's second stage reads f32[2,1]
    assert bench.gradient_reductions(text, {32}) == 1    # %other's own %w


def test_bench_variants_are_checked():
    assert bench.check_variants(None) == bench.VARIANTS + bench.PACKED_VARIANTS
    assert bench.check_variants(["bsp", "minimal"]) == ("bsp", "minimal")
    with pytest.raises(ValueError, match="variants must be among .*, got bsp_lean"):
        bench.check_variants(["bsp_lean"])


def test_bench_command_bad_input_is_one_line(capsys):
    for flags, message in ((["--repeats", "0"], "repeats must be an integer >= 1, got 0"),
                           (["--dtype", "fp8"], "dtype must be one of fp32, bf16, got 'fp8'"),
                           (["--packed-replicas", "-1"],
                            "packed_replicas must be an integer >= 0 (0 = no packed row), got -1"),
                           (["--packing", "loop"], "packing must be one of auto, vmap, map, unroll, got 'loop'"),
                           (["--variants", "bsp,nope"], f"variants must be among "
                            f"{', '.join(bench.VARIANTS + bench.PACKED_VARIANTS)}, got nope")):
        assert main(["bench", "--size", "tiny", *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"jaxsel bench: error: {message}"]
    # the last releases' --packed-row N and --packed N (the count) and --local-replicas (the loop) still
    # work, each with one note naming its new flag (compat/packing_names.py)
    for old in ("--packed-row", "--packed"):
        assert main(["bench", "--size", "tiny", old, "-1"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"jaxsel: note: {old} is deprecated and read until jaxsel 0.2.0; write --packed-replicas -1",
            "jaxsel bench: error: packed_replicas must be an integer >= 0 (0 = no packed row), got -1"]
    assert main(["bench", "--size", "tiny", "--local-replicas", "loop"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "jaxsel: note: --local-replicas is deprecated and read until jaxsel 0.2.0; write --packing loop",
        "jaxsel bench: error: packing must be one of auto, vmap, map, unroll, got 'loop'"]


def test_bench_defaults_to_one_replica_per_device_of_the_default_backend():
    """On a one-GPU host `jaxsel bench` runs one replica on the GPU (`--replicas 8` packs 8 on it)."""
    from jaxsel.cli.command import build_parser
    from jaxsel.core.parallel import choose_layout

    args = build_parser().parse_args(["bench"])
    assert args.replicas is None and args.dtype == "fp32" and args.packed_replicas == 8 and args.packing == "auto"
    assert build_parser().parse_args(["bench", "--packed-row", "3"]).packed_replicas == 3   # last release's, read
    assert build_parser().parse_args(["bench", "--local-replicas", "map"]).packing == "map"
    layout = choose_layout(args.replicas, devices=1)
    assert layout.replicas == 1 and layout.per_device == 1 and layout.devices[0].platform == "cpu"
    assert choose_layout(8, devices=1).per_device == 8


def test_hlo_counts_reads_the_entry_computation():
    text = """HloModule m

%fused_computation (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}

ENTRY %main (a: f32[4]) -> (f32[4], s32[]) {
  %a = f32[4]{0} parameter(0)
  %c = s32[] constant(1)
  %f = f32[4]{0} fusion(%a), kind=kLoop, calls=%fused_computation
  %copy = s32[] copy(%c)
  %all-reduce = f32[4]{0} all-reduce(%f), replica_groups={}, to_apply=%add
  %six = (f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}, /*index=5*/f32[4]{0}) all-reduce(%f, %f, %f, %f, %f, %f), replica_groups={}, to_apply=%add
  ROOT %t = (f32[4]{0}, s32[]) tuple(%all-reduce, %copy)
}
"""
    # a long tuple type's /*index=5*/ comment does not hide its instruction (a combined all-reduce)
    assert bench.hlo_counts(text) == {"fusions": 1, "ops": 4}


def test_extra_ops_say_where_a_variants_kernels_over_its_reference_go():
    """Each op labelled by the JAX operation it came from (the jit's name dropped), or as
    inserted by XLA; only what the variant runs beyond the reference is listed."""
    entry = """HloModule m

ENTRY %main (a: f32[4]) -> f32[4] {{
  %a = f32[4]{{0}} parameter(0)
{body}}}
"""
    step = lambda name: f'  %{name} = f32[4]{{0}} fusion(%a), kind=kLoop, calls=%f, metadata={{op_name="jit(step)/{name}"}}\n'
    reference = entry.format(body=step("mul"))
    variant = entry.format(body=step("mul") + step("square") + step("square").replace("%square", "%square.1")
                           + "  %copy = f32[4]{0} copy(%a)\n")
    assert bench.hlo_ops(reference) == {"fusion mul": 1}
    assert bench.extra_ops(variant, reference) == {"more": {"fusion square": 2, "copy (inserted by XLA)": 1},
                                                   "fewer": {}}
    assert bench.extra_ops(reference, variant)["fewer"] == {"fusion square": 2, "copy (inserted by XLA)": 1}


def test_run_bench_rejects_bad_arguments():
    with pytest.raises(ValueError, match="size must be one of"):
        bench.run_bench(size="huge")
    with pytest.raises(ValueError, match="repeats must be an integer >= 1, got 0"):
        bench.run_bench(size="tiny", repeats=0)
    with pytest.raises(ValueError, match="dtype must be one of fp32, bf16"):
        bench.run_bench(size="tiny", dtype="float16")


def test_packing_bench_refuses_an_unknown_model():
    """(The script's side-by-side run compiles 12 steps: measured by hand, see BENCHMARKS.md.)"""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    import packing_bench

    assert packing_bench.main(["--models", "nope"]) == 2


def test_bench_says_which_variant_it_compiles_before_it_does():
    """A line per variant before its warm-up (its first step compiles it) and one before the
    timing: a bench compiling a CNN for minutes on a loaded CPU must not look hung."""
    import jax.numpy as jnp

    said, done = [], []

    def step(name):
        def run(state, batch):
            done.append(name)
            assert said[-1].endswith("warm-up steps") or said[-1].startswith("bench: timing"), said
            return state + 1, {"synced": jnp.asarray(name == "selsync_sync")}
        return run

    names = ("selsync_local", "local", "selsync_sync", "bsp")
    runners = [bench._Runner(name, step(name), 0, None) for name in names]
    by = bench._time_interleaved(runners, 2, 3, said.append)
    assert [line.split("] ", 1)[1] for line in said[:4]] == [
        f"{bench._LABELS[n]}: compiling, 2 warm-up steps" for n in names]
    assert said[0].startswith("bench: [variant 1 of 4 · 0:00 elapsed] ") and len(said) == 5
    assert said[4] == "bench: timing 3 rounds of the 4 variants, one step each in turn"
    assert done[:2] == ["selsync_local", "selsync_local"] and len(by["bsp"].times) == 3
