"""The harness's reading of the catalog while the agent works (the judge's G12 and G14).

Read when the agent starts, before and after every one-shot fault the event program injects
while the agent works (what the harness changes is not the agent's), and when the agent ends.
A reading that fails is recorded as such: the judge fails closed on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from dbaops.clock import ScenarioClock
from dbaops.dbms.sessions import CONNECTION_ERRORS, SERVER_ERRORS, RunEndpoint
from dbaops.record.kinds import StateRecord
from dbaops.record.trace import RecordSink


@dataclass
class StateProbe:
    """Reads and records the catalog state of one run's database."""

    endpoint: RunEndpoint
    clock: ScenarioClock
    trace: RecordSink
    #: whether the agent is at work (faults are then bracketed by readings)
    active: bool = False
    #: wall seconds one attempt may take (a frozen server never answers)
    attempt_s: float = 5.0

    async def take(self, label: str, event_id: str | None = None, *, retry_s: float = 0.0) -> None:
        """Read the state now and record it (an engine that reads none records nothing).
        Only the agent's end retries (``retry_s``: the agent may be restarting the server):
        a reading that opens an interval never holds the timeline up for long."""
        error = "no answer"
        with anyio.move_on_after(max(retry_s, self.attempt_s)):
            while True:
                try:
                    state = await self.endpoint.catalog_state()
                except SERVER_ERRORS + CONNECTION_ERRORS + (TimeoutError,) as exc:
                    error = f"{type(exc).__name__}: {exc}"[:300]
                    if retry_s <= 0:
                        break
                    await anyio.sleep(1.0)
                    continue
                if state is not None:
                    self._write(label, event_id, state, None)
                return
        self._write(label, event_id, None, error)

    def _write(
        self,
        label: str,
        event_id: str | None,
        state: dict[str, dict[str, str]] | None,
        error: str | None,
    ) -> None:
        self.trace.write(
            StateRecord(
                t_scn=self.clock.now(), label=label, event_id=event_id, state=state, error=error
            )
        )
