"""Client lag: when the workload client itself fell behind its timetable.

Every OLTP and OLAP sample records ``client_lag_ms``, how late the client's own event loop
started the unit against its scheduled time. The sample's latency and deadline leave it out,
but a client that lags offers the server a different load than the scenario specifies, so the
harness watches it: :class:`ClientLagMonitor` groups finished samples into windows of the run
and reports each stretch of windows whose p99 lag exceeds a bound as one
:class:`~dbaops.record.kinds.ClientLagRecord` (in the trace and the live view).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from dbaops.record.kinds import ClientLagRecord
from dbaops.workloads.sink import SampleRow

#: Default bound on a window's p99 client lag (wall milliseconds).
DEFAULT_BOUND_MS = 50.0


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


@dataclass
class _Window:
    index: int
    lags: list[float] = field(default_factory=list)
    over: int = 0
    workloads: set[str] = field(default_factory=set)


@dataclass
class _Streak:
    since_s: float
    until_s: float
    units: int
    over: int
    p99_ms: float
    max_ms: float
    workloads: set[str]


class ClientLagMonitor:
    """Windows of ``window_s`` scenario seconds (by the samples' end times); consecutive
    windows whose p99 lag exceeds ``bound_ms`` are reported as one record when the stretch
    ends (or at :meth:`close`). ``current`` is the latest closed window's p99 when it
    exceeded the bound, for a live display."""

    def __init__(
        self,
        emit: Callable[[ClientLagRecord], None],
        window_s: float,
        bound_ms: float = DEFAULT_BOUND_MS,
    ) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self._emit = emit
        self.window_s = window_s
        self.bound_ms = bound_ms
        self._window: _Window | None = None
        self._streak: _Streak | None = None
        self.current: float | None = None
        self.worst_ms = 0.0
        self.records = 0

    def observe(self, rows: Iterable[SampleRow]) -> None:
        """Take finished samples (in roughly the order they ended)."""
        for row in rows:
            lag = row[12]  # client_lag_ms
            if lag is None:
                continue
            index = math.floor(row[5] / self.window_s)  # end_s
            window = self._window
            if window is None or index > window.index:
                if window is not None:
                    self._close_window(window)
                window = self._window = _Window(index)
            window.lags.append(lag)
            if lag > self.bound_ms:
                window.over += 1
                window.workloads.add(row[0])
            if lag > self.worst_ms:
                self.worst_ms = lag

    def close(self) -> None:
        """The run ended: report what is still open."""
        if self._window is not None:
            self._close_window(self._window)
            self._window = None
        self._end_streak()

    def _close_window(self, window: _Window) -> None:
        value = p99(window.lags)
        if value <= self.bound_ms:
            self.current = None
            self._end_streak()
            return
        self.current = value
        since = window.index * self.window_s
        streak = self._streak
        if streak is None:
            self._streak = _Streak(since, since + self.window_s, len(window.lags), window.over,
                                   value, max(window.lags), set(window.workloads))  # fmt: skip
            return
        streak.until_s = since + self.window_s
        streak.units += len(window.lags)
        streak.over += window.over
        streak.p99_ms = max(streak.p99_ms, value)
        streak.max_ms = max(streak.max_ms, max(window.lags))
        streak.workloads |= window.workloads

    def _end_streak(self) -> None:
        streak, self._streak = self._streak, None
        if streak is None:
            return
        self.records += 1
        self._emit(
            ClientLagRecord(
                t_scn=streak.until_s,
                since_s=streak.since_s,
                window_s=streak.until_s - streak.since_s,
                units=streak.units,
                over_bound=streak.over,
                p99_ms=round(streak.p99_ms, 3),
                max_ms=round(streak.max_ms, 3),
                bound_ms=self.bound_ms,
                workloads=sorted(streak.workloads),
            )
        )
