"""Pure functions over a metrics frame: list, select/resample/rate, and render for an agent.

These back the agent tool ``query_metrics(names, window, step)``; they need no database.

Selectors
    ``db.xact_commit``            one metric, all labels
    ``table.*`` / ``locks.wait*`` shell-style wildcards over known metric names
    ``table.n_dead_tup{orders}``  only labels containing the text between braces

Resampling with ``step_s`` groups samples into buckets ``[t, t + step_s)`` (``t_s`` of the
output is the bucket start, aligned to the window start or to 0): gauges -> mean, counters ->
last value, deltas -> sum. With ``rate=True`` counters and deltas become per-second rates:
counters ``sum(increase) / sum(elapsed)`` over consecutive samples of the same series (a
decrease counts as a reset, the increase is then the new value); deltas ``sum(delta) / time
covered by samples``. Gauges are returned as without ``rate``.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import re
from collections.abc import Mapping

import polars as pl
from pydantic import BaseModel

from dbaops.dbms.metric_spec import MetricSpec
from dbaops.execution.metrics_registry import ALL_METRICS, metric_kind_expr
from dbaops.record.tables import METRIC_SCHEMA

_SELECTOR = re.compile(r"\s*([^{}\s]+)\s*(?:\{([^{}]*)\})?\s*")


class MetricInfo(BaseModel):
    """What ``list_metrics`` reports about one metric."""

    name: str
    kind: str
    unit: str
    description: str
    label_key: str = ""
    labels: list[str] = []
    n_labels: int = 0


class UnknownMetricError(ValueError):
    """Some requested names match no known metric; carries close matches per name."""

    def __init__(self, suggestions: dict[str, list[str]]) -> None:
        self.suggestions = suggestions
        parts = []
        for name, close in suggestions.items():
            hint = f"; did you mean: {', '.join(close)}?" if close else ""
            parts.append(f"unknown metric {name!r}{hint}")
        super().__init__("; ".join(parts) + " (list_metrics shows all metric names)")


def list_metrics(
    frame: pl.DataFrame | None,
    *,
    include_absent: bool = False,
    max_labels: int = 30,
    registry: Mapping[str, MetricSpec] = ALL_METRICS,
) -> list[MetricInfo]:
    """Metrics present in ``frame`` (or the whole registry with ``include_absent``), described
    from ``registry`` (the engine's; every engine's by default)."""
    seen: dict[str, list[str]] = {}
    if frame is not None and frame.height:
        grouped = (
            frame.select("metric", "label")
            .unique()
            .sort("metric", "label")
            .group_by("metric", maintain_order=True)
            .agg(pl.col("label"))
        )
        seen = {m: [lb for lb in labels if lb] for m, labels in grouped.iter_rows()}
    names = sorted(set(seen) | (set(registry) if include_absent else set()))
    out = []
    for name in names:
        spec = registry.get(name)
        labels = seen.get(name, [])
        out.append(
            MetricInfo(
                name=name,
                kind=spec.kind if spec else "gauge",
                unit=spec.unit if spec else "",
                description=spec.description if spec else "(not in registry)",
                label_key=spec.label if spec else "",
                labels=labels[:max_labels],
                n_labels=len(labels),
            )
        )
    return out


def format_metric_list(infos: list[MetricInfo], max_labels: int = 5) -> str:
    """One line per metric for an agent: name, kind, unit, labels seen, description."""
    lines = []
    for i in infos:
        unit = f" [{i.unit}]" if i.unit else ""
        labels = ""
        if i.n_labels:
            shown = ", ".join(i.labels[:max_labels])
            more = f", +{i.n_labels - max_labels} more" if i.n_labels > max_labels else ""
            labels = f" {{{shown}{more}}}"
        elif i.label_key:
            labels = f" {{{i.label_key}=...}}"
        lines.append(f"{i.name} ({i.kind}){unit}{labels}: {i.description}")
    return "\n".join(lines)


def _resolve(
    frame: pl.DataFrame, names: list[str], registry: Mapping[str, MetricSpec]
) -> list[tuple[str, str | None]]:
    present = set(frame.get_column("metric").unique().to_list()) if frame.height else set()
    known = sorted(set(registry) | present)
    selected: list[tuple[str, str | None]] = []
    unknown: dict[str, list[str]] = {}
    for raw in names:
        m = _SELECTOR.fullmatch(raw)
        if not m:
            unknown[raw] = []
            continue
        name, label_filter = m.group(1), m.group(2) or None
        if any(c in name for c in "*?["):
            matched = fnmatch.filter(known, name)
        else:
            matched = [name] if name in known else []
        if not matched:
            base = name.rstrip("*?[]")
            close = difflib.get_close_matches(base, known, n=5, cutoff=0.6)
            close += [k for k in known if k.startswith(base) and k not in close][: 5 - len(close)]
            unknown[raw] = close
            continue
        selected.extend((x, label_filter) for x in matched)
    if unknown:
        raise UnknownMetricError(unknown)
    return selected


def _bucket(step_s: float, origin: float) -> pl.Expr:
    return ((pl.col("t_s") - origin) / step_s).floor() * step_s + origin


def query_series(
    frame: pl.DataFrame,
    names: list[str],
    window: tuple[float, float] | None = None,
    step_s: float | None = None,
    rate: bool = False,
    registry: Mapping[str, MetricSpec] = ALL_METRICS,
) -> pl.DataFrame:
    """Select series by name, restrict to ``window`` (inclusive), resample and take rates
    (names and units from ``registry``, the engine's; every engine's by default).

    Returns columns ``t_s, metric, label, value, unit`` sorted by metric, label and time.
    Raises :class:`UnknownMetricError` (with close matches) for names that match nothing known.
    """
    if step_s is not None and not step_s > 0:
        raise ValueError("step_s must be positive")
    if window is not None and window[0] > window[1]:
        raise ValueError("window start is after its end")
    selected = _resolve(frame, names, registry)
    cond: pl.Expr = pl.lit(False)
    for metric, label_filter in selected:
        c = pl.col("metric") == metric
        if label_filter:
            c = c & pl.col("label").str.contains(label_filter, literal=True)
        cond = cond | c
    metrics = sorted({m for m, _ in selected})
    units = {m: (registry[m].unit if m in registry else "") for m in metrics}
    df = (
        frame.select(list(METRIC_SCHEMA))
        .cast(METRIC_SCHEMA)  # type: ignore[arg-type]
        .filter(cond)
        .with_columns(kind=metric_kind_expr())
        .sort("metric", "label", "t_s")
    )
    keys = ["metric", "label"]
    is_counter = pl.col("kind") == "counter"
    is_delta = pl.col("kind") == "delta"
    timeline = _timeline(frame)
    if rate:
        prev_v = pl.col("value").shift(1).over(keys)
        prev_t = pl.col("t_s").shift(1).over(keys)
        df = (
            df.sort("t_s")
            .join_asof(timeline.select("t_s", "tl_dt"), on="t_s", strategy="backward")
            .sort("metric", "label", "t_s")
            .with_columns(
                inc=pl.when(is_counter)
                .then(
                    pl.when(prev_v.is_null())
                    .then(None)
                    .when(pl.col("value") >= prev_v)
                    .then(pl.col("value") - prev_v)
                    .otherwise(pl.col("value"))
                )
                .when(is_delta)
                .then(pl.col("value")),
                dt=pl.when(is_counter)
                .then(pl.col("t_s") - prev_t)
                .when(is_delta)
                # a delta at a timeline point covers the time since the previous point
                .then(pl.col("tl_dt")),
            )
        )
    if window is not None:
        df = df.filter(pl.col("t_s").is_between(window[0], window[1]))
        timeline = timeline.filter(pl.col("t_s").is_between(window[0], window[1]))
    is_rated = (is_counter | is_delta) if rate else pl.lit(False)
    if step_s is None:
        if rate:
            df = df.with_columns(
                value=pl.when(is_rated).then(pl.col("inc") / pl.col("dt")).otherwise("value")
            ).filter(pl.col("value").is_not_null() & pl.col("value").is_finite())
    else:
        origin = window[0] if window is not None else 0.0
        df = df.with_columns(b=_bucket(step_s, origin))
        kind = pl.col("kind").first()
        if rate:
            covered = (
                timeline.with_columns(b=_bucket(step_s, origin))
                .group_by("b")
                .agg(covered=pl.col("tl_dt").sum())
            )
            df = (
                df.group_by([*keys, "b"])
                .agg(
                    kind=kind,
                    inc=pl.col("inc").filter(pl.col("dt").is_not_null()).sum(),
                    dt=pl.col("dt").filter(pl.col("inc").is_not_null()).sum(),
                    mean=pl.col("value").mean(),
                )
                .join(covered, on="b", how="left")
                .with_columns(
                    value=pl.when(is_counter)
                    .then(pl.col("inc") / pl.col("dt"))
                    .when(is_delta)
                    .then(pl.col("inc") / pl.col("covered"))
                    .otherwise(pl.col("mean"))
                )
                .filter(pl.col("value").is_not_null() & pl.col("value").is_finite())
            )
        else:
            df = df.group_by([*keys, "b"]).agg(
                kind=kind,
                value=pl.when(kind == "counter")
                .then(pl.col("value").last())
                .when(kind == "delta")
                .then(pl.col("value").sum())
                .otherwise(pl.col("value").mean()),
            )
        df = df.with_columns(t_s=pl.col("b"))
    unit = pl.col("metric").replace_strict(units, default="")
    return (
        df.with_columns(
            unit=pl.when(is_rated & (unit != ""))
            .then(unit + "/s")
            .when(is_rated)
            # a rated unit-less metric
            .then(pl.lit("1/s"))
            .otherwise(unit)
        )
        .select("t_s", "metric", "label", "value", "unit")
        .sort("metric", "label", "t_s")
    )


def _timeline(frame: pl.DataFrame) -> pl.DataFrame:
    """Sample instants (successful samples if ``sampler.up`` is recorded) with their spacing."""
    up = frame.filter((pl.col("metric") == "sampler.up") & (pl.col("value") == 1.0))
    source = up if up.height else frame
    return (
        source.select(pl.col("t_s").cast(pl.Float64))
        .unique()
        .sort("t_s")
        .with_columns(tl_dt=pl.col("t_s") - pl.col("t_s").shift(1))
    )


def _fmt(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return str(v)
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.4g}"


def format_series(df: pl.DataFrame, max_rows: int = 200, per_line: int = 10) -> str:
    """Compact text of a :func:`query_series` result: one header per series, then ``t:value``.

    At most ``max_rows`` values are printed in total; longer series are thinned evenly (first
    and last kept) and the header says so.
    """
    if df.height == 0:
        return "(no data)"
    max_rows = max(2, max_rows)
    has_unit = "unit" in df.columns
    series = df.sort("metric", "label", "t_s").partition_by(
        ["metric", "label"], maintain_order=True
    )
    shown = series[: max(1, max_rows // 2)]
    per_series = max(2, max_rows // len(shown))
    lines: list[str] = []
    for s in shown:
        metric, label = s["metric"][0], s["label"][0]
        unit = s["unit"][0] if has_unit else ""
        values = s["value"].to_list()
        times = s["t_s"].to_list()
        n = len(values)
        idx = list(range(n))
        if n > per_series:
            k = per_series - 1
            idx = sorted({round(i * (n - 1) / k) for i in range(per_series)})
        head = f"{metric}{{{label}}}" + (f" [{unit}]" if unit else "")
        stats = (
            f"n={n} min={_fmt(min(values))} max={_fmt(max(values))} "
            f"mean={_fmt(sum(values) / n)} last={_fmt(values[-1])}"
        )
        thinned = f" (showing {len(idx)} of {n})" if len(idx) < n else ""
        lines.append(f"{head} {stats}{thinned}")
        tokens = [f"{times[i]:.1f}:{_fmt(values[i])}" for i in idx]
        for j in range(0, len(tokens), per_line):
            lines.append("  " + " ".join(tokens[j : j + per_line]))
    if len(shown) < len(series):
        lines.append(f"... {len(series) - len(shown)} more series omitted (narrow the names)")
    return "\n".join(lines)
