"""A metric sampler's rows (:data:`~dbaops.record.tables.METRIC_SCHEMA`): buffered per sample,
appended to the run's Parquet parts on flush, and kept in memory (history included) for the
agent's ``query_metrics`` and the checks. Every engine's sampler writes through one."""

from __future__ import annotations

from typing import Any

import anyio
import polars as pl
import structlog

from dbaops.record.tables import METRIC_SCHEMA, ParquetParts

log = structlog.get_logger(__name__)

#: Kept frames are concatenated into one when there are more than this many.
_MAX_HISTORY_FRAMES = 32


class MetricRows:
    """Rows of one sampler; ``sink`` None keeps them in memory only."""

    def __init__(self, sink: ParquetParts | None, *, keep_history: bool = True) -> None:
        self._sink = sink
        self.keep_history = keep_history
        self._buf: dict[str, list[Any]] = {k: [] for k in METRIC_SCHEMA}
        self._history: list[pl.DataFrame] = []
        #: Samples buffered since the last flush.
        self.pending_samples = 0

    def add(self, t: float, metric: str, label: str, value: float) -> None:
        self._buf["t_s"].append(t)
        self._buf["metric"].append(metric)
        self._buf["label"].append(label)
        self._buf["value"].append(float(value))

    def end_sample(self) -> None:
        """One sample's rows are all added."""
        self.pending_samples += 1

    def _buffer_frame(self) -> pl.DataFrame:
        return pl.DataFrame(self._buf, schema=METRIC_SCHEMA)

    async def flush(self) -> None:
        """Move buffered rows to the in-memory history and the sink."""
        frame = self._buffer_frame()
        self._buf = {k: [] for k in METRIC_SCHEMA}
        self.pending_samples = 0
        if frame.height == 0:
            return
        if self.keep_history:
            self._history.append(frame.with_columns(pl.col("metric", "label").cast(pl.Categorical)))
            if len(self._history) > _MAX_HISTORY_FRAMES:
                self._history = [pl.concat(self._history, rechunk=True)]
        if self._sink is not None:
            try:
                await anyio.to_thread.run_sync(self._sink.append, frame)
            except OSError as exc:
                log.error("sampler_flush_failed", error=str(exc), rows=frame.height)

    def seed(self, frame: pl.DataFrame) -> None:
        """Rows recorded before this sampler started (the workload history), kept first (in
        the kept frames' column types, so they concatenate with the sampled ones)."""
        self._history.insert(0, frame.with_columns(pl.col("metric", "label").cast(pl.Categorical)))

    def snapshot(self) -> pl.DataFrame:
        """All rows so far (history plus unflushed buffer), in :data:`METRIC_SCHEMA`."""
        frames = [f.with_columns(pl.col("metric", "label").cast(pl.String)) for f in self._history]
        frames.append(self._buffer_frame())
        return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
