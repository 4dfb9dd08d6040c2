"""``query_metrics``: server metrics from the sampler and workload SLO series from the samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from dbaops.clock import ScenarioClock
from dbaops.dbms.dialect import EngineDialect
from dbaops.execution.metrics_query import (
    UnknownMetricError,
    format_series,
    list_metrics,
    query_series,
)
from dbaops.execution.metrics_registry import JUDGE_ONLY_METRICS
from dbaops.tools.base import Tool, ToolResult, ToolSpec

WORKLOAD_METRICS = {
    "workload.on_time_ratio": "share of units finished within their deadline",
    "workload.p50_ms": "median latency from scheduled start (ms)",
    "workload.p95_ms": "95th percentile latency from scheduled start (ms)",
    "workload.p99_ms": "99th percentile latency from scheduled start (ms)",
    "workload.throughput": "units per scenario second (all outcomes)",
    "workload.errors": "failed units per step",
    "workload.dropped": "units dropped by the client (too many in flight)",
}


def workload_series(
    samples: pl.DataFrame, name: str, window: tuple[float, float], step_s: float
) -> pl.DataFrame:
    """One workload metric per step bucket and workload (label = workload name)."""
    f = samples.filter(pl.col("scheduled_s").is_between(window[0], window[1]))
    f = f.with_columns(
        (((pl.col("scheduled_s") - window[0]) // step_s) * step_s + window[0]).alias("t_s")
    )
    aggs = {
        "workload.on_time_ratio": (pl.col("outcome") == "on_time").mean(),
        "workload.p50_ms": pl.col("latency_ms").quantile(0.5),
        "workload.p95_ms": pl.col("latency_ms").quantile(0.95),
        "workload.p99_ms": pl.col("latency_ms").quantile(0.99),
        "workload.throughput": pl.len() / step_s,
        "workload.errors": (pl.col("outcome") == "error").sum(),
        "workload.dropped": (pl.col("outcome") == "dropped").sum(),
    }
    return (
        f.group_by("t_s", "workload")
        .agg(aggs[name].cast(pl.Float64).alias("value"))
        .select(
            "t_s",
            pl.lit(name).alias("metric"),
            pl.col("workload").alias("label"),
            "value",
            pl.lit("").alias("unit"),
        )
        .sort("label", "t_s")
    )


def metrics_tool(
    metrics_frame: Callable[[], pl.DataFrame],
    samples_frame: Callable[[], pl.DataFrame],
    clock: ScenarioClock,
    *,
    dialect: EngineDialect,
) -> Tool:
    """``query_metrics`` over the sampler's metrics and the workload samples, named and
    described as the engine's ``dialect`` declares them (``metrics``, ``metrics_overview``)."""
    overview, registry = dialect.metrics_overview, dialect.metrics

    async def handler(args: dict[str, Any]) -> ToolResult:
        names = args.get("names") or []
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        now = clock.now()
        win = args.get("window")
        last = args.get("last_s")
        if isinstance(win, list | tuple) and len(win) == 2:
            window = (float(win[0]), float(win[1]))
        else:
            span = float(last) if last else 300.0
            window = (max(0.0, now - span), now)
        step = (
            float(args["step_s"]) if args.get("step_s") else max(1.0, (window[1] - window[0]) / 30)
        )
        frame = metrics_frame()
        if "metric" in frame.columns:  # what the judge measures of the agent stays the judge's
            frame = frame.filter(~pl.col("metric").is_in(list(JUDGE_ONLY_METRICS)))
        hidden = [n for n in names if n in JUDGE_ONLY_METRICS]
        if hidden:
            return ToolResult(
                ok=False,
                error=f"unknown metric {hidden[0]!r}",
                observation=f"error: unknown metric {hidden[0]!r}; call with no names to list them",
            )
        if not names:
            infos = list_metrics(frame, registry=registry)
            lines = [f"{m.name} [{m.kind}, {m.unit}] {m.description}" for m in infos]
            lines += [f"{k} [workload] {v}" for k, v in WORKLOAD_METRICS.items()]
            return ToolResult(
                ok=True, observation="Available metrics (pass names=[...]):\n" + "\n".join(lines)
            )
        parts: list[pl.DataFrame] = []
        server = [n for n in names if not n.startswith("workload.")]
        for n in names:
            if n.startswith("workload."):
                if n not in WORKLOAD_METRICS:
                    return ToolResult(
                        ok=False,
                        error=f"unknown metric {n!r}",
                        observation=f"error: unknown metric {n!r}; workload metrics: "
                        + ", ".join(WORKLOAD_METRICS),
                    )
                parts.append(workload_series(samples_frame(), n, window, step))
        if server:
            try:
                rate = bool(args.get("rate"))
                parts.append(query_series(frame, server, window, step, rate, registry))
            except (UnknownMetricError, ValueError) as exc:
                return ToolResult(ok=False, error=str(exc), observation=f"error: {exc}")
        if not parts:
            return ToolResult(ok=True, observation="no data")
        result = pl.concat(parts, how="diagonal_relaxed")
        text = f"window [{window[0]:.0f}, {window[1]:.0f}] s, step {step:.0f} s\n"
        return ToolResult(ok=True, observation=text + format_series(result))

    spec = ToolSpec(
        name="query_metrics",
        description=(
            f"Time series of server metrics (sampled every scenario second: {overview}) "
            "and workload SLO series (workload.on_time_ratio, workload.p95_ms, ...). Call with "
            "no names to list what exists. window=[from_s, to_s] in scenario seconds or last_s; "
            "step_s resamples; rate=true turns counters into per-second rates."
        ),
        parameters={
            "type": "object",
            "properties": {
                "names": {"type": "array", "items": {"type": "string"}},
                "window": {"type": "array", "items": {"type": "number"}},
                "last_s": {"type": "number"},
                "step_s": {"type": "number"},
                "rate": {"type": "boolean"},
            },
        },
    )
    return Tool(spec=spec, handler=handler)
