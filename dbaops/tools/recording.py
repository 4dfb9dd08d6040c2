"""Wraps tools so every call is recorded in the trace with timing and its observation.

Only the harness writes the trace: the recorder holds the writer and hands agents tools whose
handlers return results, nothing else. A call still in flight when the run ends is recorded as
cancelled with its arguments and whatever the tool had recorded so far (e.g. the statements an
in-flight DDL had started), so the safety judge sees it like any other. Once the session has
ended, environment tools refuse further calls; only the report and mailbox reads remain (the
final report round).
"""

from __future__ import annotations

import contextvars
import itertools
import time
from collections.abc import Callable
from typing import Any

import anyio

from dbaops.clock import ScenarioClock
from dbaops.record.kinds import Record, ToolCallRecord
from dbaops.tools.base import Tool, ToolResult

MAX_OBSERVATION_CHARS = 64_000

#: Tools an agent may still call after its session has ended.
AFTER_END_TOOLS = frozenset({"submit_report", "read_mailbox", "update_task"})

_CALL_DETAIL: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "dbaops_call_detail", default=None
)


def call_detail() -> dict[str, Any]:
    """The trace detail of the tool call in progress; a tool fills it as it goes, so a call
    cancelled mid-way is still recorded with what it did (a scratch dict outside a call)."""
    detail = _CALL_DETAIL.get()
    return detail if detail is not None else {}


class ToolRecorder:
    """Issues call ids and writes one ToolCallRecord per call (also when the tool raises or
    the call is cancelled). ``ended`` is the session's end; ``on_report`` is called after each
    successful ``submit_report``."""

    def __init__(
        self,
        write: Callable[[Record], None],
        clock: ScenarioClock,
        ended: anyio.Event | None = None,
        on_report: Callable[[], None] | None = None,
    ) -> None:
        self._write = write
        self._clock = clock
        self._ended = ended
        self._on_report = on_report
        self._ids = itertools.count(1)
        self.calls = 0
        self.reports = 0

    def _record(
        self,
        tool: Tool,
        call_id: str,
        args: dict[str, Any],
        result: ToolResult,
        t0: float,
        w0: float,
        status: str = "completed",
    ) -> None:
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
                status=status,
                observation=obs,
                error=result.error,
                t_scn_end=self._clock.now(),
                wall_ms=(time.monotonic() - w0) * 1000.0,
                detail=result.detail,
            )
        )

    def wrap(self, tool: Tool) -> Tool:
        name = tool.spec.name

        async def handler(args: dict[str, Any]) -> ToolResult:
            args = dict(args) if isinstance(args, dict) else {"_invalid_arguments": repr(args)}
            call_id = f"c{next(self._ids):04d}"
            self.calls += 1
            t0, w0 = self._clock.now(), time.monotonic()
            if self._ended is not None and self._ended.is_set() and name not in AFTER_END_TOOLS:
                msg = "the session has ended: only submit_report (and the mailbox) remain"
                result = ToolResult(ok=False, error=msg, observation=f"error: {msg}")
                self._record(tool, call_id, args, result, t0, w0, status="refused")
                return result.model_copy(update={"detail": {"call_id": call_id}})
            detail: dict[str, Any] = {}
            token = _CALL_DETAIL.set(detail)
            try:
                result = await tool.handler(args)
            except anyio.get_cancelled_exc_class():
                msg = "cancelled: the run ended while the call was in flight"
                cancelled = ToolResult(ok=False, error=msg, observation=msg, detail=dict(detail))
                self._record(tool, call_id, args, cancelled, t0, w0, status="cancelled")
                raise
            except Exception as exc:  # a tool bug is reported to the agent and recorded
                result = ToolResult(
                    ok=False,
                    error=f"{type(exc).__name__}: {exc}",
                    observation=f"error: tool failed: {exc}",
                    detail=dict(detail),
                )
            finally:
                _CALL_DETAIL.reset(token)
            self._record(tool, call_id, args, result, t0, w0)
            if name == "submit_report" and result.ok:
                self.reports += 1
                if self._on_report is not None:
                    self._on_report()
            return ToolResult(
                ok=result.ok,
                observation=result.observation,
                error=result.error,
                detail={**result.detail, "call_id": call_id},
            )

        return Tool(spec=tool.spec.model_copy(), handler=handler)
