"""Wraps tools so every call is recorded in the trace with timing and its observation."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from dbaops.clock import ScenarioClock
from dbaops.records import Record, ToolCallRecord
from dbaops.tools.base import Tool, ToolResult

MAX_OBSERVATION_CHARS = 64_000


class ToolRecorder:
    """Issues call ids and writes one ToolCallRecord per call (also when the tool raises)."""

    def __init__(self, write: Callable[[Record], None], clock: ScenarioClock) -> None:
        self._write = write
        self._clock = clock
        self._ids = itertools.count(1)
        self.calls = 0

    def wrap(self, tool: Tool) -> Tool:
        async def handler(args: dict[str, Any]) -> ToolResult:
            call_id = f"c{next(self._ids):04d}"
            self.calls += 1
            t0, w0 = self._clock.now(), time.monotonic()
            try:
                result = await tool.handler(args)
            except Exception as exc:  # a tool bug is reported to the agent and recorded
                result = ToolResult(
                    ok=False,
                    error=f"{type(exc).__name__}: {exc}",
                    observation=f"error: tool failed: {exc}",
                )
            obs = result.observation
            if len(obs) > MAX_OBSERVATION_CHARS:
                obs = (
                    obs[:MAX_OBSERVATION_CHARS]
                    + f"\n(observation cut at {MAX_OBSERVATION_CHARS} chars)"
                )
            self._write(
                ToolCallRecord(
                    t_scn=t0,
                    call_id=call_id,
                    tool=tool.spec.name,
                    args=args,
                    ok=result.ok,
                    observation=obs,
                    error=result.error,
                    t_scn_end=self._clock.now(),
                    wall_ms=(time.monotonic() - w0) * 1000.0,
                    detail=result.detail,
                )
            )
            return result.model_copy(update={"detail": {**result.detail, "call_id": call_id}})

        return Tool(spec=tool.spec, handler=handler)
