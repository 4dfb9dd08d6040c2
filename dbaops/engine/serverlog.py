"""Copies the server log lines written during a run into the run directory as they appear."""

from __future__ import annotations

from pathlib import Path

import anyio


class ServerLogFollower:
    """Tails the server's log file from the run's start offset into ``postgresql.log``."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source = source
        self.target = target
        self._offset = source.stat().st_size if source.exists() else 0

    def copy_new(self) -> int:
        """Append whatever the server wrote since the last call; returns bytes copied."""
        if not self.source.exists():
            return 0
        size = self.source.stat().st_size
        if size < self._offset:  # file replaced (snapshot restore): start over
            self._offset = 0
        if size == self._offset:
            return 0
        with self.source.open("rb") as src, self.target.open("ab") as dst:
            src.seek(self._offset)
            data = src.read(size - self._offset)
            dst.write(data)
            dst.flush()
        self._offset += len(data)
        return len(data)

    async def run(self, every_s: float = 0.5) -> None:
        try:
            while True:
                self.copy_new()
                await anyio.sleep(every_s)
        finally:
            self.copy_new()
