"""The run's Parquet tables: their schemas, and append-only parts that survive a crash.

``samples`` (:data:`SAMPLE_SCHEMA`): one row per workload unit (an SLO sample).
``metrics`` (:data:`METRIC_SCHEMA`): long format, one row per metric value at a sample time.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from dbaops.record.layout import RunDir

#: One row per workload unit (see :class:`dbaops.workloads.samples.SLOSample`).
SAMPLE_SCHEMA: dict[str, pl.DataType] = {
    "workload": pl.String(),
    "kind": pl.String(),
    "unit": pl.String(),
    "scheduled_s": pl.Float64(),
    "start_s": pl.Float64(),
    "end_s": pl.Float64(),
    "latency_ms": pl.Float64(),
    "retries": pl.Int32(),
    "outcome": pl.String(),
    "sqlstate": pl.String(),
    "error": pl.String(),
    "correct": pl.Boolean(),
    # how late the client itself issued the unit against its schedule (its own event loop,
    # not the server); latency_ms and the deadline count from scheduled_s plus this lag.
    # Null for background units (no schedule) and in runs recorded before it existed.
    "client_lag_ms": pl.Float64(),
}

#: Long-format metric samples (see :mod:`dbaops.dbms.postgres.sampler`).
METRIC_SCHEMA: dict[str, pl.DataType] = {
    "t_s": pl.Float64(),
    "metric": pl.String(),
    "label": pl.String(),
    "value": pl.Float64(),
}


class ParquetParts:
    """Append-only table stored as atomically written Parquet parts, compacted at the end.

    Parquet files cannot be appended to, and a writer killed mid-file leaves no footer; small
    part files written by rename are readable after any crash.
    """

    def __init__(self, directory: Path, final: Path, schema: dict[str, pl.DataType]) -> None:
        self.directory = directory
        self.final = final
        self.schema = schema
        self.directory.mkdir(parents=True, exist_ok=True)
        self._n = len(list(self.directory.glob("part-*.parquet")))

    def append(self, frame: pl.DataFrame) -> None:
        if frame.height == 0:
            return
        self._n += 1
        target = self.directory / f"part-{self._n:06d}.parquet"
        tmp = target.with_suffix(".tmp")
        frame.write_parquet(tmp)
        os.replace(tmp, target)

    def compact(self) -> None:
        """Merge parts into the final file and remove them."""
        frame = read_parts(self.directory, self.final, self.schema)
        tmp = self.final.with_suffix(".tmp")
        frame.write_parquet(tmp)
        os.replace(tmp, self.final)
        for part in self.directory.glob("part-*.parquet"):
            part.unlink()
        self.directory.rmdir()


def read_parts(directory: Path, final: Path, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Read a compacted table, or its parts if the run did not finish."""
    frames: list[pl.DataFrame] = []
    if final.exists():
        frames.append(pl.read_parquet(final))
    if directory.exists():
        frames.extend(pl.read_parquet(p) for p in sorted(directory.glob("part-*.parquet")))
    if not frames:
        return pl.DataFrame(schema=schema)
    frame = pl.concat(frames, how="diagonal_relaxed")
    missing = [pl.lit(None, dtype=t).alias(c) for c, t in schema.items() if c not in frame.columns]
    return frame.with_columns(missing) if missing else frame


def read_samples(run_dir: Path) -> pl.DataFrame:
    """SLO samples of a run (compacted, or the parts of an unfinished run)."""
    rd = RunDir(run_dir)
    return read_parts(rd.samples_dir, rd.samples, SAMPLE_SCHEMA)


def read_metrics(run_dir: Path) -> pl.DataFrame:
    """Metric samples of a run (long format: t_s, metric, label, value)."""
    rd = RunDir(run_dir)
    return read_parts(rd.metrics_dir, rd.metrics, METRIC_SCHEMA)
