"""Service Compliance: did each workload meet its service objective throughout the run?

DBA-Bench §5.1 / §6.6.1: for persistent scenarios, Service Compliance checks that every
workload meets its service objectives over the run, including transaction deadlines,
recurring analysis jobs and the final continuation window. A case leaves the survival
curve when its business failure budget is exhausted or its final continuation window
fails.

This module is a pure function from the run's SLO samples (see
:mod:`dbaops.workloads.samples`, one row per unit of work) to a verdict with evidence.

Semantics
---------
* **Good unit.** A unit is good iff ``outcome == "on_time"`` and ``correct`` is not
  ``False`` (``correct`` is null for OLTP and for jobs without a result check). ``late``,
  ``error``, ``dropped`` (and any unknown or null outcome) are bad. The deadline check
  itself happened in the driver: ``on_time`` already accounts for queueing, lock waits,
  retries and backoff.
* **Evaluation span.** ``[from_s + grace_s, end)`` in scenario seconds, where
  ``end = min(until_s, horizon_s)`` (``until_s`` defaults to the horizon). Units are
  attributed by ``scheduled_s`` (open-loop arrivals: a stalled server produces late or
  dropped units, never missing ones). Units scheduled outside the span are ignored.
* **Windows.** The span is cut into consecutive windows of ``window_s`` scenario seconds
  anchored at the span start: window ``k`` is ``[start + k*w, start + (k+1)*w)``; the last
  window is truncated at the span end. Windows are in scenario time so they scale with
  time compression. Every window of the span is reported, including empty ones.
* **Insufficient windows.** A window with fewer than ``min_units`` units is
  ``insufficient``: it is neither compliant nor failing and is excluded from the
  denominator, from the floor check and from the continuation check (the evidence says
  how many were excluded).
* **Compliant window.** ``n_on_time / n_units >= on_time_target`` (evaluated windows only).
* **Failure budget.** ``budget = floor((1 - min_compliant_windows) * n_evaluated)`` whole
  windows. The budget is exceeded when more than ``budget`` evaluated windows fail;
  ``budget_exhausted_at_s`` is the end of the failing window number ``budget + 1``.
* **Floor.** With ``window_floor`` set, no evaluated window's ratio may be below it.
* **Continuation.** With ``continuation_s`` set, every evaluated window overlapping
  ``[end - continuation_s, end)`` must be compliant (``end`` is the horizon unless
  ``until_s`` is set), and at least one window there must be evaluated - a continuation
  that cannot be demonstrated fails.
* **every_unit mode** (required deliveries, typically OLAP jobs): every unit in the span
  must be good. Windows are still reported, but ``on_time_target`` is 1, the budget is 0,
  ``min_units`` and ``window_floor`` are ignored (a window is insufficient only when it is
  empty), and the reason names the first bad unit.
* **No silent pass.** A workload with an objective but no units in the span, or with no
  evaluated window, or with an empty span, fails with a reason saying so.
* **Leaving the survival curve.** ``left_at_s`` is the earliest of: the budget exhaustion
  time; the end of the first window below the floor; the start of the first failing
  continuation window (or the continuation span start when nothing there could be
  evaluated); the span start when there is nothing to evaluate. So ``passed`` is
  equivalent to ``left_at_s is None``. The report's survival curve
  (:mod:`dbaops.analysis.survival`) times a failed final continuation at the span's end
  instead, since it is judged when it is over, so the curve ends at the pass rate.
"""

from __future__ import annotations

import math

import polars as pl
from pydantic import BaseModel, Field

from dbaops.scenario.specs import ServiceObjective

__all__ = [
    "ComplianceWindow",
    "ServiceComplianceVerdict",
    "ServiceObjective",
    "WorkloadCompliance",
    "compliance_windows_frame",
    "evaluate_service_compliance",
    "format_compliance",
]

_EPS = 1e-9
_REQUIRED_COLUMNS = ("workload", "scheduled_s", "outcome")


class ComplianceWindow(BaseModel):
    """One SLO window of one workload. ``compliant`` is None for insufficient windows."""

    index: int
    start_s: float
    end_s: float
    n_units: int
    n_on_time: int  # good units: on time and not known to be incorrect
    n_late: int
    n_error: int
    n_dropped: int
    n_incorrect: int  # on time but correct == False
    ratio: float | None  # n_on_time / n_units; None for an empty window
    compliant: bool | None
    insufficient: bool
    in_continuation: bool = False


class WorkloadCompliance(BaseModel):
    """Service Compliance of one workload, with the evidence behind it."""

    workload: str
    kind: str | None = None
    objective: ServiceObjective
    eval_start_s: float
    eval_end_s: float
    windows: list[ComplianceWindow] = Field(default_factory=list)
    n_units: int = 0
    n_on_time: int = 0
    n_insufficient: int = 0
    n_evaluated: int = 0
    n_compliant: int = 0
    budget: int = 0
    budget_used: int = 0
    budget_exhausted_at_s: float | None = None
    floor_ok: bool = True
    continuation_ok: bool = True
    left_at_s: float | None = None
    passed: bool = False
    reason: str = ""
    failures: list[str] = Field(default_factory=list)  # every failed criterion, earliest first
    notes: list[str] = Field(default_factory=list)  # evidence that is not a failure


class ServiceComplianceVerdict(BaseModel):
    """Service Compliance over all workloads with objectives.

    ``applicable`` is False when the scenario declares no objectives; ``passed`` is then
    vacuously True and the dimension must be excluded from Outcome Pass.
    """

    applicable: bool
    passed: bool
    horizon_s: float
    workloads: dict[str, WorkloadCompliance] = Field(default_factory=dict)
    unscored_workloads: list[str] = Field(default_factory=list)  # samples but no objective


# --------------------------------------------------------------------------- helpers


def _fmt_s(x: float) -> str:
    text = f"{x:.3f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _fmt_pct(x: float) -> str:
    # Truncate rather than round so a failing 98.95 % never reads as "99.0 % < 99 %".
    return f"{math.floor(x * 1000 + _EPS) / 10:.1f} %"


def _fmt_target(x: float) -> str:
    return f"{x * 100:g} %"


def _window_label(w: ComplianceWindow) -> str:
    return f"window {_fmt_s(w.start_s)}–{_fmt_s(w.end_s)} s"


def _window_evidence(w: ComplianceWindow) -> str:
    parts = [f"{w.n_on_time}/{w.n_units} good"]
    for name, n in (
        ("late", w.n_late),
        ("error", w.n_error),
        ("dropped", w.n_dropped),
        ("incorrect", w.n_incorrect),
    ):
        if n:
            parts.append(f"{n} {name}")
    return ", ".join(parts)


def _span(obj: ServiceObjective, horizon_s: float) -> tuple[float, float]:
    start = obj.from_s + obj.grace_s
    end = horizon_s if obj.until_s is None else min(obj.until_s, horizon_s)
    return start, end


def _n_windows(start: float, end: float, window_s: float) -> int:
    if end <= start:
        return 0
    return max(1, math.ceil((end - start) / window_s - _EPS))


def _window_counts(
    samples: pl.DataFrame, spans: dict[str, tuple[float, float, float, int]]
) -> pl.DataFrame:
    """One lazy pass over all samples: per (workload, window index) unit counts."""
    params = pl.DataFrame(
        {
            "workload": list(spans),
            "_start": [v[0] for v in spans.values()],
            "_end": [v[1] for v in spans.values()],
            "_w": [v[2] for v in spans.values()],
            "_n": [v[3] for v in spans.values()],
        },
        schema={
            "workload": pl.String,
            "_start": pl.Float64,
            "_end": pl.Float64,
            "_w": pl.Float64,
            "_n": pl.Int64,
        },
    )
    cols = samples.columns
    outcome = pl.col("outcome").cast(pl.String)
    correct = pl.col("correct").cast(pl.Boolean) if "correct" in cols else pl.lit(None, pl.Boolean)
    kind = pl.col("kind").cast(pl.String) if "kind" in cols else pl.lit(None, pl.String)
    sched = pl.col("scheduled_s")
    is_on_time = (outcome == "on_time").fill_null(False)
    return (
        samples.lazy()
        .select(
            pl.col("workload").cast(pl.String),
            sched.cast(pl.Float64),
            outcome.alias("outcome"),
            correct.alias("correct"),
            kind.alias("kind"),
        )
        .join(params.lazy(), on="workload", how="inner")
        .filter((sched >= pl.col("_start")) & (sched < pl.col("_end")))
        .with_columns(
            ((sched - pl.col("_start")) / pl.col("_w"))
            .floor()
            .cast(pl.Int64)
            .clip(pl.lit(0, pl.Int64), pl.col("_n") - 1)
            .alias("index")
        )
        .group_by("workload", "index")
        .agg(
            pl.len().cast(pl.Int64).alias("n_units"),
            (is_on_time & pl.col("correct").fill_null(True)).sum().cast(pl.Int64).alias("n_good"),
            (pl.col("outcome") == "late").fill_null(False).sum().cast(pl.Int64).alias("n_late"),
            (pl.col("outcome") == "error").fill_null(False).sum().cast(pl.Int64).alias("n_error"),
            (pl.col("outcome") == "dropped")
            .fill_null(False)
            .sum()
            .cast(pl.Int64)
            .alias("n_dropped"),
            (is_on_time & pl.col("correct").not_().fill_null(False))
            .sum()
            .cast(pl.Int64)
            .alias("n_incorrect"),
            pl.col("kind").drop_nulls().first().alias("kind"),
        )
        .collect()
    )


def _windows_for(
    counts: pl.DataFrame,
    obj: ServiceObjective,
    start: float,
    end: float,
    n: int,
) -> pl.DataFrame:
    """Complete window frame (empty windows included) with per-window decisions."""
    every = obj.mode == "every_unit"
    target = 1.0 if every else obj.on_time_target
    min_units = 1 if every else obj.min_units
    c_end = end
    c_start = -math.inf if obj.continuation_s is None else end - obj.continuation_s
    grid = pl.DataFrame({"index": pl.int_range(0, n, dtype=pl.Int64, eager=True)})
    zero_cols = ["n_units", "n_good", "n_late", "n_error", "n_dropped", "n_incorrect"]
    w_start = pl.lit(start) + pl.col("index").cast(pl.Float64) * obj.window_s
    frame = (
        grid.join(counts.drop("workload", "kind"), on="index", how="left")
        .with_columns([pl.col(c).fill_null(0) for c in zero_cols])
        .with_columns(
            w_start.alias("start_s"),
            pl.min_horizontal(w_start + obj.window_s, pl.lit(end)).alias("end_s"),
        )
        .with_columns(
            pl.when(pl.col("n_units") > 0)
            .then(pl.col("n_good") / pl.col("n_units"))
            .otherwise(None)
            .alias("ratio"),
            (pl.col("n_units") < min_units).alias("insufficient"),
        )
        .with_columns(
            pl.when(pl.col("insufficient"))
            .then(None)
            .otherwise(pl.col("n_good") >= pl.col("n_units") * target - _EPS)
            .alias("compliant"),
            (
                pl.lit(obj.continuation_s is not None)
                & (pl.col("end_s") > c_start)
                & (pl.col("start_s") < c_end)
            ).alias("in_continuation"),
        )
        .with_columns(
            pl.col("compliant")
            .not_()
            .fill_null(False)
            .cast(pl.Int64)
            .cum_sum()
            .alias("failing_so_far")
        )
        .sort("index")
    )
    return frame


def _first_bad_unit(
    samples: pl.DataFrame, workload: str, lo: float, hi: float
) -> dict[str, object] | None:
    cols = samples.columns
    outcome = pl.col("outcome").cast(pl.String)
    correct = pl.col("correct") if "correct" in cols else pl.lit(None, pl.Boolean)
    bad = ~((outcome == "on_time").fill_null(False) & correct.fill_null(True))
    keep = [c for c in ("unit", "scheduled_s", "outcome", "sqlstate", "correct") if c in cols]
    rows = (
        samples.lazy()
        .filter(
            (pl.col("workload").cast(pl.String) == workload)
            & (pl.col("scheduled_s") >= lo)
            & (pl.col("scheduled_s") < hi)
            & bad
        )
        .select(keep)
        .sort("scheduled_s")
        .head(1)
        .collect()
        .to_dicts()
    )
    return rows[0] if rows else None


def _unit_text(row: dict[str, object] | None) -> str:
    if row is None:
        return "a bad unit"
    unit = row.get("unit") or "unit"
    sched = row.get("scheduled_s")
    when = f" scheduled {_fmt_s(float(sched))} s" if isinstance(sched, int | float) else ""
    outcome = row.get("outcome")
    if outcome == "on_time" and row.get("correct") is False:
        what = "result incorrect"
    else:
        what = str(outcome)
        if row.get("sqlstate"):
            what += f" (SQLSTATE {row['sqlstate']})"
    return f"'{unit}'{when}: {what}"


# --------------------------------------------------------------------------- main


def _evaluate_workload(
    samples: pl.DataFrame,
    name: str,
    obj: ServiceObjective,
    horizon_s: float,
    frame: pl.DataFrame | None,
    kind: str | None,
) -> WorkloadCompliance:
    start, end = _span(obj, horizon_s)
    res = WorkloadCompliance(
        workload=name, kind=kind, objective=obj, eval_start_s=start, eval_end_s=end
    )
    every = obj.mode == "every_unit"
    span_text = f"[{_fmt_s(start)}, {_fmt_s(end)}) s"
    if frame is None:  # empty span
        res.reason = f"empty evaluation span {span_text} (horizon {_fmt_s(horizon_s)} s)"
        res.failures = [res.reason]
        res.left_at_s = start
        res.continuation_ok = obj.continuation_s is None
        return res

    res.windows = [ComplianceWindow.model_validate(r) for r in _window_rows(frame)]
    res.n_units = int(frame["n_units"].sum())
    res.n_on_time = int(frame["n_good"].sum())
    res.n_insufficient = int(frame["insufficient"].sum())
    evaluated = [w for w in res.windows if not w.insufficient]
    failing = [w for w in evaluated if w.compliant is False]
    res.n_evaluated = len(evaluated)
    res.n_compliant = res.n_evaluated - len(failing)
    res.budget_used = len(failing)
    if res.n_insufficient:
        min_units = 1 if every else obj.min_units
        res.notes.append(
            f"{res.n_insufficient} of {len(res.windows)} windows had fewer than {min_units} "
            "unit(s) and were excluded from the denominator"
        )

    if res.n_units == 0 or res.n_evaluated == 0:
        if res.n_units == 0:
            res.reason = f"no samples for workload '{name}' in the evaluation span {span_text}"
        else:
            res.reason = (
                f"no evaluated window in {span_text}: all {len(res.windows)} windows had fewer "
                f"than {obj.min_units} units"
            )
        res.failures = [res.reason]
        res.left_at_s = start
        res.continuation_ok = obj.continuation_s is None
        return res

    # (time, priority, reason); the earliest decides left_at_s and the reason.
    events: list[tuple[float, int, str]] = []

    res.budget = (
        0 if every else math.floor((1.0 - obj.min_compliant_windows) * len(evaluated) + _EPS)
    )
    if len(failing) > res.budget:
        w = failing[res.budget]
        res.budget_exhausted_at_s = w.end_s
        if every:
            bad = _first_bad_unit(samples, name, w.start_s, w.end_s)
            text = (
                f"{_window_label(w)}: required unit {_unit_text(bad)} "
                f"({_window_evidence(w)}); every unit must be on time and correct"
            )
        else:
            text = (
                f"budget exhausted at {_fmt_s(w.end_s)} s: {_window_label(w)} "
                f"{_fmt_pct(w.ratio or 0.0)} on time < target {_fmt_target(obj.on_time_target)} "
                f"({_window_evidence(w)}) is failing window {res.budget + 1}, budget "
                f"{res.budget} of {res.n_evaluated} evaluated windows"
            )
        events.append((w.end_s, 1, text))

    if obj.window_floor is not None and not every:
        floor = obj.window_floor
        below = [w for w in evaluated if w.ratio is not None and w.ratio < floor - _EPS]
        if below:
            res.floor_ok = False
            w = below[0]
            events.append(
                (
                    w.end_s,
                    0,
                    f"{_window_label(w)}: {_fmt_pct(w.ratio or 0.0)} on time < floor "
                    f"{_fmt_target(floor)} ({_window_evidence(w)})",
                )
            )

    if obj.continuation_s is not None:
        c_start = max(start, end - obj.continuation_s)
        cont = [w for w in evaluated if w.in_continuation]
        cont_fail = [w for w in cont if w.compliant is False]
        if not cont:
            res.continuation_ok = False
            events.append(
                (
                    c_start,
                    2,
                    f"continuation [{_fmt_s(c_start)}, {_fmt_s(end)}) s: no evaluated window",
                )
            )
        elif cont_fail:
            res.continuation_ok = False
            w = cont_fail[0]
            target = 1.0 if every else obj.on_time_target
            events.append(
                (
                    w.start_s,
                    2,
                    f"continuation {_window_label(w)}: {_fmt_pct(w.ratio or 0.0)} on time < "
                    f"target {_fmt_target(target)} ({_window_evidence(w)})",
                )
            )

    events.sort(key=lambda e: (e[0], e[1]))
    res.failures = [e[2] for e in events]
    if events:
        res.left_at_s = events[0][0]
        res.reason = events[0][2]
        res.passed = False
    else:
        res.passed = True
        if every:
            res.reason = f"all {res.n_units} units on time and correct in {res.n_evaluated} windows"
        else:
            res.reason = (
                f"{res.n_compliant}/{res.n_evaluated} windows compliant "
                f"(budget {res.budget}, used {res.budget_used})"
            )
    return res


def _window_rows(frame: pl.DataFrame) -> list[dict[str, object]]:
    return frame.select(
        "index",
        "start_s",
        "end_s",
        "n_units",
        pl.col("n_good").alias("n_on_time"),
        "n_late",
        "n_error",
        "n_dropped",
        "n_incorrect",
        "ratio",
        "compliant",
        "insufficient",
        "in_continuation",
    ).to_dicts()


def evaluate_service_compliance(
    samples: pl.DataFrame,
    objectives: dict[str, ServiceObjective],
    horizon_s: float,
) -> ServiceComplianceVerdict:
    """Score Service Compliance of a run from its SLO samples.

    ``samples`` follows :data:`dbaops.workloads.samples.SAMPLE_SCHEMA` (only ``workload``,
    ``scheduled_s`` and ``outcome`` are required; ``correct``, ``kind``, ``unit`` and
    ``sqlstate`` are used when present). ``objectives`` maps workload name to its
    objective; ``horizon_s`` is the scheduled scenario horizon in scenario seconds. See
    the module docstring for the exact semantics. Pure: no I/O, no clock.
    """
    if not math.isfinite(horizon_s) or horizon_s <= 0:
        raise ValueError(f"horizon_s must be a positive finite number, got {horizon_s!r}")
    missing = [c for c in _REQUIRED_COLUMNS if c not in samples.columns]
    if missing:
        raise ValueError(f"SLO samples lack required column(s): {', '.join(missing)}")

    seen: list[str] = (
        samples.get_column("workload").cast(pl.String).drop_nulls().unique().sort().to_list()
    )
    unscored = [w for w in seen if w not in objectives]
    if not objectives:
        return ServiceComplianceVerdict(
            applicable=False, passed=True, horizon_s=horizon_s, unscored_workloads=unscored
        )

    spans: dict[str, tuple[float, float, float, int]] = {}
    for name, obj in objectives.items():
        start, end = _span(obj, horizon_s)
        n = _n_windows(start, end, obj.window_s)
        if n > 0:
            spans[name] = (start, end, obj.window_s, n)
    counts = _window_counts(samples, spans) if spans else None

    results: dict[str, WorkloadCompliance] = {}
    for name, obj in objectives.items():
        frame: pl.DataFrame | None = None
        kind: str | None = None
        if name in spans and counts is not None:
            start, end, _, n = spans[name]
            mine = counts.filter(pl.col("workload") == name)
            kinds = mine.get_column("kind").drop_nulls()
            kind = str(kinds[0]) if len(kinds) else None
            frame = _windows_for(mine, obj, start, end, n)
        results[name] = _evaluate_workload(samples, name, obj, horizon_s, frame, kind)

    return ServiceComplianceVerdict(
        applicable=True,
        passed=all(r.passed for r in results.values()),
        horizon_s=horizon_s,
        workloads=results,
        unscored_workloads=unscored,
    )


# --------------------------------------------------------------------------- reporting

_WINDOW_FRAME_SCHEMA: dict[str, pl.DataType] = {
    "workload": pl.String(),
    "index": pl.Int64(),
    "start_s": pl.Float64(),
    "end_s": pl.Float64(),
    "n_units": pl.Int64(),
    "n_on_time": pl.Int64(),
    "n_late": pl.Int64(),
    "n_error": pl.Int64(),
    "n_dropped": pl.Int64(),
    "n_incorrect": pl.Int64(),
    "ratio": pl.Float64(),
    "compliant": pl.Boolean(),
    "insufficient": pl.Boolean(),
    "in_continuation": pl.Boolean(),
    "on_time_target": pl.Float64(),
    "window_floor": pl.Float64(),
}


def compliance_windows_frame(verdict: ServiceComplianceVerdict) -> pl.DataFrame:
    """All windows of all workloads as one Polars frame (for plots and reports)."""
    rows: list[dict[str, object]] = []
    for name, res in verdict.workloads.items():
        every = res.objective.mode == "every_unit"
        target = 1.0 if every else res.objective.on_time_target
        floor = None if every else res.objective.window_floor
        for w in res.windows:
            rows.append(
                {
                    "workload": name,
                    **w.model_dump(),
                    "on_time_target": target,
                    "window_floor": floor,
                }
            )
    return pl.DataFrame(rows, schema=_WINDOW_FRAME_SCHEMA, orient="row" if rows else None)


def format_compliance(verdict: ServiceComplianceVerdict, max_failing_windows: int = 5) -> str:
    """Plain-text summary of a verdict (no Rich markup)."""
    if not verdict.applicable:
        return "Service Compliance: not applicable (no service objectives declared)"
    n_pass = sum(r.passed for r in verdict.workloads.values())
    lines = [
        f"Service Compliance: {'PASS' if verdict.passed else 'FAIL'} "
        f"({n_pass}/{len(verdict.workloads)} workloads pass, "
        f"horizon {_fmt_s(verdict.horizon_s)} s)"
    ]
    for name, r in verdict.workloads.items():
        kind = f"{r.kind}, " if r.kind else ""
        lines.append(
            f"  {name} [{kind}{r.objective.mode}]: {'PASS' if r.passed else 'FAIL'} - {r.reason}"
        )
        detail = (
            f"    span [{_fmt_s(r.eval_start_s)}, {_fmt_s(r.eval_end_s)}) s, "
            f"{r.n_on_time}/{r.n_units} units good, {r.n_compliant}/{r.n_evaluated} windows "
            f"compliant, budget {r.budget} used {r.budget_used}, "
            f"{r.n_insufficient} insufficient"
        )
        if r.left_at_s is not None:
            detail += f", left at {_fmt_s(r.left_at_s)} s"
        lines.append(detail)
        for extra in r.failures[1:]:
            lines.append(f"    also: {extra}")
        for note in r.notes:
            lines.append(f"    note: {note}")
        bad = [w for w in r.windows if w.compliant is False]
        for w in bad[:max_failing_windows]:
            lines.append(
                f"    failing {_window_label(w)}: {_fmt_pct(w.ratio or 0.0)} on time "
                f"({_window_evidence(w)})"
            )
        if len(bad) > max_failing_windows:
            lines.append(f"    ... {len(bad) - max_failing_windows} more failing windows")
    if verdict.unscored_workloads:
        lines.append(f"  unscored (no objective): {', '.join(verdict.unscored_workloads)}")
    return "\n".join(lines)
