"""The survey: the harness reads the observation surface a scenario declares when its agent
starts (the rows of the SQL probes, the server log so far, the metric series), so that the
scenario's environmental complexity C_s (:mod:`dbaops.evaluation.difficulty`) is counted over
the environment, whatever the agent reads. The survey runs after the manifestation checks and
before the agent's first call, from a hidden harness session, read-only; a probe that fails is
recorded with its error (the run goes on)."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import polars as pl

from dbaops.dbms.dialect import survey_probes
from dbaops.dbms.sessions import CONNECTION_ERRORS, SERVER_ERRORS, RunEndpoint
from dbaops.execution.metrics_registry import JUDGE_ONLY_METRICS
from dbaops.record.kinds import MetricSeriesCount, SurveyProbe, SurveyRecord
from dbaops.scenario.specs import (
    STANDARD,
    STANDBY_PREFIX,
    DifficultySpec,
    is_probe_name,
    split_server,
)

#: The most server-log lines a survey keeps (the newest); the total is recorded too.
MAX_LOG_LINES = 5000
#: The most rows one probe keeps.
MAX_PROBE_ROWS = 500
#: How long one probe may take (wall seconds).
PROBE_TIMEOUT_S = 30.0


def surface_queries(engine: str, spec: DifficultySpec) -> dict[str, str]:
    """The SQL probes a scenario's sql modality declares: standard probes by name (every one
    when it names none, or where it says ``standard``) and its own queries (named
    ``query1``, ``query2``, ... in order); an entry prefixed ``standby:`` reads the replica
    profile's standby, and its name keeps the prefix."""
    standard = survey_probes(engine)
    mspec = spec.modalities.get("sql")
    if mspec is None:
        return {}
    if mspec.surface is None:
        return dict(standard)
    out: dict[str, str] = {}
    own = 0
    for raw in mspec.surface:
        server, entry = split_server(raw)
        prefix = f"{STANDBY_PREFIX}" if server == "standby" else ""
        if entry == STANDARD:
            out.update({prefix + name: sql for name, sql in standard.items()})
        elif is_probe_name(entry):
            out[prefix + entry] = standard[entry]
        else:
            own += 1
            out[f"{prefix}query{own}"] = entry
    return out


def _text(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float | decimal.Decimal):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, dt.datetime | dt.timedelta | dt.date):
        return str(value)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def row_text(values: tuple[Any, ...]) -> str:
    """One result row as the unit text the causal pattern reads: ``v1 | v2 | ...`` on one
    line (a value's line breaks become spaces)."""
    return " | ".join(" ".join(_text(v).splitlines()) for v in values)


def metric_series_counts(frame: pl.DataFrame, history_before_s: float) -> list[MetricSeriesCount]:
    """Points per series the agent could read: of the incident (at or after
    ``history_before_s``) and of the workload history (before it). Judge-only metrics are not
    the agent's to read and are left out."""
    if frame.is_empty():
        return []
    frame = frame.filter(~pl.col("metric").is_in(list(JUDGE_ONLY_METRICS)))
    label = pl.col("label").fill_null("")
    grouped = (
        frame.with_columns(
            series=pl.concat_str([pl.col("metric"), label], separator=" ").str.strip_chars(),
            history=pl.col("t_s") < history_before_s,
        )
        .group_by("series")
        .agg(
            incident=(~pl.col("history")).sum(),
            past=pl.col("history").sum(),
        )
        .sort("series")
    )
    return [
        MetricSeriesCount(
            series=r["series"], incident_points=r["incident"], history_points=r["past"]
        )
        for r in grouped.iter_rows(named=True)
    ]


async def take_survey(
    engine: str,
    spec: DifficultySpec,
    endpoint: RunEndpoint,
    *,
    t_scn: float,
    history_before_s: float,
    metrics: pl.DataFrame,
    log_lines: list[str],
    standby: RunEndpoint | None = None,
) -> SurveyRecord:
    """Read the surface ``spec`` declares: the SQL probes on ``endpoint`` (and ``standby``,
    for ``standby:`` entries) as the harness, the server-log lines given, the metric series
    given."""
    record = SurveyRecord(t_scn=t_scn)
    if "sql" in spec.modalities:
        queries = surface_queries(engine, spec)
        on_standby = {n: q for n, q in queries.items() if n.startswith(STANDBY_PREFIX)}
        on_primary = {n: q for n, q in queries.items() if n not in on_standby}
        await _read_probes(record, endpoint, on_primary)
        if on_standby and standby is None:
            for name, query in on_standby.items():
                record.sql[name] = SurveyProbe(query=query, error="the run has no standby")
        elif on_standby and standby is not None:
            await _read_probes(record, standby, on_standby)
    return _rest(record, spec, metrics, log_lines, history_before_s)


async def _read_probes(
    record: SurveyRecord, endpoint: RunEndpoint, queries: dict[str, str]
) -> None:
    """Run ``queries`` on ``endpoint`` from one hidden harness session into ``record``."""
    if queries:
        try:
            conn = await endpoint.probe_session("postgres", None, login=False)
        except CONNECTION_ERRORS + SERVER_ERRORS + (OSError, TimeoutError) as exc:
            # the server does not answer (the incident may be that): nothing to read
            for name, query in queries.items():
                record.sql[name] = SurveyProbe(query=query, error=f"no session: {exc}"[:300])
            return
        try:
            for name, query in queries.items():
                probe = SurveyProbe(query=query)
                try:
                    rows = await conn.fetch(query, timeout=PROBE_TIMEOUT_S)
                    probe.rows = [row_text(tuple(r.values())) for r in rows[:MAX_PROBE_ROWS]]
                except SERVER_ERRORS + (TimeoutError,) as exc:
                    probe.error = f"{type(exc).__name__}: {exc}"[:300]
                record.sql[name] = probe
        except CONNECTION_ERRORS as exc:  # the server went away: what was read stays
            for name, query in queries.items():
                record.sql.setdefault(name, SurveyProbe(query=query, error=str(exc)[:300]))
        finally:
            try:
                await conn.close(timeout=5)
            except CONNECTION_ERRORS + (TimeoutError,):
                pass


def _rest(
    record: SurveyRecord,
    spec: DifficultySpec,
    metrics: pl.DataFrame,
    log_lines: list[str],
    history_before_s: float,
) -> SurveyRecord:
    """The log and metric modalities of a survey (read from what the harness holds)."""
    if "log" in spec.modalities:
        record.log_lines = [ln for ln in log_lines if ln.strip()][-MAX_LOG_LINES:]
        record.log_lines_total = sum(1 for ln in log_lines if ln.strip())
    if "metric" in spec.modalities:
        record.metric_series = metric_series_counts(metrics, history_before_s)
    return record
