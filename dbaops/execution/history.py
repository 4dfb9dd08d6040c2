"""Workload history before t = 0: a production database has a past (paper §6.3.2: 6–12 h).

During preparation, before the construction operations inject the fault, the scenario's OLTP
and background workloads and its periodic OLAP jobs (dashboards; one-off jobs belong to the
incident) run against the clean fixture for ``preparation.history.duration_s``
scenario seconds, compressed by its own ``scale``, sampled by the engine's own metric sampler
every ``sample_every_s`` scenario seconds. What that leaves inside the server goes into the
dirty snapshot with everything else (PostgreSQL: the statistics views, ``pg_stat_statements``;
TiDB: what its store persists, not the statements summary it keeps in memory); the metric
samples and SLO samples it produced are kept beside the snapshot and copied into every run,
shifted to end where the run's warm-up begins. So the agent's ``query_metrics`` and the views
it queries show how the system behaved before the incident.

**Density.** Workloads run at their rates per *wall* second, so a history compressed by
``scale`` holds ``scale / S`` of the traffic per scenario second that a run at time scale ``S``
has: left as recorded, a 0.002 history looks 500 times quieter than a run at 1.0, with a step
in every rate where the history meets the warm-up. A run therefore takes its history in at its
own density ``S / scale`` (:func:`history_density`): PostgreSQL counters rise that many times
as fast, anchored at the value where the history ends (so nothing jumps at the boundary; a
counter read hours back can fall below zero), statement deltas are multiplied, every OLTP and
background unit is repeated within the gap to the next unit of its workload, and every unit's
span (scheduled, started, ended: wall time) is counted in the run's seconds. Periodic OLAP jobs
(scheduled in scenario seconds already), gauges and TiDB's metrics (rates per wall second)
stay as recorded.

Not carried over: server-log lines (their timestamps are the preparation's wall clock).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import anyio
import polars as pl

from dbaops.clock import ScenarioClock
from dbaops.dbms.interface import DatabaseEngine, DatabaseServer
from dbaops.dbms.sessions import RunEndpoint
from dbaops.execution.metrics_registry import metric_kind_expr
from dbaops.record.layout import METRICS_FILE, METRICS_PARTS, SAMPLES_FILE, SAMPLES_PARTS
from dbaops.record.tables import METRIC_SCHEMA, SAMPLE_SCHEMA, ParquetParts, read_parts
from dbaops.scenario.model import History, Scenario
from dbaops.workloads.host import DriverPlan, DriverProcess, run_workloads
from dbaops.workloads.sink import SampleSink
from dbaops.workloads.spec import WorkloadLibrary

#: Time columns of the two tables (shifted when a run takes the history in).
_SAMPLE_TIMES = ("scheduled_s", "start_s", "end_s")
_METRIC_TIMES = ("t_s",)


def effective_history(sc: Scenario, override_s: float | None) -> History | None:
    """The history a run prepares: the scenario's, with ``--history-s`` overriding its length
    (0 turns it off; a scenario without history gets the default scale)."""
    declared = sc.preparation.history
    if override_s is None:
        return declared
    if override_s <= 0:
        return None
    return (declared or History(duration_s=override_s)).model_copy(
        update={"duration_s": override_s}
    )


async def record_history(
    sc: Scenario,
    lib: WorkloadLibrary,
    engine: DatabaseEngine,
    server: DatabaseServer,
    history: History,
    out_dir: Path,
) -> dict[str, Any]:
    """Run the history against the library's database on ``server`` (sampled by ``engine``'s
    metric sampler) and write its metrics and samples to ``out_dir`` (history time runs from
    ``-duration_s`` to 0); returns a summary for the trace."""
    _fresh_dir(out_dir)
    clock = ScenarioClock(time_scale=history.scale)
    endpoint: RunEndpoint = server.for_database(lib.database)
    sample_parts = ParquetParts(out_dir / SAMPLES_PARTS, out_dir / SAMPLES_FILE, SAMPLE_SCHEMA)
    metric_parts = ParquetParts(out_dir / METRICS_PARTS, out_dir / METRICS_FILE, METRIC_SCHEMA)
    sink = SampleSink(sample_parts, recent_s=60.0)
    sampler = engine.metric_sampler(
        server, lib.database, clock, metric_parts, interval_s=history.sample_every_s
    )
    process = await DriverProcess.spawn()
    try:
        await process.ready()
        clock.restart(-history.duration_s)
        plan = DriverPlan.for_clock(
            clock,
            workloads=sc.history_workloads(),
            library=lib,
            params={**lib.params, **sc.database.params},
            primary=endpoint,
            seed=sc.database.seed,
            horizon_s=0.0,  # periodic jobs run from -duration_s to 0
            expected={},
            start_s=-history.duration_s,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(sink.run_flusher)
            tg.start_soon(sampler.run)
            tg.start_soon(run_workloads, plan, sink, process)
            await clock.sleep_until(0.0)
            tg.cancel_scope.cancel()
    finally:
        await process.aclose()
    sink.flush()
    sample_parts.compact()
    metric_parts.compact()
    return {
        "duration_s": history.duration_s,
        "scale": history.scale,
        "units": sink.total,
        "metric_samples": sampler.samples,
    }


def _fresh_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def _shifted(frame: pl.DataFrame, columns: tuple[str, ...], by_s: float) -> pl.DataFrame:
    return frame.with_columns([(pl.col(c) + by_s) for c in columns])


#: Units a denser history repeats (periodic OLAP jobs are scheduled in scenario time).
_REPEATED_KINDS = ("oltp", "background")


def history_density(history_scale: float, time_scale: float) -> float:
    """How many times the traffic per scenario second of a run at ``time_scale`` exceeds that
    of a history recorded at ``history_scale`` (both run their workloads at the same rates
    per wall second)."""
    return time_scale / history_scale


def densified_metrics(frame: pl.DataFrame, density: float) -> pl.DataFrame:
    """History metrics at ``density`` times the recorded traffic: counters rise ``density``
    times as fast back from the value where the history ends, deltas are multiplied, gauges
    (and names outside the registry: TiDB's per-wall-second rates) stay."""
    if frame.is_empty() or density == 1.0:
        return frame
    kind = metric_kind_expr()
    end_value = pl.col("value").sort_by("t_s").last().over("metric", "label")
    value = (
        pl.when(kind == "counter")
        .then(end_value - (end_value - pl.col("value")) * density)
        .when(kind == "delta")
        .then(pl.col("value") * density)
        .otherwise(pl.col("value"))
    )
    return frame.with_columns(value=value).select(frame.columns)


def densified_samples(frame: pl.DataFrame, density: float, duration_s: float) -> pl.DataFrame:
    """History samples at ``density`` times the recorded traffic (history time, ``-duration_s``
    to 0): each unit's span in the run's seconds, and each OLTP and background unit repeated
    (``density`` times on average; below 1, some units are left out) evenly within the gap to
    the next unit of its workload, a copy past the end wrapping round to the start."""
    if frame.is_empty() or density == 1.0:
        return frame
    columns = frame.columns
    sched = pl.col("scheduled_s")
    spans = frame.with_columns(
        start_s=sched + (pl.col("start_s") - sched) / density,
        end_s=sched + (pl.col("end_s") - sched) / density,
    )
    repeated = spans.filter(pl.col("kind").is_in(_REPEATED_KINDS))
    kept = spans.filter(~pl.col("kind").is_in(_REPEATED_KINDS))
    index = pl.int_range(pl.len()).over("workload").cast(pl.Float64)
    repeated = (
        repeated.sort("workload", "scheduled_s")
        .with_columns(
            copies=((index + 1) * density).floor() - (index * density).floor(),
            gap=(sched.shift(-1).over("workload") - sched).fill_null(
                duration_s / pl.len().over("workload")
            ),
        )
        .filter(pl.col("copies") > 0)
        .with_columns(copy=pl.int_ranges(0, pl.col("copies").cast(pl.Int64)))
        .explode("copy")
        .with_columns(offset=pl.col("copy") * pl.col("gap") / pl.col("copies"))
        .with_columns(
            offset=pl.when(sched + pl.col("offset") > 0)
            .then(pl.col("offset") - duration_s)
            .otherwise(pl.col("offset"))
        )
        .with_columns([pl.col(c) + pl.col("offset") for c in _SAMPLE_TIMES])
        .select(columns)
    )
    return pl.concat([kept.select(columns), repeated]).sort("scheduled_s")


def load_history(
    directory: Path,
    ends_at_s: float,
    *,
    history_scale: float,
    duration_s: float,
    time_scale: float,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The recorded history's metrics and samples at the density of a run at ``time_scale``
    (see the module's docstring), shifted so that it ends at ``ends_at_s`` (the start of the
    run's warm-up)."""
    metrics = read_parts(directory / METRICS_PARTS, directory / METRICS_FILE, METRIC_SCHEMA)
    samples = read_parts(directory / SAMPLES_PARTS, directory / SAMPLES_FILE, SAMPLE_SCHEMA)
    density = history_density(history_scale, time_scale)
    return (
        _shifted(densified_metrics(metrics, density), _METRIC_TIMES, ends_at_s),
        _shifted(densified_samples(samples, density, duration_s), _SAMPLE_TIMES, ends_at_s),
    )
