"""The run directory: the only thing scoring, plotting and replay read.

Layout of ``runs/<scenario>/<run-id>/``::

    scenario.yaml      the scenario file as run (verbatim copy)
    trace.jsonl        typed records, appended and fsynced as the run goes
    samples/part-*.parquet, samples.parquet   SLO samples (parts while running, compacted at end)
    metrics/part-*.parquet, metrics.parquet   metric samples
    postgresql.log     server log lines written during the run
    standby.log        the replica profile's standby's log lines (runs with a standby)
    mailbox.md         the durable mailbox (persistent runs)
    verdict.json       verdicts with their evidence
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import polars as pl

from dbaops.records import Record, parse_record

#: The prefix of a server log line (``log_line_prefix = '%m [%p] '``): time, zone, pid.
_LOG_PREFIX = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (UTC|GMT|Z|[+-]\d\d(?::?\d\d)?) \[(\d+)\]"
)


def log_line_stamp(line: str) -> tuple[float, int] | None:
    """The wall time (epoch seconds) and pid of a server log line, or None for a line without
    the prefix (the continuation of a multi-line message)."""
    m = _LOG_PREFIX.match(line)
    if m is None:
        return None
    stamp, zone, pid = m.groups()
    naive = datetime.strptime(
        stamp, "%Y-%m-%d %H:%M:%S.%f" if "." in stamp else "%Y-%m-%d %H:%M:%S"
    )
    return naive.replace(tzinfo=_zone(zone)).timestamp(), int(pid)


def _zone(text: str) -> timezone:
    if text in ("UTC", "GMT", "Z"):
        return UTC
    digits = text[1:].replace(":", "")
    offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
    return timezone(-offset if text[0] == "-" else offset)


@dataclass(frozen=True)
class RunDir:
    """Paths of one run directory."""

    path: Path

    @property
    def trace(self) -> Path:
        return self.path / "trace.jsonl"

    @property
    def scenario(self) -> Path:
        return self.path / "scenario.yaml"

    @property
    def samples_dir(self) -> Path:
        return self.path / "samples"

    @property
    def metrics_dir(self) -> Path:
        return self.path / "metrics"

    @property
    def server_log(self) -> Path:
        return self.path / "postgresql.log"

    @property
    def standby_log(self) -> Path:
        return self.path / "standby.log"

    @property
    def mailbox(self) -> Path:
        return self.path / "mailbox.md"

    @property
    def verdict(self) -> Path:
        return self.path / "verdict.json"

    def create(self) -> RunDir:
        self.path.mkdir(parents=True, exist_ok=False)
        return self


class TraceWriter:
    """Appends records to ``trace.jsonl``; each line is flushed and fsynced."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fh = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: Record) -> None:
        line = record.model_dump_json() + "\n"
        with self._lock:
            self._fh.write(line)
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


def read_trace(run_dir: Path) -> list[Record]:
    """Read all records; a torn (incomplete) last line is ignored."""
    return list(iter_trace(run_dir))


def iter_trace(run_dir: Path) -> Iterator[Record]:
    path = RunDir(run_dir).trace
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            yield parse_record(line)
        except (json.JSONDecodeError, ValueError):
            last = i == len(lines) - 1
            if last and not line.endswith("\n"):
                return  # torn last line from a killed writer
            raise


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
    return pl.concat(frames, how="diagonal_relaxed")


def read_samples(run_dir: Path) -> pl.DataFrame:
    """SLO samples of a run (see :mod:`dbaops.workloads.samples`)."""
    from dbaops.workloads.samples import SAMPLE_SCHEMA

    rd = RunDir(run_dir)
    return read_parts(rd.samples_dir, rd.path / "samples.parquet", SAMPLE_SCHEMA)


def read_metrics(run_dir: Path) -> pl.DataFrame:
    """Metric samples of a run (long format: t_s, metric, label, value)."""
    from dbaops.engine.metrics import METRIC_SCHEMA

    rd = RunDir(run_dir)
    return read_parts(rd.metrics_dir, rd.path / "metrics.parquet", METRIC_SCHEMA)
