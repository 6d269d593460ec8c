"""Time-to-accuracy, the papers' headline metric: how many steps, bytes and seconds of
projected wall-clock each strategy needs to first reach a target test accuracy, and the
speedup over BSP.

The target is either an absolute accuracy ("0.6") or a share of the reference
strategy's final accuracy ("99%", of BSP's when BSP ran, else of the best run's). A run
is "at the target" from its first evaluation whose accuracy is >= the target; between
evaluations nothing is known, so the figures are as fine as `eval_every`.
"""
from __future__ import annotations

import dataclasses

DEFAULT_TARGET = "99%"


@dataclasses.dataclass(frozen=True)
class Target:
    accuracy: float     # the accuracy to reach
    description: str    # how it was chosen, for tables and plots


def parse_target(spec: str) -> tuple[str, float]:
    """("share", 0.99) for "99%", ("absolute", 0.6) for "0.6"; ValueError otherwise."""
    text = str(spec).strip()
    allowed = f"--target must be an accuracy in (0, 1] (e.g. 0.6) or a share of BSP's final accuracy " \
              f"in (0%, 100%] (e.g. 99%), got {spec!r}"
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(allowed) from None
    if not 0 < value <= 1:
        raise ValueError(allowed)
    return ("share" if text.endswith("%") else "absolute"), value


def reference_run(finals: dict[str, float]) -> str:
    """The strategy a share-of target refers to: BSP when it ran, else the most accurate."""
    return "bsp" if "bsp" in finals else max(finals, key=finals.get)


def resolve_target(spec: str, finals: dict[str, float]) -> Target:
    """The target accuracy for runs whose final accuracies are `finals` (name -> accuracy)."""
    kind, value = parse_target(spec)
    if kind == "absolute":
        return Target(value, f"test accuracy {value:.4g}")
    ref = reference_run(finals)
    goal = value * finals[ref]
    if ref == "bsp":
        return Target(goal, f"{value * 100:.4g}% of bsp's final accuracy {finals[ref]:.3g} = {goal:.3g}")
    return Target(goal, f"{value * 100:.4g}% of the most accurate row's final accuracy ({ref}: {finals[ref]:.3g}; "
                        f"no bsp row to refer to) = {goal:.3g}")


def first_reach(evals: list[dict], target: float) -> dict | None:
    """The first evaluation at or above `target` (None: never reached)."""
    return next((e for e in evals if e["test_accuracy"] >= target), None)


def time_to_target(evals: list[dict], target: float) -> dict:
    """steps, bytes, projected and measured seconds to the target (None when never reached)."""
    hit = first_reach(evals, target)
    if hit is None:
        return {"reached_target": False, "steps_to_target": None, "bytes_to_target": None,
                "time_to_target_s": None, "measured_time_to_target_s": None}
    return {"reached_target": True, "steps_to_target": int(hit["step"]),
            "bytes_to_target": int(hit["bytes_allreduced"]),
            "time_to_target_s": float(hit["projected_time_s"]),
            "measured_time_to_target_s": float(hit["train_time_s"])}


def speedups(rows: list[dict], baseline: str = "bsp", key: str = "strategy") -> None:
    """Add `speedup_vs_bsp` to each row: BSP's projected time to target over the row's
    (None when either never reached it, BSP did not run, or a time is 0: already at the
    target before the first step). BSP's row: the one whose `key` is `baseline`."""
    base = next((r for r in rows if r[key] == baseline), None)
    base_t = base["time_to_target_s"] if base else None
    for r in rows:
        t = r["time_to_target_s"]
        r["speedup_vs_bsp"] = base_t / t if base_t and t else None
