"""One clock per run: maps scenario time to wall time.

Scenario time is what timelines, SLO windows and records speak in; wall time is what the
database and the client actually experience. ``time_scale`` compresses a scenario: with
``time_scale=0.1`` a 3600 s scenario takes 360 s of wall time. Transaction deadlines are wall
quantities and never scale.
"""

from __future__ import annotations

import time

import anyio


class ScenarioClock:
    """Monotonic scenario clock; every component of a run takes time from one instance."""

    def __init__(self, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.time_scale = time_scale
        self._t0_mono = time.monotonic()
        self._t0_wall = time.time()

    @classmethod
    def at_origin(cls, time_scale: float, origin_mono: float, origin_wall: float) -> ScenarioClock:
        """A clock with a given origin (:meth:`origin`): another process's copy of a run's
        clock (the monotonic clock is the machine's, so both read the same scenario time)."""
        clock = cls(time_scale)
        clock._t0_mono, clock._t0_wall = origin_mono, origin_wall
        return clock

    def origin(self) -> tuple[float, float]:
        """(monotonic, Unix) time of scenario time zero."""
        return self._t0_mono, self._t0_wall

    def restart(self, now_s: float = 0.0) -> None:
        """Make the current instant scenario time ``now_s`` (e.g. ``-warmup`` before t = 0)."""
        offset = now_s * self.time_scale
        self._t0_mono = time.monotonic() - offset
        self._t0_wall = time.time() - offset

    @property
    def wall_start(self) -> float:
        """Unix time of scenario time zero."""
        return self._t0_wall

    def now(self) -> float:
        """Current scenario time in seconds (may be negative before :meth:`restart`)."""
        return (time.monotonic() - self._t0_mono) / self.time_scale

    def wall_now(self) -> float:
        """Current Unix time."""
        return self._t0_wall + (time.monotonic() - self._t0_mono)

    def mono(self) -> float:
        """Raw monotonic seconds, for wall-clock latencies."""
        return time.monotonic()

    def to_scenario(self, mono: float) -> float:
        """Convert a monotonic reading to scenario time."""
        return (mono - self._t0_mono) / self.time_scale

    def to_mono(self, scenario_t: float) -> float:
        """Convert scenario time to a monotonic reading."""
        return self._t0_mono + scenario_t * self.time_scale

    def wall_seconds(self, scenario_seconds: float) -> float:
        """Wall duration of a scenario duration."""
        return scenario_seconds * self.time_scale

    async def sleep_until(self, scenario_t: float) -> None:
        """Sleep until scenario time ``scenario_t`` (returns at once if it has passed)."""
        delay = self.to_mono(scenario_t) - time.monotonic()
        if delay > 0:
            await anyio.sleep(delay)

    async def sleep(self, scenario_seconds: float) -> None:
        """Sleep for a scenario duration."""
        await anyio.sleep(max(0.0, scenario_seconds * self.time_scale))
