"""Service Compliance survival over persistent runs (DBA-Bench §6.6.1, Fig. 9 left).

Cases
    A case is a valid persistent run whose scenario has Service Compliance objectives; bounded
    runs are never cases. Cases are grouped by system (agent/model and cohort, as the report
    groups runs). Each scenario weighs the same within a system and repeats of a scenario split
    its weight, so with one run per scenario (the paper's setting) every case weighs the same.

When a case leaves
    From the Service Compliance verdict on record (the windows and budgets that
    :func:`dbaops.evaluation.compliance.evaluate_service_compliance` scored; no samples are
    read again), the earliest over the run's workloads of:

    * **budget exhausted** - the end of the failing window that takes the number of failing
      windows past the budget, ``floor((1 - min_compliant_windows) * n_evaluated)`` (the
      verdict's ``budget_exhausted_at_s``; 0 in ``every_unit`` mode);
    * **floor broken** - the end of the first evaluated window whose on-time ratio is below
      ``window_floor``;
    * **continuation failed** - the end of the objective's span (the horizon unless
      ``until_s`` ends it earlier): a final continuation is judged when it is over, so a case
      failing only there leaves at t = 1 and the curve ends at the pass rate (the verdict's
      ``left_at_s`` puts it at the start of the first failing continuation window instead);
    * **no evidence** - the span start, when there was nothing to evaluate (no samples, no
      evaluated window, empty span), as the verdict records it.

    A case whose Service Compliance passed never leaves. Time is normalised by the scheduled
    scenario horizon and clipped to [0, 1]. ``S(t)`` is the weighted share of a system's cases
    that have not left by ``t`` (right-continuous: a case leaving at ``t`` is out at ``t``).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from pydantic import BaseModel, ConfigDict, ValidationError

from dbaops.evaluation.compliance import ServiceComplianceVerdict, WorkloadCompliance

__all__ = [
    "CaseExit",
    "case_exit",
    "survival_cases",
    "survival_curve",
    "survival_figure",
    "survival_table",
]

ExitCause = Literal["floor", "budget", "continuation", "no_evidence", "recorded"]
EXIT_CAUSES: tuple[ExitCause, ...] = ("floor", "budget", "continuation", "no_evidence", "recorded")
_EPS = 1e-9


class CaseExit(BaseModel):
    """When and why a case leaves the survival curve (all None: compliant to the end)."""

    model_config = ConfigDict(frozen=True)

    left_at_s: float | None = None
    left_norm: float | None = None  # left_at_s / scheduled horizon, in [0, 1]
    workload: str | None = None
    cause: ExitCause | None = None


def _workload_exit(r: WorkloadCompliance) -> tuple[float, int, ExitCause] | None:
    """(time, tie order, cause) at which one failing workload leaves; None if it passed."""
    if r.passed:
        return None
    if r.n_units == 0 or r.n_evaluated == 0:
        return (r.left_at_s if r.left_at_s is not None else r.eval_start_s), 3, "no_evidence"
    found: list[tuple[float, int, ExitCause]] = []
    floor = r.objective.window_floor
    if not r.floor_ok and floor is not None:
        below = [
            w.end_s
            for w in r.windows
            if not w.insufficient and w.ratio is not None and w.ratio < floor - _EPS
        ]
        if below:
            found.append((below[0], 0, "floor"))
    if r.budget_exhausted_at_s is not None:
        found.append((r.budget_exhausted_at_s, 1, "budget"))
    if not r.continuation_ok:
        found.append((r.eval_end_s, 2, "continuation"))
    if not found and r.left_at_s is not None:  # a criterion this rule does not know
        found.append((r.left_at_s, 4, "recorded"))
    return min(found) if found else None


def _recorded_exit(compliance: dict[str, Any]) -> tuple[float, str] | None:
    """Earliest recorded ``left_at_s`` of a verdict that does not parse (older or partial)."""
    lefts = [
        (float(w["left_at_s"]), str(name))
        for name, w in (compliance.get("workloads") or {}).items()
        if isinstance(w, dict) and isinstance(w.get("left_at_s"), int | float)
    ]
    return min(lefts) if lefts else None


def case_exit(
    compliance: ServiceComplianceVerdict | dict[str, Any], horizon_s: float | None
) -> CaseExit:
    """When a run leaves the Service Compliance survival curve (see the module docstring).

    ``compliance`` is the run's Service Compliance verdict, typed or as in ``verdict.json``
    (a verdict that does not parse falls back to its recorded ``left_at_s``, cause
    ``recorded``); ``horizon_s`` is the scheduled scenario horizon (None: no ``left_norm``).
    A verdict that is not applicable, or passed, gives an empty :class:`CaseExit`.
    """
    if isinstance(compliance, ServiceComplianceVerdict):
        verdict = compliance
    else:
        try:
            verdict = ServiceComplianceVerdict.model_validate(compliance)
        except ValidationError:
            recorded = _recorded_exit(compliance)
            if recorded is None:
                return CaseExit()
            return _exit(recorded[0], recorded[1], "recorded", horizon_s)
    if not verdict.applicable or verdict.passed:
        return CaseExit()
    exits = [
        (e, name) for name, r in verdict.workloads.items() if (e := _workload_exit(r)) is not None
    ]
    if not exits:  # failed, yet no workload says when: it did not make it to the end
        end = horizon_s if horizon_s else verdict.horizon_s
        return _exit(end, None, "recorded", horizon_s)
    (t, _, cause), name = min(exits)
    return _exit(t, name, cause, horizon_s)


def _exit(t: float, workload: str | None, cause: ExitCause, horizon_s: float | None) -> CaseExit:
    norm = None if not horizon_s else min(max(t / horizon_s, 0.0), 1.0)
    return CaseExit(left_at_s=t, left_norm=norm, workload=workload, cause=cause)


# --------------------------------------------------------------------------- curves


def survival_cases(valid: pl.DataFrame) -> pl.DataFrame:
    """The cases among valid report rows: persistent runs with Service Compliance objectives."""
    if valid.height == 0:
        return valid
    return valid.filter(pl.col("sc_applicable") & (pl.col("mode") == "persistent"))


def _systems(cases: pl.DataFrame) -> list[str]:
    return sorted(cases["system"].unique().to_list()) if cases.height else []


def _weighted(cases: pl.DataFrame) -> pl.DataFrame:
    """Cases with their weight ``_w`` (equal per scenario within a system, split among its
    repeats) and ``_left`` (normalised leave time, infinite for a case that never left)."""
    return cases.with_columns(
        (1.0 / pl.len().over("system", "scenario")).alias("_w"),
        pl.col("left_norm").fill_null(math.inf).alias("_left"),
    )


def _share(alive: pl.Expr) -> pl.Expr:
    return ((pl.col("_w") * alive.cast(pl.Float64)).sum() / pl.col("_w").sum()).cast(pl.Float64)


def survival_curve(valid: pl.DataFrame, times: list[float] | np.ndarray) -> pl.DataFrame:
    """S(t) per system at the given normalised times (long format; see the module doc)."""
    grid = pl.DataFrame(
        {"t_norm": [float(t) for t in times], "_i": list(range(len(times)))},
        schema={"t_norm": pl.Float64, "_i": pl.Int64},
    )
    return (
        _weighted(survival_cases(valid))
        .join(grid, how="cross")
        .group_by("system", "_i")
        .agg(
            pl.col("time_scale").first(),
            pl.col("t_norm").first(),
            _share(pl.col("_left") > pl.col("t_norm")).alias("survival"),
            pl.len().cast(pl.Int64).alias("n_cases"),
            pl.col("scenario").n_unique().cast(pl.Int64).alias("n_scenarios"),
        )
        .sort("system", "_i")
        .select("system", "time_scale", "t_norm", "survival", "n_cases", "n_scenarios")
    )


def survival_table(valid: pl.DataFrame) -> pl.DataFrame:
    """Per system: cases, share still compliant at the end, and how many left by each cause."""
    never_left = pl.col("left_norm").is_null()
    return (
        _weighted(survival_cases(valid))
        .group_by("system")
        .agg(
            pl.col("time_scale").first(),
            pl.len().cast(pl.Int64).alias("n_cases"),
            pl.col("scenario").n_unique().cast(pl.Int64).alias("n_scenarios"),
            never_left.sum().cast(pl.Int64).alias("n_compliant"),
            _share(never_left).alias("survival_end"),
            *[
                (pl.col("left_cause") == c).sum().cast(pl.Int64).alias(f"left_{c}")
                for c in EXIT_CAUSES
            ],
            pl.col("left_norm").min().alias("first_left_norm"),
        )
        .sort("system")
    )


def survival_figure(valid: pl.DataFrame) -> Figure:
    """Fig. 9 (left): one step line per system, share of cases still compliant over t/horizon."""
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.subplots()
    cases = survival_cases(valid)
    if cases.height == 0:
        ax.text(0.5, 0.5, "no persistent runs with Service Compliance objectives", ha="center",
                transform=ax.transAxes, color="#777")  # fmt: skip
    for i, system in enumerate(_systems(cases)):
        mine = cases.filter(pl.col("system") == system)
        # exact steps: the curve changes only where a case leaves
        knots = sorted({0.0, 1.0, *mine["left_norm"].drop_nulls().to_list()})
        cur = survival_curve(mine, knots)
        xs, ys = [], []
        prev = 1.0
        for t, s in zip(cur["t_norm"].to_list(), cur["survival"].to_list(), strict=True):
            xs += [t, t]
            ys += [prev, s]
            prev = s
        (line,) = ax.plot(xs, ys, lw=2, color=f"C{i}",
                          label=f"{system}: {prev * 100:.1f} % at end ({mine.height} cases, "
                                f"{mine['scenario'].n_unique()} scenarios)")  # fmt: skip
        line.set_gid(f"survival:{system}")
    ax.set_xlim(0, 1.005)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel("normalised scenario time (t / scheduled horizon)")
    ax.set_ylabel("share of cases still compliant")
    ax.set_title("Service Compliance survival over persistent runs (equal weight per scenario)",
                 fontsize=10)  # fmt: skip
    ax.grid(color="#e5e5e5")
    if cases.height:
        ax.legend(fontsize=8, loc="lower left")
    return fig
