"""The timeline of a run: the event program, the agent's phase and the checks it is held to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio
import anyio.abc

from dbaops.agents.base import Budget
from dbaops.clock import ScenarioClock
from dbaops.dbms.errors import InstanceError
from dbaops.dbms.sessions import CONNECTION_ERRORS, SERVER_ERRORS, RunEndpoint
from dbaops.execution.actors import ActorContext, FaultError, run_fault
from dbaops.execution.checks import CheckSources, evaluate_check
from dbaops.execution.state_probe import StateProbe
from dbaops.record.kinds import CheckRecord, EventRecord
from dbaops.record.trace import RecordSink
from dbaops.scenario.checks import CheckSpec, ReportCheck
from dbaops.scenario.model import Event, Scenario
from dbaops.tools.recording import ToolRecorder
from dbaops.workloads.sink import SampleSink

Dispatch = Callable[[Event, bool], Awaitable[None]]


#: What keeps a timed fault from being applied when the agent has, say, stopped the server
#: it acts on (or the server cannot be started again), whatever the engine: the run goes on,
#: and the event is on record as failed with the reason.
FAULT_FAILURES = SERVER_ERRORS + CONNECTION_ERRORS + (FaultError, InstanceError)


def _fault_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


async def _event_actor(ev: Event, ctx: ActorContext, trace: RecordSink) -> None:
    """A live actor of the event program; one that cannot start is recorded, not fatal (also
    when the failure comes out of the actor's own task group, e.g. a load whose sessions
    cannot connect because the server has no slots left)."""
    assert ev.fault is not None
    try:
        await run_fault(ev.fault, ctx)
    except* FAULT_FAILURES as group:
        trace.write(
            EventRecord(
                t_scn=ctx.clock.now(),
                event_id=ev.id,
                at_s=ev.at,
                fault=ev.fault.kind,
                status="failed",
                detail={"error": "; ".join(_fault_error(e) for e in group.exceptions)[:600]},
            )
        )


async def event_program(
    events: list[Event],
    ctx: ActorContext,
    checker: Checker,
    dispatch: Dispatch,
    tg: anyio.abc.TaskGroup,
    probe: StateProbe | None = None,
) -> None:
    """Fire ``events`` at their scenario times: faults (live ones as actors beside the
    program), alerts (when their condition holds) and inspections, each recorded. While the
    agent works (``probe.active``), a one-shot fault is bracketed by catalog readings, so
    what it changes is not taken for the agent's."""
    clock, trace = ctx.clock, checker.trace
    for ev in sorted(events, key=lambda e: e.at):
        await clock.sleep_until(ev.at)
        detail: dict[str, Any] = {}
        alert_raised = ev.alert is not None
        if ev.alert is not None and ev.alert.when is not None:
            rec = await checker.record(ev.alert.when, "alert_condition")
            alert_raised = bool(rec.passed)
            detail["alert_condition"] = rec.passed
        status = "fired" if (alert_raised or ev.fault or ev.inspection) else "skipped"
        if ev.fault is not None:
            fault_ctx = replace(ctx, label=ev.id)
            if ev.fault.live:  # an actor: it runs beside the program
                tg.start_soon(_event_actor, ev, fault_ctx, trace)
            else:  # one-shot: in place when it returns
                bracket = probe if probe is not None and probe.active else None
                if bracket is not None:
                    await bracket.take("fault_before", ev.id)
                try:
                    await run_fault(ev.fault, fault_ctx)
                except FAULT_FAILURES as exc:
                    status, detail["error"] = "failed", _fault_error(exc)
                if bracket is not None:
                    await bracket.take("fault_after", ev.id)
        trace.write(
            EventRecord(
                t_scn=clock.now(),
                event_id=ev.id,
                at_s=ev.at,
                fault=ev.fault.kind if ev.fault else None,
                alert=ev.alert.title if ev.alert and alert_raised else None,
                inspection=ev.inspection.title if ev.inspection else None,
                status=status,
                detail=detail,
            )
        )
        if alert_raised or ev.inspection is not None:
            await dispatch(ev, alert_raised)


async def agent_phase(
    sc: Scenario,
    budget: Budget,
    clock: ScenarioClock,
    ended: anyio.Event,
    agent_done: anyio.Event,
    recorder: ToolRecorder,
) -> str:
    """Wait until the agent's session is over; returns what ended it. A bounded session ends
    (``ended`` is set) on the agent's report or when the agent returns, else at its time
    budget; a persistent one at the horizon (an agent that returns early just idles)."""
    with anyio.move_on_after(max(0.0, clock.to_mono(budget.time_s) - clock.mono())):
        await (ended.wait() if sc.mode == "bounded" else anyio.sleep_forever())
    if sc.mode == "persistent":
        return "horizon"
    if recorder.reports:
        return "report"
    if agent_done.is_set():
        return "agent returned without a report"
    return "time budget"


@dataclass(frozen=True)
class Checker:
    """Evaluates the scenario's checks on the run's database and records each one."""

    endpoint: RunEndpoint
    clock: ScenarioClock
    sink: SampleSink
    sources: CheckSources
    trace: RecordSink

    async def record(self, check: CheckSpec, purpose: str) -> CheckRecord:
        rec = await evaluate_check(
            check, purpose, self.endpoint, self.clock, self.sink, self.sources
        )
        self.trace.write(rec)
        return rec

    async def at(self, check: CheckSpec, at_s: float) -> None:
        """A terminal check that must also hold by scenario time ``at_s`` (a deadline)."""
        await self.clock.sleep_until(at_s)
        await self.record(check, "terminal")

    async def integrity_probes(self, sc: Scenario, horizon: float) -> None:
        """State invariants probed during the run (the end-of-run probe is in
        :meth:`terminal`)."""
        every = sc.evaluation.integrity_every_s
        assert every is not None
        t = every
        while t < horizon:
            await self.clock.sleep_until(t)
            for check in sc.evaluation.integrity:
                await self.record(check, "integrity")
            t += every

    async def terminal(self, sc: Scenario) -> None:
        """The terminal checks (report checks are judged at scoring time from the recorded
        report) and a last integrity probe."""
        for check in sc.evaluation.terminal:
            if not isinstance(check, ReportCheck):
                await self.record(check, "terminal")
        for check in sc.evaluation.integrity:
            await self.record(check, "integrity")
