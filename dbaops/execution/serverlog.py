"""The server log lines written during a run: copied into the run directory as they appear,
and read from the server's own log file for the agent's ``read_log``."""

from __future__ import annotations

from pathlib import Path

import anyio


class ServerLogFollower:
    """Tails one server log file from the run's start offset into the run directory."""

    def __init__(self, source: Path, target: Path, role: str = "primary") -> None:
        self.source = source
        self.target = target
        self.role = role  # which log of the run (primary, standby; TiDB's slow log)
        self._offset = source.stat().st_size if source.exists() else 0
        self._start = self._offset

    def copy_new(self) -> int:
        """Append whatever the server wrote since the last call; returns bytes copied."""
        if not self.source.exists():
            return 0
        size = self.source.stat().st_size
        if size < self._offset:  # file replaced (snapshot restore): start over
            self._offset = self._start = 0
        if size == self._offset:
            return 0
        with self.source.open("rb") as src, self.target.open("ab") as dst:
            src.seek(self._offset)
            data = src.read(size - self._offset)
            dst.write(data)
            dst.flush()
        self._offset += len(data)
        return len(data)

    def server_lines(self) -> list[str]:
        """The lines the server has written to its log since the run started."""
        if not self.source.exists():
            return []
        with self.source.open("rb") as src:
            size = src.seek(0, 2)
            src.seek(self._start if size >= self._start else 0)
            data = src.read()
        return data.decode(errors="replace").splitlines()

    async def run(self, every_s: float = 0.5) -> None:
        try:
            while True:
                self.copy_new()
                await anyio.sleep(every_s)
        finally:
            self.copy_new()
