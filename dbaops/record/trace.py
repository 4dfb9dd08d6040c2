"""The trace of a run (``trace.jsonl``): a writer that fsyncs every record, and readers."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from dbaops.record.kinds import Record, parse_record
from dbaops.record.layout import RunDir


class RecordSink(Protocol):
    """Where a run's records go (the trace writer, or a writer that also feeds a live view)."""

    def write(self, record: Record) -> None: ...


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
