"""Evaluating scenario checks into trace records.

SQL and plan checks ask the database; workload, metric and server-log checks read what the run
records (the SLO samples, the metric sampler's rows, the run directory's copy of the server
log), so their evidence can be audited against the run directory. Each record carries a
compact observed value, the expectation, and the window it covered. Report checks are not
evaluated here: they are judged at scoring time from the recorded report
(:mod:`dbaops.evaluation.report_checks`).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dbaops.clock import ScenarioClock
from dbaops.dbms.plans import PlanNode
from dbaops.dbms.sessions import SERVER_ERRORS, RunEndpoint, Session, session_dialect, sessions_of
from dbaops.execution.metrics_registry import metric_kind
from dbaops.record.kinds import CheckRecord
from dbaops.scenario.checks import (
    BaselineWindow,
    CheckSpec,
    LedgerCheck,
    MetricCheck,
    PlanCheck,
    ReportCheck,
    ServerLogCheck,
    SqlCheck,
    WorkloadCheck,
    compare,
)
from dbaops.workloads.ledger import ledger_bounds
from dbaops.workloads.sink import SampleSink, censored_latency_stat, workload_stat


@dataclass(frozen=True)
class CheckSources:
    """What the run has recorded so far, for checks that read it (None: not recorded).

    ``metrics`` returns the metric sampler's rows so far; ``server_log`` is the run
    directory's copy of the server log and ``refresh_server_log`` copies the lines the server
    wrote since the last copy (called before reading it); ``log_line_stamp`` reads a line's
    wall time in the engine's log format (its dialect's).
    """

    metrics: Callable[[], pl.DataFrame] | None = None
    server_log: Path | None = None
    refresh_server_log: Callable[[], object] | None = None
    log_line_stamp: Callable[[str], tuple[float, int] | None] | None = None
    standby: RunEndpoint | None = None  # the replica profile's standby, for ``server: standby``
    ledger_baselines: dict[str, Any] | None = None  # ledger checks' measures before the load


class CheckUnavailable(Exception):
    """The evidence a check needs is missing; recorded as a failed check with this reason."""


@dataclass(frozen=True)
class _Outcome:
    passed: bool
    observed: Any
    error: str | None = None


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return str(value)


def _num(x: float | None) -> float | str | None:
    """A statistic for the record: rounded, and infinite ratios spelled out (JSON has none)."""
    if x is None:
        return None
    if math.isinf(x) or math.isnan(x):
        return str(x)
    return round(x, 6)


def expectation(check: CheckSpec) -> str:
    """What a check expects, as recorded next to what it observed."""
    if isinstance(check, SqlCheck):
        return f"{check.op} {check.expect!r}"
    if isinstance(check, WorkloadCheck):
        stat = f"sqlstate_ratio({check.sqlstate})" if check.sqlstate else check.stat
        return f"{stat} {check.op} {check.value}{_times_baseline(check.baseline)}"
    if isinstance(check, MetricCheck):
        series = check.metric + (f"{{{check.label}}}" if check.label else "")
        return (
            f"{check.stat}({series} over {check.over_s:g} s) {check.op} {check.value}"
            f"{_times_baseline(check.baseline)}"
        )
    if isinstance(check, ServerLogCheck):
        if check.over_s is not None:
            window = f"last {check.over_s:g} s"
        else:
            until = "now" if check.until_s is None else f"{check.until_s:g} s"
            window = f"{check.since_s:g} s .. {until}"
        return f"count(/{check.pattern}/ in {window}) {check.op} {check.value}"
    if isinstance(check, PlanCheck):
        return "; ".join(_plan_expectations(check))
    if isinstance(check, LedgerCheck):
        if not check.units:
            return "unchanged since the prepared state"
        per = ", ".join(f"{w:g} per committed {u}" for u, w in check.units.items())
        return f"change since the prepared state within the ledger's bounds ({per})"
    return f"judged at scoring from the report's {check.field}"


def _times_baseline(baseline: BaselineWindow | None) -> str:
    if baseline is None:
        return ""
    return f" x baseline [{baseline.since_s:g}, {baseline.until_s:g}) s"


async def evaluate_check(
    check: CheckSpec,
    purpose: str,
    endpoint: RunEndpoint,
    clock: ScenarioClock,
    sink: SampleSink | None,
    sources: CheckSources | None = None,
) -> CheckRecord:
    """Evaluate one check now; failures to evaluate are recorded as passed=False with the error."""
    t = clock.now()
    expected = expectation(check)
    sources = sources or CheckSources()
    try:
        if getattr(check, "server", "primary") == "standby":
            if sources.standby is None:
                raise CheckUnavailable("the check runs on the standby, but the run has none")
            endpoint = sources.standby
        outcome = await _evaluate(check, t, endpoint, clock, sink, sources)
    except Exception as exc:  # any failure to evaluate is evidence, not a crash
        error = str(exc) if isinstance(exc, CheckUnavailable) else f"{type(exc).__name__}: {exc}"
        return CheckRecord(
            t_scn=t,
            purpose=purpose,
            name=check.name,
            passed=False,
            expected=expected,
            error=error[:500],
        )
    return CheckRecord(
        t_scn=t,
        purpose=purpose,
        name=check.name,
        passed=outcome.passed,
        observed=_jsonable(outcome.observed),
        expected=expected,
        error=outcome.error,
    )


async def _evaluate(
    check: CheckSpec,
    t: float,
    endpoint: RunEndpoint,
    clock: ScenarioClock,
    sink: SampleSink | None,
    sources: CheckSources,
) -> _Outcome:
    if isinstance(check, SqlCheck):
        conn = await _connect(check.role, check.login, check.database, endpoint)
        try:
            observed = await conn.fetchval(check.sql, timeout=60)
        finally:
            await conn.close(timeout=5)
        return _Outcome(compare(observed, check.op, check.expect), observed)
    if isinstance(check, WorkloadCheck):
        if sink is not None:
            await sink.refresh()
        return _workload(check, t, clock, sink)
    if isinstance(check, PlanCheck):
        return await _plan(check, endpoint)
    if isinstance(check, ServerLogCheck):
        return _server_log(check, t, clock, sources)
    if isinstance(check, MetricCheck):
        return _metric(check, t, sources)
    if isinstance(check, LedgerCheck):
        return await _ledger(check, endpoint, sink, sources)
    assert isinstance(check, ReportCheck)
    raise CheckUnavailable(
        "a report check is judged at scoring from the agent's report; only evaluation.terminal "
        "may hold it"
    )


async def _connect(role: str, login: bool, database: str | None, endpoint: RunEndpoint) -> Any:
    """A hidden harness probe as ``role`` (see each engine's ``probe_session``)."""
    return await endpoint.probe_session(role, database, login=login)


# -- ledger ------------------------------------------------------------------------------------
async def ledger_baselines(
    checks: list[CheckSpec], endpoint: RunEndpoint
) -> tuple[dict[str, Any], dict[str, str]]:
    """The measures of the ledger checks on the prepared state (before any workload runs),
    and the errors of those that could not be measured (each such check then fails with
    "no baseline", the run goes on)."""
    out: dict[str, Any] = {}
    errors: dict[str, str] = {}
    ledger = [c for c in checks if isinstance(c, LedgerCheck)]
    if not ledger:
        return out, errors
    for check in ledger:
        try:
            out[check.name] = await _measure(check, endpoint)
        except SERVER_ERRORS + (TimeoutError, CheckUnavailable) as exc:
            errors[check.name] = f"{type(exc).__name__}: {exc}"[:300]
    return out, errors


async def _measure(check: LedgerCheck, endpoint: RunEndpoint) -> Any:
    """A ledger check's measure now, from a hidden harness session."""
    conn = await _connect("postgres", False, None, endpoint)
    try:
        if check.count_rows_of is not None:
            return await _count_rows(check.count_rows_of, conn)
        return _jsonable(await conn.fetchval(check.sql, timeout=120))
    finally:
        await conn.close(timeout=5)


#: How often a row count is taken again when a listed table moved before it was counted.
_COUNT_ATTEMPTS = 3


async def _count_rows(listing: str, conn: Session) -> int:
    """The rows stored in the tables ``listing`` names (``schema, name`` per row), counted
    in one statement; listed and counted again if a table moved in between."""
    for _ in range(_COUNT_ATTEMPTS - 1):
        with contextlib.suppress(*SERVER_ERRORS):
            return await _count_listed(listing, conn)
    return await _count_listed(listing, conn)


async def _count_listed(listing: str, conn: Session) -> int:
    tables = [tuple(row.values()) for row in await conn.fetch(listing, timeout=120)]
    if any(len(t) != 2 or not all(isinstance(v, str) for v in t) for t in tables):
        raise CheckUnavailable("count_rows_of must list (schema, name) rows of text")
    if not tables:
        return 0
    count_rows = session_dialect(conn).count_rows
    counting = "SELECT " + " + ".join(count_rows(s, n) for s, n in tables)
    return int(await conn.fetchval(counting, timeout=120))


async def _ledger(
    check: LedgerCheck, endpoint: RunEndpoint, sink: SampleSink | None, sources: CheckSources
) -> _Outcome:
    if sink is None:
        raise CheckUnavailable("no driver ledger available")
    baselines = sources.ledger_baselines or {}
    if check.name not in baselines:
        raise CheckUnavailable("no baseline: the measure was not taken on the prepared state")
    base = baselines[check.name]
    await sink.refresh()
    before = sink.ledger.snapshot()
    value = await _measure(check, endpoint)
    await sink.refresh()
    after = sink.ledger.snapshot()
    observed: dict[str, Any] = {"baseline": base, "value": value}
    if not check.units:
        return _Outcome(value == base, observed)
    observed["ledger"] = {u: after.entry(u).model_dump() for u in check.units}
    try:
        change = float(value) - float(base)
    except (TypeError, ValueError):
        return _Outcome(False, observed, "the measure is not a number")
    low, high = ledger_bounds(before, after, check.units)
    observed.update(change=_num(change), allowed=[_num(low), _num(high)])
    return _Outcome(low <= change <= high, observed)


# -- baselines ---------------------------------------------------------------------------------
def _ratio(observed: float | None, baseline: float | None) -> float | None:
    if observed is None or baseline is None:
        return None
    if baseline == 0:
        return 1.0 if observed == 0 else math.inf
    return observed / baseline


def _baseline_ended(baseline: BaselineWindow, t: float) -> None:
    if baseline.until_s > t:
        raise CheckUnavailable(
            f"the baseline window [{baseline.since_s:g}, {baseline.until_s:g}) s has not ended "
            f"at t = {t:.1f} s"
        )


def _relative(
    observed: dict[str, Any], value: float | None, base: float | None, n: int
) -> tuple[float | None, str | None]:
    """Add the baseline to the evidence; returns the ratio to compare and an error, if any."""
    ratio = _ratio(value, base)
    observed.update(baseline=_num(base), baseline_n=n, ratio=_num(ratio))
    error = None
    if base is None:
        error = "no baseline: no samples in the baseline window"
    elif value is None:
        error = "no samples in the window"
    return ratio, error


# -- workload ----------------------------------------------------------------------------------
LATENCY_STATS = ("p50_ms", "p95_ms", "p99_ms")


def _workload(
    check: WorkloadCheck, t: float, clock: ScenarioClock, sink: SampleSink | None
) -> _Outcome:
    if sink is None:
        raise CheckUnavailable("no workload samples available")
    frame = sink.recent(t - check.over_s, now=(t, clock.mono()))
    # units scheduled after the check's instant (relayed by a driver process before the
    # check read the sink) are not part of its window
    frame = frame.filter((frame["workload"] == check.workload) & (frame["scheduled_s"] <= t))
    value = workload_stat(frame, check.stat, check.sqlstate)
    observed: dict[str, Any] = {check.stat: value, "n": frame.height}
    if check.min_units is not None and frame.height < check.min_units:
        return _Outcome(
            False,
            observed,
            f"only {frame.height} units in the window: the check judges at least {check.min_units}",
        )
    if check.baseline is None:
        return _Outcome(compare(value, check.op, check.value), observed)
    _baseline_ended(check.baseline, t)
    base_frame = sink.scheduled_between(check.baseline.since_s, check.baseline.until_s)
    base_frame = base_frame.filter(base_frame["workload"] == check.workload)
    if check.stat in LATENCY_STATS and check.op in ("<", "<="):
        # "at most a fraction of the broken baseline": a unit the client gave up on counts at
        # the time it waited, a lower bound, so the ratio is never flattering (at the speed
        # of use a broken baseline can time out whole)
        base = censored_latency_stat(base_frame, check.stat)
    else:
        base = workload_stat(base_frame, check.stat, check.sqlstate)
    ratio, error = _relative(observed, value, base, base_frame.height)
    return _Outcome(compare(ratio, check.op, check.value), observed, error)


# -- plan (each engine reads its plans into PlanNode: EngineSessions.explain) -----------------
def _misestimate(node: PlanNode) -> float:
    """How far apart estimated and actual rows per loop are, as a factor (1 = exact)."""
    est, act = max(node.plan_rows, 1.0), max(node.actual_rows or 0.0, 1.0)
    return max(est / act, act / est)


def _plan_expectations(check: PlanCheck) -> list[str]:
    on = f" on {check.relation}" if check.relation else ""
    out = []
    if check.has_node:
        out.append(f"has_node any of {check.has_node}{on}")
    if check.lacks_node:
        out.append(f"lacks_node {check.lacks_node}{on}")
    if check.has_index:
        out.append(f"has_index any of {check.has_index}")
    if check.lacks_index:
        out.append(f"lacks_index {check.lacks_index}")
    if check.max_row_misestimate is not None:
        out.append(f"row misestimate <= {check.max_row_misestimate:g}x{on}")
    if check.min_estimated_rows is not None:
        out.append(f"estimated rows >= {check.min_estimated_rows:g}{on}")
    if check.max_estimated_rows is not None:
        out.append(f"estimated rows <= {check.max_estimated_rows:g}{on}")
    if check.scan_direction is not None:
        out.append(f"an index scan{on} reads {check.scan_direction}")
    return out


def judge_plan(check: PlanCheck, nodes: list[PlanNode]) -> tuple[list[str], dict[str, Any]]:
    """The predicates of ``check`` that ``nodes`` fail, and the plan's compact summary."""
    relation = check.relation.rsplit(".", 1)[-1] if check.relation else None
    scope = [n for n in nodes if relation is None or n.relation == relation]
    on = f" on {relation}" if relation else ""
    root = nodes[0]
    summary: dict[str, Any] = {
        "nodes": sorted({n.node_type for n in nodes}),
        "relations": sorted({n.relation for n in nodes if n.relation}),
        "indexes": sorted({n.index for n in nodes if n.index}),
        "root": {
            "node": root.node_type,
            "plan_rows": root.plan_rows,
            "actual_rows": root.actual_rows,
        },
    }
    failed: list[str] = []
    if relation is not None:
        summary["on_relation"] = sorted({n.node_type for n in scope})
        if not scope:
            failed.append(f"the plan has no node on {relation}")
    if check.has_node and scope and not any(n.node_type in check.has_node for n in scope):
        failed.append(f"has_node: no {' / '.join(check.has_node)} node{on}")
    present = sorted({n.node_type for n in scope if n.node_type in check.lacks_node})
    if present:
        failed.append(f"lacks_node: {', '.join(present)}{on}")
    used = {n.index for n in nodes if n.index}
    if check.has_index and not used & set(check.has_index):
        failed.append(f"has_index: none of {', '.join(check.has_index)} is used")
    avoided = sorted(used & set(check.lacks_index))
    if avoided:
        failed.append(f"lacks_index: {', '.join(avoided)} is used")
    if check.max_row_misestimate is not None:
        executed = [n for n in scope if n.loops and n.actual_rows is not None]
        if not executed:
            failed.append(f"max_row_misestimate: no executed node{on}")
        else:
            worst = max(executed, key=_misestimate)
            factor = _misestimate(worst)
            summary["worst_misestimate"] = {
                "node": worst.node_type,
                "relation": worst.relation,
                "plan_rows": worst.plan_rows,
                "actual_rows": worst.actual_rows,
                "factor": round(factor, 3),
            }
            if factor > check.max_row_misestimate:
                failed.append(
                    f"max_row_misestimate: {worst.node_type}{on} estimated {worst.plan_rows:g} "
                    f"rows, got {worst.actual_rows:g} ({factor:.1f}x)"
                )
    failed += _estimate_failures(check, scope, on, summary)
    if check.scan_direction is not None:
        directions = sorted({n.scan_direction for n in scope if n.scan_direction})
        summary["scan_directions"] = directions
        if check.scan_direction not in directions:
            failed.append(
                f"scan_direction: no index scan{on} reads {check.scan_direction} "
                f"(seen: {', '.join(directions) or 'none'})"
            )
    summary["failed"] = failed
    return failed, summary


def _estimate_failures(
    check: PlanCheck, scope: list[PlanNode], on: str, summary: dict[str, Any]
) -> list[str]:
    """``min_estimated_rows`` / ``max_estimated_rows`` over the nodes on the relation."""
    if check.min_estimated_rows is None and check.max_estimated_rows is None:
        return []
    if not scope:
        return []  # "the plan has no node on …" says it already
    low = min(scope, key=lambda n: n.plan_rows)
    high = max(scope, key=lambda n: n.plan_rows)
    summary["estimated_rows"] = {"min": low.plan_rows, "max": high.plan_rows}
    failed = []
    if check.min_estimated_rows is not None and low.plan_rows < check.min_estimated_rows:
        failed.append(
            f"min_estimated_rows: {low.node_type}{on} estimates {low.plan_rows:g} rows "
            f"(< {check.min_estimated_rows:g})"
        )
    if check.max_estimated_rows is not None and high.plan_rows > check.max_estimated_rows:
        failed.append(
            f"max_estimated_rows: {high.node_type}{on} estimates {high.plan_rows:g} rows "
            f"(> {check.max_estimated_rows:g})"
        )
    return failed


async def _plan(check: PlanCheck, endpoint: RunEndpoint) -> _Outcome:
    conn = await _connect(check.role, check.login, check.database, endpoint)
    try:
        explain = sessions_of(conn).explain
        if explain is None:
            raise CheckUnavailable("this engine's plans cannot be read (no plan check)")
        nodes = await explain(conn, check.sql, check.analyze)
    finally:
        await conn.close(timeout=5)
    failed, summary = judge_plan(check, nodes)
    return _Outcome(not failed, summary)


# -- server log --------------------------------------------------------------------------------
def server_log_matches(
    lines: list[str],
    pattern: str,
    since_s: float,
    until_s: float,
    wall_start: float,
    time_scale: float,
    log_line_stamp: Callable[[str], tuple[float, int] | None],
) -> list[tuple[float, str]]:
    """Lines matching ``pattern`` whose scenario time is in ``[since_s, until_s]``, with it.

    Scenario time is ``(line's wall time - wall_start) / time_scale``, the wall time read by
    the engine's ``log_line_stamp``; a line without the stamp (a continued statement) has the
    time of the line before it."""
    rx = re.compile(pattern)
    out: list[tuple[float, str]] = []
    t: float | None = None
    for line in lines:
        stamp = log_line_stamp(line)
        if stamp is not None:
            t = (stamp[0] - wall_start) / time_scale
        if t is not None and since_s <= t <= until_s and rx.search(line):
            out.append((t, line))
    return out


def _server_log(
    check: ServerLogCheck, t: float, clock: ScenarioClock, sources: CheckSources
) -> _Outcome:
    path, stamp = sources.server_log, sources.log_line_stamp
    if path is None or stamp is None:
        raise CheckUnavailable("no server log is recorded for this run (an external server)")
    if sources.refresh_server_log is not None:
        sources.refresh_server_log()
    if check.over_s is not None:
        since, until = t - check.over_s, t
    else:
        assert check.since_s is not None
        since, until = check.since_s, t if check.until_s is None else check.until_s
    if until > t:
        raise CheckUnavailable(f"the window ends at {until:g} s, after now (t = {t:.1f} s)")
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    found = server_log_matches(
        lines, check.pattern, since, until, clock.wall_start, clock.time_scale, stamp
    )
    observed: dict[str, Any] = {"count": len(found), "window_s": [_num(since), _num(until)]}
    if found:
        observed["first"] = found[0][1][:300]
        observed["last"] = found[-1][1][:300]
    return _Outcome(compare(len(found), check.op, check.value), observed)


# -- metrics -----------------------------------------------------------------------------------
def metric_window_stat(
    frame: pl.DataFrame,
    metric: str,
    label: str | None,
    stat: str,
    since_s: float,
    until_s: float,
) -> tuple[float | None, int]:
    """A statistic of one metric over ``[since_s, until_s]`` from metric samples in the
    sampler's long format (``t_s, metric, label, value``); returns it (None without samples)
    and how many samples it used.

    All series of the metric are summed unless ``label`` names one. Counters: ``increase``
    sums the increments between consecutive samples of a series that end in the window (a
    decrease counts as a reset); the rates sum each series' increase over the time its
    increments cover. Deltas: ``increase`` sums them, the rates divide by the sampled time in
    the window. Gauges: ``mean``, ``min``, ``max``, ``last`` of the per-instant sum.
    """
    sel = frame.filter(pl.col("metric") == metric)
    if label is not None:
        sel = sel.filter(pl.col("label") == label)
    sel = sel.select(
        pl.col("t_s").cast(pl.Float64), pl.col("label").cast(pl.String), pl.col("value")
    ).sort("label", "t_s")
    kind = metric_kind(metric)
    if kind == "gauge":
        inside = sel.filter(pl.col("t_s").is_between(since_s, until_s))
        if inside.height == 0:
            return None, 0
        levels = inside.group_by("t_s").agg(pl.col("value").sum()).sort("t_s")["value"]
        gauge = {"mean": levels.mean(), "min": levels.min(), "max": levels.max()}
        value = levels[-1] if stat == "last" else gauge[stat]
        return float(value), levels.len()  # type: ignore[arg-type]
    in_window = (pl.col("t_s") > since_s) & (pl.col("t_s") <= until_s)
    if kind == "counter":
        prev_v = pl.col("value").shift(1).over("label")
        steps = sel.with_columns(
            inc=pl.when(prev_v.is_null())
            .then(None)
            .when(pl.col("value") >= prev_v)
            .then(pl.col("value") - prev_v)
            .otherwise(pl.col("value")),
            dt=pl.col("t_s") - pl.col("t_s").shift(1).over("label"),
        ).filter(in_window & pl.col("inc").is_not_null())
        if steps.height == 0:
            return None, 0
        increase = float(steps["inc"].sum())
        per_series = steps.group_by("label").agg(pl.col("inc").sum(), pl.col("dt").sum())
        rate = float(
            per_series.filter(pl.col("dt") > 0).select((pl.col("inc") / pl.col("dt")).sum()).item()
        )
    else:  # delta: already differenced by the sampler
        steps = sel.filter(in_window)
        if steps.height == 0:
            return None, 0
        increase = float(steps["value"].sum())
        timeline = (
            frame.filter((pl.col("metric") == "sampler.up") & (pl.col("value") == 1.0))
            .select(pl.col("t_s").cast(pl.Float64))
            .unique()
            .sort("t_s")
            .with_columns(dt=pl.col("t_s") - pl.col("t_s").shift(1))
            .filter(in_window)
        )
        covered = float(timeline["dt"].sum() or 0.0)
        rate = increase / covered if covered > 0 else math.nan
    if stat == "increase":
        return increase, steps.height
    if math.isnan(rate):
        return None, steps.height
    return (rate * 60.0 if stat == "rate_per_min" else rate), steps.height


def _metric(check: MetricCheck, t: float, sources: CheckSources) -> _Outcome:
    if sources.metrics is None:
        raise CheckUnavailable("no metric samples: this run samples no metrics")
    frame = sources.metrics()
    since = t - check.over_s
    value, n = metric_window_stat(frame, check.metric, check.label, check.stat, since, t)
    observed: dict[str, Any] = {
        check.stat: _num(value),
        "samples": n,
        "window_s": [_num(since), _num(t)],
    }
    if check.baseline is None:
        error = None if value is not None else "no samples of the metric in the window"
        return _Outcome(compare(value, check.op, check.value), observed, error)
    b = check.baseline
    _baseline_ended(b, t)
    base, base_n = metric_window_stat(
        frame, check.metric, check.label, check.stat, b.since_s, b.until_s
    )
    ratio, error = _relative(observed, value, base, base_n)
    return _Outcome(compare(ratio, check.op, check.value), observed, error)
