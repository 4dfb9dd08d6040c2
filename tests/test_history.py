"""Workload history before t = 0: recorded once with the snapshot, copied into every run."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import polars as pl
import pytest

from dbaops.clock import ScenarioClock
from dbaops.dbms.postgres.sampler import MetricSampler
from dbaops.execution.history import (
    densified_metrics,
    densified_samples,
    effective_history,
    history_density,
)
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.record.kinds import PhaseRecord
from dbaops.record.tables import METRIC_SCHEMA, SAMPLE_SCHEMA, read_metrics, read_samples
from dbaops.record.trace import read_trace
from dbaops.scenario.loader import load_scenario, preparation_key
from dbaops.scenario.model import OlapWorkload

pytestmark = pytest.mark.anyio

SCENARIO = Path(__file__).parent / "scenarios" / "t-snapshot.yaml"


def _phases(run_dir: Path) -> dict[str, PhaseRecord]:
    return {r.phase: r for r in read_trace(run_dir) if isinstance(r, PhaseRecord)}


async def test_history_precedes_the_warm_up_in_every_run_and_is_part_of_the_snapshot(
    tmp_path: Path,
) -> None:
    options = RunOptions(time_scale=0.1, runs_dir=tmp_path, history_s=600, fresh=True)
    first = await run_scenario(SCENARIO, options, agent="noop")
    assert first.status == "completed", first.reason
    phases = _phases(first.run_dir)
    assert phases["history"].detail["units"] > 0 and phases["history"].detail["duration_s"] == 600
    again = await run_scenario(SCENARIO, options.model_copy(update={"fresh": False}), agent="noop")
    assert "history" not in _phases(again.run_dir)  # restored with the snapshot, not re-run
    for run in (first, again):
        samples = read_samples(run.run_dir)
        past = samples.filter(pl.col("scheduled_s") < -2.0)  # before the 2 s warm-up
        assert past.height > 0 and float(past["scheduled_s"].min()) >= -602.0
        assert past.filter(pl.col("outcome") == "on_time").height > 0
        jobs = past.filter(pl.col("workload") == "dashboards")
        assert set(jobs["unit"]) == {"daily_revenue"}  # the one-off report is not history
        # every minute from its 5 s offset into the history, which ends where the 2 s
        # warm-up begins: -600 + 5 - 2
        times = sorted(jobs["scheduled_s"].to_list())
        assert times == pytest.approx([-597.0 + 60.0 * k for k in range(10)])
        metrics = read_metrics(run.run_dir)
        assert metrics.filter(pl.col("t_s") < -2.0).height > 0
    # A history is part of what the snapshot is built from.
    sc, lib, _ = load_scenario(SCENARIO)
    assert effective_history(sc, 0) is None
    with_history = effective_history(sc, 600)
    assert preparation_key(sc, lib, "15", with_history) != preparation_key(sc, lib, "15", None)


async def test_a_seeded_history_survives_the_consolidation_of_sampled_frames() -> None:
    """History frames (read back from Parquet, String columns) and sampled frames are kept
    together; once enough frames pile up they are concatenated, which must not fail."""

    async def no_server() -> asyncpg.Connection:
        raise OSError("not used")

    sampler = MetricSampler(no_server, ScenarioClock(1.0), None, database="shop")
    past = pl.DataFrame(
        {"t_s": [-60.0], "metric": ["db.xact_commit"], "label": [""], "value": [1.0]},
        schema=METRIC_SCHEMA,
    )
    sampler.seed(past)
    for i in range(40):
        sampler.rows.add(float(i), "db.xact_commit", "", float(i))
        sampler.rows.end_sample()
        await sampler.flush()
    frame = sampler.snapshot()
    assert frame.height == 41
    assert frame["t_s"].min() == -60.0
    assert dict(frame.schema) == METRIC_SCHEMA


def test_a_workload_that_starts_during_the_timeline_is_not_part_of_the_history() -> None:
    sc, _, _ = load_scenario("pg-p-04")
    started_later = {w.name for w in sc.workloads if getattr(w, "start_s", None)}
    assert started_later == {"live_stock"}
    history = {w.name for w in sc.history_workloads()}
    assert history == {w.name for w in sc.workloads} - started_later


def test_periodic_dashboards_are_part_of_the_history_and_one_off_reports_are_not() -> None:
    sc, _, _ = load_scenario("pg-p-05")
    history = {w.name: w for w in sc.history_workloads()}
    assert set(history) == {"bi", "etl"}  # the month-end reports belong to the incident
    bi = history["bi"]
    assert isinstance(bi, OlapWorkload)
    assert len(bi.jobs) == 8 and all(j.every_s and not j.at_s for j in bi.jobs)


def test_a_history_is_taken_in_at_the_density_of_the_run() -> None:
    """A 0.01 history in a run at 0.05 carries five times the recorded traffic per scenario
    second: counters rise five times as fast back from their last value, deltas are five
    times larger, gauges stay; OLTP units are repeated five times within their gap, their
    spans counted in the run's seconds; periodic jobs are not repeated."""
    density = history_density(0.01, 0.05)
    assert density == pytest.approx(5.0)
    metrics = pl.DataFrame(
        {
            "t_s": [-120.0, -60.0, -120.0, -60.0, -60.0, -60.0],
            "metric": ["db.xact_commit"] * 2
            + ["activity.count"] * 2
            + ["statements.calls", "tidb.queries_per_s"],
            "label": [""] * 4 + ["q1", ""],
            "value": [100.0, 110.0, 3.0, 4.0, 7.0, 2.5],
        },
        schema=METRIC_SCHEMA,
    )
    dense = densified_metrics(metrics, density)
    assert dense["value"].to_list() == pytest.approx([60.0, 110.0, 3.0, 4.0, 35.0, 2.5])
    row = {
        "latency_ms": 10.0,
        "retries": 0,
        "outcome": "on_time",
        "sqlstate": None,
        "error": None,
        "correct": None,
        "client_lag_ms": None,
    }
    samples = pl.DataFrame(
        [
            {
                "workload": "oltp",
                "kind": "oltp",
                "unit": "t",
                "scheduled_s": -100.0,
                "start_s": -100.0,
                "end_s": -99.0,
                **row,
            },
            {
                "workload": "oltp",
                "kind": "oltp",
                "unit": "t",
                "scheduled_s": -10.0,
                "start_s": -9.5,
                "end_s": -9.0,
                **row,
            },
            {
                "workload": "jobs",
                "kind": "olap",
                "unit": "r",
                "scheduled_s": -50.0,
                "start_s": -50.0,
                "end_s": -40.0,
                **row,
            },
        ],
        schema=SAMPLE_SCHEMA,
    )
    dense_samples = densified_samples(samples, density, duration_s=100.0)
    oltp = dense_samples.filter(pl.col("kind") == "oltp").sort("scheduled_s")
    # the first unit's five copies in its 90 s gap; the last's in the mean gap (50 s), the
    # copies past the history's end (0) wrapping round to its start (-100)
    assert oltp["scheduled_s"].to_list() == pytest.approx(
        [-100.0, -90.0, -82.0, -80.0, -70.0, -64.0, -46.0, -28.0, -10.0, 0.0]
    )
    first = oltp.filter(pl.col("scheduled_s") == -100.0)
    assert first["end_s"].item() == pytest.approx(-99.8)  # a 1 s span is 0.2 s of the run's
    second = oltp.filter(pl.col("scheduled_s") == -10.0)
    assert second["start_s"].item() == pytest.approx(-9.9)
    wrapped = oltp.filter(pl.col("scheduled_s") == -90.0)
    assert wrapped["end_s"].item() == pytest.approx(-89.8)
    job = dense_samples.filter(pl.col("kind") == "olap")
    assert job.height == 1 and job["end_s"].item() == pytest.approx(-48.0)
    # a sparser run thins the history out instead
    sparse = densified_samples(samples, 0.5, duration_s=100.0)
    assert sparse.filter(pl.col("kind") == "oltp").height == 1
