"""Workload history on TiDB: recorded through the engine's own metric sampler before the fault
is constructed, kept with the snapshot and copied into every run (on the real embedded
tidb-server; nothing here needs the statements summary, which TiDB keeps in memory)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from dbaops.dbms.tidb.binary import TidbBinary
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.record.kinds import PhaseRecord
from dbaops.record.tables import read_metrics, read_samples
from dbaops.record.trace import read_trace
from dbaops.scenario.loader import timelines_dir

pytestmark = pytest.mark.anyio

HISTORY_S = 600.0
SAMPLE_EVERY_S = 120.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _phases(run_dir: Path) -> dict[str, PhaseRecord]:
    return {r.phase: r for r in read_trace(run_dir) if isinstance(r, PhaseRecord)}


def _with_history(tmp_path: Path) -> tuple[Path, float]:
    """tb-qt-02 (the fault: a construction step drops an index) declaring a history sampled
    every ``SAMPLE_EVERY_S``; its length comes from ``--history-s``. Returns the file and the
    scenario's warm-up."""
    data = yaml.safe_load((timelines_dir() / "tb-qt-02.yaml").read_text())
    data["id"] = "t-tb-history"
    data["preparation"]["history"] = {
        "duration_s": 60,
        "scale": 0.02,
        "sample_every_s": SAMPLE_EVERY_S,
    }
    path = tmp_path / "t-tb-history.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, float(data["preparation"]["warmup_s"])


async def test_a_tidb_history_precedes_the_warm_up_and_is_restored_with_the_snapshot(
    tidb_binary: TidbBinary, tmp_path: Path
) -> None:
    scenario, warmup_s = _with_history(tmp_path)
    options = RunOptions(
        time_scale=0.1, runs_dir=tmp_path / "runs", history_s=HISTORY_S, fresh=True
    )
    first = await run_scenario(scenario, options, agent="reference")
    assert first.status == "completed", first.reason
    phases = _phases(first.run_dir)
    history = phases["history"].detail
    assert history["units"] > 0 and history["metric_samples"] > 0
    assert history["duration_s"] == HISTORY_S and history["scale"] == 0.02
    # recorded before the construction step injected the fault
    order = [r.phase for r in read_trace(first.run_dir) if isinstance(r, PhaseRecord)]
    assert order.index("history") < order.index("construction")
    again = await run_scenario(
        scenario, options.model_copy(update={"fresh": False}), agent="reference"
    )
    assert again.status == "completed", again.reason
    assert "history" not in _phases(again.run_dir)  # restored with the snapshot, not re-run
    assert "restore" in _phases(again.run_dir)
    past_metrics = []
    for run in (first, again):
        metrics = read_metrics(run.run_dir)
        past = metrics.filter(pl.col("t_s") < -warmup_s).sort("t_s", "metric", "label", "value")
        assert past.height > 0
        assert min(past["t_s"].to_list()) >= -HISTORY_S - warmup_s - 1.0
        assert {"tidb.connections", "sampler.up"} <= set(past["metric"])  # TiDB's sampler
        # sampled every sample_every_s history seconds (not the run's every second)
        times = past.filter(pl.col("metric") == "sampler.up")["t_s"].sort().to_list()
        assert all(b - a >= 0.9 * SAMPLE_EVERY_S for a, b in zip(times, times[1:], strict=False))
        past_metrics.append(past)
        samples = read_samples(run.run_dir).filter(pl.col("scheduled_s") < -warmup_s)
        assert samples.height > 0
        assert set(samples["workload"]) <= {"history", "checkout"}
    assert past_metrics[0].equals(past_metrics[1])  # the same history in every run
