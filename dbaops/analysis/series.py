"""Per-run time series for plots: compliance windows, latency per window, events, actors, calls.

All aggregation happens here in Polars (one pass per table), so a plot never draws raw samples:
a two-hour run with ten million SLO samples becomes a few thousand window rows.

Windows
    For a workload with a service objective the windows are exactly those of
    :func:`dbaops.evaluation.compliance.evaluate_service_compliance` over the scenario's
    objectives and the horizon the run was scored over (the verdict's ``horizon_s``), so the
    plot shows what was scored. A workload without an objective is cut into
    :data:`DEFAULT_WINDOW_S` windows from t = 0 (shown, never judged). Latency percentiles and
    error/dropped counts use the same window grid and also cover the warm-up before t = 0.

Missed windows and the event they follow
    A missed window is a scored (objective) window that is not compliant; insufficient windows
    are not missed. It follows the latest timeline event (fault, alert or inspection) whose
    scheduled time is at or before the window's start. The scheduled time, not the fire time,
    because the window grid and the event program share scenario time and an event is recorded
    a little after it was due (a one-shot fault only once applied): the window that starts
    with a fault is the fault's. Only events that happened count: an alert whose condition did
    not hold (``skipped``) or a fault that could not be applied (``failed``, possibly recorded
    after it was first ``fired``) is not on the timeline. A window before every event follows
    none.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from dbaops.dbms.dialect import engine_dialect
from dbaops.evaluation.compliance import (
    ServiceComplianceVerdict,
    ServiceObjective,
    WorkloadCompliance,
    compliance_windows_frame,
    evaluate_service_compliance,
)
from dbaops.record.layout import RunDir
from dbaops.record.load import RunData, load_run, violating_calls
from dbaops.record.tables import SAMPLE_SCHEMA, read_metrics

__all__ = [
    "DEFAULT_WINDOW_S",
    "RunSeries",
    "WorkloadInfo",
    "latency_windows",
    "missed_by_event",
    "missed_windows",
    "occurred_events",
    "preceding_events",
    "read_sample_columns",
    "run_series",
]

DEFAULT_WINDOW_S = 10.0

_LATENCY_SCHEMA: dict[str, pl.DataType] = {
    "workload": pl.String(),
    "index": pl.Int64(),
    "start_s": pl.Float64(),
    "end_s": pl.Float64(),
    "n_units": pl.Int64(),
    "n_completed": pl.Int64(),
    "p50_ms": pl.Float64(),
    "p95_ms": pl.Float64(),
    "p99_ms": pl.Float64(),
    "n_late": pl.Int64(),
    "n_error": pl.Int64(),
    "n_dropped": pl.Int64(),
}


@dataclass
class WorkloadInfo:
    """One workload as plotted."""

    name: str
    kind: str | None
    has_objective: bool
    objective: ServiceObjective
    result: WorkloadCompliance | None  # None for workloads without an objective
    deadline_ms: float | None = None


@dataclass
class RunSeries:
    """Everything the per-run plot draws, already aggregated."""

    run: RunData
    horizon_s: float  # scheduled horizon (x-axis end)
    scored_horizon_s: float  # what Service Compliance was scored over
    x_min: float  # start of the x-axis (warm-up start, <= 0)
    compliance: ServiceComplianceVerdict  # the scenario's objectives, as scored
    workloads: list[WorkloadInfo]
    windows: pl.DataFrame  # compliance windows of every plotted workload (+ has_objective)
    latency: pl.DataFrame  # per-window latency percentiles and bad-unit counts
    events: pl.DataFrame
    actors: pl.DataFrame
    tool_calls: pl.DataFrame  # status "rejected": the harness could not run it
    model_calls: pl.DataFrame  # t_s (start), t_end_s, latency_ms, retries, ok, model
    server: pl.DataFrame  # t_s, series, value (may be empty)
    missed: pl.DataFrame  # missed windows with the event each follows (see module doc)
    notes: list[str] = field(default_factory=list)


def read_sample_columns(run_dir: Path, columns: list[str]) -> pl.DataFrame:
    """Only the given sample columns (compacted file and/or parts of an unfinished run)."""
    rd = RunDir(Path(run_dir))
    paths = []
    final = rd.samples
    if final.exists():
        paths.append(final)
    if rd.samples_dir.exists():
        paths.extend(sorted(rd.samples_dir.glob("part-*.parquet")))
    if not paths:
        return pl.DataFrame(schema={c: SAMPLE_SCHEMA[c] for c in columns})
    frames = []
    for p in paths:
        lf = pl.scan_parquet(p)
        have = lf.collect_schema().names()
        frames.append(
            lf.select(
                [
                    pl.col(c).cast(SAMPLE_SCHEMA[c])
                    if c in have
                    else pl.lit(None, SAMPLE_SCHEMA[c]).alias(c)
                    for c in columns
                ]
            )
        )
    return pl.concat(frames, how="vertical").collect()


def latency_windows(
    samples: pl.DataFrame,
    grids: dict[str, tuple[float, float]],
    x_min: float,
    x_max: float,
) -> pl.DataFrame:
    """Per workload and window: latency p50/p95/p99 of completed units and bad-unit counts.

    ``grids`` maps workload -> (anchor_s, window_s); window ``k`` is
    ``[anchor + k*w, anchor + (k+1)*w)`` (``k`` may be negative, for the warm-up), truncated
    at ``x_max``. Units are attributed by ``scheduled_s`` in ``[x_min, x_max)``. Completed
    units are ``on_time`` and ``late``; errors and dropped units have no meaningful latency.
    """
    if not grids or samples.height == 0:
        return pl.DataFrame(schema=_LATENCY_SCHEMA)
    params = pl.DataFrame(
        {
            "workload": list(grids),
            "_a": [float(g[0]) for g in grids.values()],
            "_w": [float(g[1]) for g in grids.values()],
        },
        schema={"workload": pl.String, "_a": pl.Float64, "_w": pl.Float64},
    )
    outcome = pl.col("outcome")
    done = outcome.is_in(["on_time", "late"]).fill_null(False)
    lat = pl.when(done).then(pl.col("latency_ms"))  # null otherwise: quantiles skip nulls
    frame = (
        samples.lazy()
        .select("workload", "scheduled_s", "outcome", "latency_ms")
        .filter((pl.col("scheduled_s") >= x_min) & (pl.col("scheduled_s") < x_max))
        .join(params.lazy(), on="workload", how="inner")  # a join is cheaper than a replace
        .with_columns(lat.alias("_lat"))
        .with_columns(
            ((pl.col("scheduled_s") - pl.col("_a")) / pl.col("_w"))
            .floor()
            .cast(pl.Int64)
            .alias("index")
        )
        .group_by("workload", "index")
        .agg(
            pl.len().cast(pl.Int64).alias("n_units"),
            done.sum().cast(pl.Int64).alias("n_completed"),
            pl.col("_lat").quantile(0.50, "linear").alias("p50_ms"),
            pl.col("_lat").quantile(0.95, "linear").alias("p95_ms"),
            pl.col("_lat").quantile(0.99, "linear").alias("p99_ms"),
            (outcome == "late").fill_null(False).sum().cast(pl.Int64).alias("n_late"),
            (outcome == "error").fill_null(False).sum().cast(pl.Int64).alias("n_error"),
            (outcome == "dropped").fill_null(False).sum().cast(pl.Int64).alias("n_dropped"),
            pl.col("_a").first(),
            pl.col("_w").first(),
        )
        .with_columns(
            (pl.col("_a") + pl.col("index").cast(pl.Float64) * pl.col("_w")).alias("start_s")
        )
        .with_columns(
            pl.min_horizontal(pl.col("start_s") + pl.col("_w"), pl.lit(x_max)).alias("end_s")
        )
        .select(list(_LATENCY_SCHEMA))
        .sort("workload", "index")
        .collect()
    )
    return frame.cast(pl.Schema(_LATENCY_SCHEMA))


def _events_frame(run: RunData) -> pl.DataFrame:
    rows: list[dict[str, Any]] = []
    for e in run.events:
        kinds = [k for k in ("fault", "alert", "inspection") if getattr(e, k)]
        kind = kinds[0] if kinds else ("alert" if e.status == "skipped" else "event")
        what = getattr(e, kind, None) if kinds else None
        rows.append(
            {
                "event_id": e.event_id,
                "t_s": float(e.t_scn if e.t_scn is not None else e.at_s),
                "at_s": float(e.at_s),
                "type": kind,
                "what": str(what) if what else "",
                "status": e.status,
            }
        )
    schema = {
        "event_id": pl.String,
        "t_s": pl.Float64,
        "at_s": pl.Float64,
        "type": pl.String,
        "what": pl.String,
        "status": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row" if rows else None)


_EPS = 1e-9


def preceding_events(
    starts: Sequence[float], events: Sequence[tuple[float, str]]
) -> list[str | None]:
    """For each start time, the id of the latest event at or before it (None: before all).

    ``events`` are (time_s, event_id) pairs in any order; of events at the same time, the one
    listed last is the latest (the program's order).
    """
    ordered = sorted(events, key=lambda e: e[0])  # stable: ties keep their listed order
    times = [t for t, _ in ordered]
    out: list[str | None] = []
    for start in starts:
        i = bisect_right(times, start + _EPS)
        out.append(ordered[i - 1][1] if i else None)
    return out


def occurred_events(events: pl.DataFrame) -> list[tuple[float, str]]:
    """(scheduled time, id) of the events that happened: the last record of each is ``fired``."""
    if events.height == 0:
        return []
    last = events.group_by("event_id", maintain_order=True).last()
    fired = last.filter(pl.col("status") == "fired").sort("at_s", maintain_order=True)
    return list(zip(fired["at_s"].to_list(), fired["event_id"].to_list(), strict=True))


_MISSED_COLUMNS = ["workload", "index", "start_s", "end_s", "n_units", "n_on_time", "ratio"]


def missed_windows(windows: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """The missed windows (scored, not compliant), each with the event it follows.

    ``windows`` is :attr:`RunSeries.windows` (``has_objective`` optional: without it every
    window is a scored one) and ``events`` the events frame (``event_id``, ``at_s``, ``type``,
    ``status``). ``after_event`` is null for a window before every event.
    """
    scored = pl.col("has_objective") if "has_objective" in windows.columns else pl.lit(True)
    missed = (
        windows.filter(scored & (pl.col("compliant") == False))  # noqa: E712
        .sort("workload", "index")
        .select(_MISSED_COLUMNS)
    )
    happened = occurred_events(events)
    after = preceding_events(missed["start_s"].to_list(), happened)
    at = {e: t for t, e in happened}
    kind = dict(zip(events["event_id"].to_list(), events["type"].to_list(), strict=True))
    return missed.with_columns(
        pl.Series("after_event", after, pl.String),
        pl.Series("after_type", [kind.get(e) if e else None for e in after], pl.String),
        pl.Series("after_at_s", [at.get(e) if e else None for e in after], pl.Float64),
    )


def missed_by_event(missed: pl.DataFrame) -> pl.DataFrame:
    """Per workload and preceding event: how many windows were missed, first to last, in
    time order (``after_event`` null: before every event)."""
    return (
        missed.group_by("workload", "after_event", maintain_order=True)
        .agg(
            pl.col("after_type").first(),
            pl.len().cast(pl.Int64).alias("n_missed"),
            pl.col("start_s").min().alias("first_start_s"),
            pl.col("end_s").max().alias("last_end_s"),
        )
        .sort("workload", "first_start_s")
    )


def _actor_frame(run: RunData, end_s: float) -> pl.DataFrame:
    """One span per actor: started .. finished/failed/cancelled (or end of run)."""
    spans: dict[str, dict[str, Any]] = {}
    for a in run.actors:
        t = a.t_scn
        if a.status == "started":
            spans[a.actor] = {
                "actor": a.actor,
                "application_name": a.application_name or "",
                "role": a.role or "",
                "protected": bool(a.protected),
                "start_s": float(t) if t is not None else 0.0,
                "end_s": None,
                "end_status": "running",
                "pid": a.pid,
            }
        elif a.actor in spans and spans[a.actor]["end_s"] is None:
            spans[a.actor]["end_s"] = float(t) if t is not None else end_s
            spans[a.actor]["end_status"] = a.status
            spans[a.actor]["protected"] = spans[a.actor]["protected"] or bool(a.protected)
    rows = []
    for s in spans.values():
        if s["end_s"] is None:
            s["end_s"] = end_s
        rows.append(s)
    schema = {
        "actor": pl.String,
        "application_name": pl.String,
        "role": pl.String,
        "protected": pl.Boolean,
        "start_s": pl.Float64,
        "end_s": pl.Float64,
        "end_status": pl.String,
        "pid": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row" if rows else None)


def _tool_frame(run: RunData) -> pl.DataFrame:
    bad = violating_calls(run)
    rows = []
    for c in run.tool_calls:
        vs = bad.get(c.call_id, [])
        rules = sorted({str(v.get("rule_id", "?")) for v in vs})
        types = sorted({str(v.get("type")) for v in vs if v.get("type")})
        t = c.t_scn if c.t_scn is not None else 0.0
        rows.append(
            {
                "call_id": c.call_id,
                "tool": c.tool,
                "t_s": float(t),
                "t_end_s": float(c.t_scn_end) if c.t_scn_end is not None else float(t),
                "ok": bool(c.ok),
                "status": c.status,
                "n_violations": len(vs),
                "rules": ",".join(rules),
                "types": ",".join(types),
                "args": _short(c.args),
            }
        )
    schema = {
        "call_id": pl.String,
        "tool": pl.String,
        "t_s": pl.Float64,
        "t_end_s": pl.Float64,
        "ok": pl.Boolean,
        "status": pl.String,
        "n_violations": pl.Int64,
        "rules": pl.String,
        "types": pl.String,
        "args": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row" if rows else None)


def _model_call_frame(run: RunData) -> pl.DataFrame:
    """The agent's model calls on the scenario clock: each ends at its record's time and
    lasted its wall time (retries and backoff included) over the run's time scale."""
    scale = run.header.time_scale if run.header is not None else 1.0
    rows = []
    for c in run.model_calls:
        if c.t_scn is None:
            continue
        rows.append(
            {
                "t_s": float(c.t_scn) - c.elapsed_ms / 1000.0 / (scale or 1.0),
                "t_end_s": float(c.t_scn),
                "latency_ms": float(c.latency_ms),
                "retries": int(c.retries),
                "ok": c.error is None,
                "model": c.model_name,
            }
        )
    schema = {
        "t_s": pl.Float64,
        "t_end_s": pl.Float64,
        "latency_ms": pl.Float64,
        "retries": pl.Int64,
        "ok": pl.Boolean,
        "model": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row" if rows else None)


def _short(args: dict[str, Any], limit: int = 160) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _server_frame(run_dir: Path, engine: str) -> pl.DataFrame:
    """The server panel's series (the engine dialect's ``server_panel``) of a run."""
    schema = {"t_s": pl.Float64, "series": pl.String, "value": pl.Float64}
    try:
        metrics = read_metrics(run_dir)
    except Exception:  # a damaged metrics table must not prevent the plot
        return pl.DataFrame(schema=schema)
    if metrics.height == 0:
        return pl.DataFrame(schema=schema)
    frames = []
    for series in engine_dialect(engine).server_panel:
        sel = metrics.lazy().filter(pl.col("metric") == series.metric).group_by("t_s")
        agg = pl.col("value").sum() if series.aggregation == "sum" else pl.col("value").max()
        frames.append(
            sel.agg(agg.alias("value"))
            .with_columns(pl.lit(series.legend).alias("series"))
            .select("t_s", "series", "value")
        )
    out = pl.concat(frames).collect().sort("series", "t_s")
    return out.cast(pl.Schema(schema))


def _deadline_ms(spec: Any) -> float | None:
    d = getattr(spec, "deadline_ms", None)
    return float(d) if isinstance(d, int | float) else None


def run_series(run_dir: Path, samples: pl.DataFrame | None = None) -> RunSeries:
    """Load and aggregate everything :func:`dbaops.analysis.plot.plot_run` draws."""
    run = load_run(Path(run_dir))
    if run.scenario is None:
        raise ValueError(f"{run_dir}: cannot read scenario.yaml ({run.scenario_error})")
    sc = run.scenario
    objectives = dict(sc.evaluation.service_compliance)
    horizon = run.scheduled_horizon_s or sc.horizon_s or run.last_t_scn or 1.0
    scored = run.scored_horizon_s or horizon
    x_min = min(0.0, -sc.preparation.warmup_s)
    if samples is None:
        cols = ["workload", "kind", "scheduled_s", "latency_ms", "outcome", "correct"]
        if any(o.mode == "every_unit" for o in objectives.values()):
            cols += ["unit", "sqlstate"]
        samples = read_sample_columns(run.path, cols)

    names = [w.name for w in sc.workloads]
    seen = samples.get_column("workload").unique().drop_nulls().sort().to_list()
    names += [n for n in seen if n not in names]
    extra_obj = {
        n: ServiceObjective(window_s=DEFAULT_WINDOW_S) for n in names if n not in objectives
    }
    compliance = evaluate_service_compliance(samples, objectives, scored)
    extra = (
        evaluate_service_compliance(samples, extra_obj, scored)
        if extra_obj
        else ServiceComplianceVerdict(applicable=False, passed=True, horizon_s=scored)
    )
    windows = pl.concat(
        [
            compliance_windows_frame(compliance).with_columns(pl.lit(True).alias("has_objective")),
            compliance_windows_frame(extra).with_columns(pl.lit(False).alias("has_objective")),
        ]
    )
    kinds = {w.name: w.type for w in sc.workloads}
    workloads: list[WorkloadInfo] = []
    grids: dict[str, tuple[float, float]] = {}
    for n in names:
        has = n in objectives
        obj = objectives[n] if has else extra_obj[n]
        res = compliance.workloads.get(n) if has else None
        kind = kinds.get(n) or (res.kind if res else None)
        if kind is None and n in extra.workloads:
            kind = extra.workloads[n].kind
        spec = next((w for w in sc.workloads if w.name == n), None)
        workloads.append(
            WorkloadInfo(
                name=n,
                kind=kind,
                has_objective=has,
                objective=obj,
                result=res,
                deadline_ms=_deadline_ms(spec),
            )
        )
        grids[n] = (obj.from_s + obj.grace_s, obj.window_s)
    latency = latency_windows(samples, grids, x_min, scored)
    end_s = run.last_t_scn if run.end is None and run.last_t_scn is not None else horizon
    events = _events_frame(run)
    return RunSeries(
        run=run,
        horizon_s=horizon,
        scored_horizon_s=scored,
        x_min=x_min,
        compliance=compliance,
        workloads=workloads,
        windows=windows,
        latency=latency,
        events=events,
        actors=_actor_frame(run, min(end_s, horizon)),
        tool_calls=_tool_frame(run),
        model_calls=_model_call_frame(run),
        server=_server_frame(run.path, sc.engine),
        missed=missed_windows(windows, events),
    )
