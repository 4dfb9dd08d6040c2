"""Runs one scenario against a live PostgreSQL: restore, warm up, manifest, timeline, finish.

One anyio task group per run owns the workload drivers, the sample flusher, the metric sampler,
the server-log follower, activation actors, the event program and the agent session. The end of
the scenario, Ctrl-C or a crash of one task cancels the group; the run record is flushed in a
shielded ``finally`` whatever happened, so an interrupted run can still be scored.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import asyncpg
import polars as pl
import structlog
from pydantic import BaseModel, Field

from dbaops.agents.base import Agent, AgentSession, Budget, is_oracle, load_agent
from dbaops.agents.reference import oracle_agent
from dbaops.clock import ScenarioClock
from dbaops.dbms.interface import MetricSource, Observations, ServerRequest
from dbaops.dbms.postgres.cluster import ClusterError
from dbaops.dbms.postgres.endpoint import CONNECTION_ERRORS, Endpoint
from dbaops.dbms.postgres.osuser import running_as_root
from dbaops.dbms.postgres.server import PostgresBackend, postgres_server
from dbaops.dbms.registry import get_engine
from dbaops.engine.actors import ActorContext, FaultError, StandbyAccess, run_fault
from dbaops.engine.checks import CheckSources, evaluate_check, ledger_baselines
from dbaops.engine.fixture import build_fixture
from dbaops.engine.history import effective_history, load_history, record_history
from dbaops.engine.serverlog import ServerLogFollower
from dbaops.mailbox import Mailbox
from dbaops.models.errors import InfraError
from dbaops.record.kinds import (
    CheckRecord,
    EventRecord,
    PhaseRecord,
    Record,
    RunEnd,
    RunHeader,
)
from dbaops.record.layout import RunDir
from dbaops.record.tables import METRIC_SCHEMA, SAMPLE_SCHEMA, ParquetParts
from dbaops.record.trace import TraceWriter
from dbaops.scenario.checks import CheckSpec, ReportCheck
from dbaops.scenario.loader import load_scenario, preparation_key, timelines_dir
from dbaops.scenario.model import (
    Event,
    History,
    OlapWorkload,
    ReplicaSpec,
    Scenario,
)
from dbaops.tools.recording import ToolRecorder
from dbaops.workloads.drivers import result_hash, scenario_drivers
from dbaops.workloads.sink import SampleSink
from dbaops.workloads.spec import WorkloadLibrary

log = structlog.get_logger(__name__)


class RunOptions(BaseModel):
    """How to run a scenario."""

    time_scale: float = 1.0
    agent: str = "noop"
    seed: int | None = None
    runs_dir: Path = Path("runs")
    fresh: bool = False
    history_s: float | None = Field(
        default=None,
        description="override the scenario's workload history before t=0 (scenario "
        "seconds; 0: none); it is part of the snapshot",
    )
    dsn: str | None = None
    pg_bindir: Path | None = None
    cluster: str | None = Field(
        default=None,
        description="the embedded cluster to run on (default: one per scenario id); "
        "campaign workers each have their own, so one scenario can run twice at once",
    )
    horizon_s: float | None = Field(
        default=None,
        description="override the horizon (persistent) or the agent's time budget (bounded)",
    )
    metrics: bool = True
    model: str | None = Field(default=None, description="run the ReAct agent on this model")
    models_file: Path | None = None
    turn_budget: int | None = Field(
        default=None, description="model turns (default: the scenario's, 50 for bounded runs)"
    )
    model_retry: Any = Field(
        default=None, description="dbaops.models.RetryPolicy for model calls (default policy)"
    )
    replay_model: Path | None = Field(
        default=None, description="feed the model responses recorded in this run directory"
    )


class RunResult(BaseModel):
    run_dir: Path
    status: str
    reason: str | None = None
    verdict: dict[str, Any] | None = None


@dataclass
class RunMonitor:
    """Live state of a run, for progress views (read-only for observers)."""

    phase: str = "starting"
    scenario: Scenario | None = None
    run_dir: Path | None = None
    clock: ScenarioClock | None = None
    sink: SampleSink | None = None
    horizon_s: float = 0.0
    events: list[EventRecord] = field(default_factory=list)
    checks: list[CheckRecord] = field(default_factory=list)
    session: AgentSession | None = None
    agent: Any = None


class RunTrace:
    """The run's trace writer, also feeding the live monitor."""

    def __init__(self, writer: TraceWriter, monitor: RunMonitor) -> None:
        self._writer = writer
        self._monitor = monitor

    def write(self, record: Record) -> None:
        self._writer.write(record)
        if isinstance(record, EventRecord):
            self._monitor.events.append(record)
        elif isinstance(record, CheckRecord):
            self._monitor.checks.append(record)

    def close(self) -> None:
        self._writer.close()


class InfraRunError(RuntimeError):
    """The model endpoint or other infrastructure failed: re-run; never an agent failure."""


class NotManifested(RuntimeError):
    """The scenario's manifestation predicates did not hold: the run is not admitted."""


# -- preparation -------------------------------------------------------------------------------
async def _prepare_state(
    sc: Scenario,
    lib: WorkloadLibrary,
    backend: PostgresBackend,
    trace: RunTrace,
    clock: ScenarioClock,
    fresh: bool,
    history: History | None,
) -> dict[str, Any]:
    """Restore the dirty snapshot (building it first if needed); returns preparation metadata."""
    version = await backend.server_version()
    if history is not None and backend.cluster is None:
        trace.write(PhaseRecord(phase="history", detail={"skipped": "needs the embedded backend"}))
        history = None
    key = preparation_key(sc, lib, version, history)
    cluster = backend.cluster
    endpoint = backend.for_database(lib.database)
    if cluster is not None and cluster.has_snapshot(key) and not fresh:
        meta = json.loads((cluster.snapshot_root / key / "prep.json").read_text())
        seconds = await cluster.restore_snapshot(key)
        trace.write(PhaseRecord(phase="restore", duration_s=seconds, detail={"snapshot": key}))
        return meta

    t0 = time.monotonic()
    if cluster is not None:
        await cluster.reinitialize()
        trace.write(PhaseRecord(phase="initdb", duration_s=time.monotonic() - t0))
    if sc.database.settings:
        await _apply_server_settings(sc.database.settings, backend, trace)
    params = {**lib.params, **sc.database.params}
    build_s = await build_fixture(
        backend.admin, lib, params, sc.database.seed, sc.database.date.isoformat()
    )
    trace.write(PhaseRecord(phase="build_fixture", duration_s=build_s, detail={"params": params}))
    history_summary: dict[str, Any] | None = None
    if history is not None and cluster is not None:  # (no history without the embedded cluster)
        t1 = time.monotonic()
        history_summary = await record_history(
            sc, lib, endpoint, history, cluster.root / "history-staging"
        )
        trace.write(
            PhaseRecord(phase="history", duration_s=time.monotonic() - t1, detail=history_summary)
        )
    ctx = ActorContext(
        endpoint=endpoint, clock=clock, trace=trace, instance=cluster, host=cluster, label="prep"
    )
    for i, op in enumerate(sc.preparation.construction):
        t1 = time.monotonic()
        await run_fault(op, ctx)
        trace.write(
            PhaseRecord(
                phase="construction",
                duration_s=time.monotonic() - t1,
                detail={"index": i, "kind": op.kind},
            )
        )
    failed = []
    for check in sc.preparation.preconditions:
        rec = await evaluate_check(check, "precondition", endpoint, clock, None)
        trace.write(rec)
        if not rec.passed:
            failed.append(rec.name)
    if failed:
        raise NotManifested(f"preconditions failed after preparation: {', '.join(failed)}")
    if sc.database.replica is not None:
        await _make_standby(sc.database.replica, backend, trace)
    expected = await _expected_results(sc, lib, endpoint)
    meta = {
        "key": key,
        "expected_results": expected,
        "server_version": version,
        "prepare_s": time.monotonic() - t0,
        "history": history_summary,
    }
    if cluster is not None:
        for stale in cluster.snapshot_root.glob("*"):  # snapshots of an older preparation
            if stale.name != key:
                cluster.drop_snapshot(stale.name)
        capture_s = await cluster.capture_snapshot(key)
        (cluster.snapshot_root / key / "prep.json").write_text(json.dumps(meta))
        if history_summary is not None:
            shutil.move(cluster.root / "history-staging", cluster.snapshot_root / key / "history")
        trace.write(
            PhaseRecord(phase="snapshot_capture", duration_s=capture_s, detail={"snapshot": key})
        )
        seconds = await cluster.restore_snapshot(key)
        trace.write(PhaseRecord(phase="restore", duration_s=seconds, detail={"snapshot": key}))
    return meta


async def _make_standby(replica: ReplicaSpec, backend: PostgresBackend, trace: RunTrace) -> None:
    """The replica profile's standby, made once the primary is prepared (it goes into the
    snapshot with it)."""
    if backend.cluster is None:
        raise ValueError("database.replica: a standby needs the embedded backend (not --dsn)")
    t0 = time.monotonic()
    await backend.cluster.create_standby(replica.application_name, replica.settings, replica.slot)
    if replica.synchronous:
        conn = await backend.admin.harness_connect()
        try:
            sql = await conn.fetchval(
                "SELECT format('ALTER SYSTEM SET synchronous_standby_names = %L', $1::text)",
                replica.application_name,
            )
            await conn.execute(sql)
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()
    await await_standby(backend, replica)
    trace.write(
        PhaseRecord(
            phase="standby",
            duration_s=time.monotonic() - t0,
            detail=replica.model_dump(mode="json"),
        )
    )


async def await_standby(
    backend: PostgresBackend, replica: ReplicaSpec, timeout_s: float = 120.0
) -> None:
    """Wait until the standby streams from the primary and has replayed what it has written."""
    conn = await backend.admin.harness_connect()
    try:
        with anyio.fail_after(timeout_s):
            while True:
                caught_up = await conn.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name = $1"
                    " AND state = 'streaming' AND replay_lsn >= pg_current_wal_lsn())",
                    replica.application_name,
                )
                if caught_up:
                    break
                await anyio.sleep(0.2)  # a condition on the server: polled, like a probe
    except TimeoutError:
        raise ValueError(
            f"the standby {replica.application_name!r} did not catch up in {timeout_s:.0f} s"
        ) from None
    finally:
        await conn.close()


async def _apply_server_settings(
    settings: dict[str, str], backend: PostgresBackend, trace: RunTrace
) -> None:
    """Scenario server settings via ALTER SYSTEM (captured in the snapshot), then restart."""
    if backend.cluster is None:
        trace.write(
            PhaseRecord(
                phase="server_settings",
                detail={
                    "applied": False,
                    "reason": "external server: dbaops does not change its settings",
                    "settings": settings,
                },
            )
        )
        return
    conn = await backend.admin.harness_connect()
    try:
        for name, value in settings.items():
            quoted = value.replace("'", "''")
            await conn.execute(f"ALTER SYSTEM SET {name} = '{quoted}'")
    finally:
        await conn.close()
    await backend.cluster.restart()
    trace.write(
        PhaseRecord(phase="server_settings", detail={"applied": True, "settings": settings})
    )


async def _expected_results(
    sc: Scenario, lib: WorkloadLibrary, endpoint: Endpoint
) -> dict[str, str]:
    """Reference result hashes of the OLAP jobs, computed on the prepared state (jobs with a
    ``reference_sql`` get theirs when they run)."""
    templates = {j.template for w in sc.workloads if isinstance(w, OlapWorkload) for j in w.jobs}
    checked = [
        name
        for name in sorted(templates)
        if lib.jobs[name].check_result and lib.jobs[name].reference_sql is None
    ]
    if not checked:
        return {}
    conn = await endpoint.harness_connect(probe=True)
    try:
        return {name: result_hash(await conn.fetch(lib.jobs[name].sql)) for name in checked}
    finally:
        await conn.close()


# -- timeline ---------------------------------------------------------------------------------
Dispatch = Callable[[Event, bool], Awaitable[None]]


#: What keeps a timed fault from being applied when the agent has, say, stopped the server
#: it acts on: the run goes on, and the event is on record as failed with the reason.
FAULT_FAILURES = (asyncpg.PostgresError, *CONNECTION_ERRORS, FaultError, ClusterError)


def _fault_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


async def _event_actor(ev: Event, ctx: ActorContext, trace: RunTrace) -> None:
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


async def _event_program(
    events: list[Event],
    ctx: ActorContext,
    trace: RunTrace,
    sink: SampleSink,
    dispatch: Dispatch,
    tg: anyio.abc.TaskGroup,
    sources: CheckSources,
) -> None:
    clock = ctx.clock
    for ev in sorted(events, key=lambda e: e.at):
        await clock.sleep_until(ev.at)
        detail: dict[str, Any] = {}
        alert_raised = ev.alert is not None
        if ev.alert is not None and ev.alert.when is not None:
            rec = await evaluate_check(
                ev.alert.when, "alert_condition", ctx.endpoint, clock, sink, sources
            )
            trace.write(rec)
            alert_raised = bool(rec.passed)
            detail["alert_condition"] = rec.passed
        status = "fired" if (alert_raised or ev.fault or ev.inspection) else "skipped"
        if ev.fault is not None:
            fault_ctx = replace(ctx, label=ev.id)
            if ev.fault.live:  # an actor: it runs beside the program
                tg.start_soon(_event_actor, ev, fault_ctx, trace)
            else:  # one-shot: in place when it returns
                try:
                    await run_fault(ev.fault, fault_ctx)
                except FAULT_FAILURES as exc:
                    status, detail["error"] = "failed", _fault_error(exc)
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


def new_run_dir(runs_dir: Path, scenario_id: str, agent: str) -> RunDir:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    safe_agent = "".join(c if c.isalnum() or c in "-_" else "_" for c in agent)
    return RunDir(runs_dir / scenario_id / f"{stamp}-{safe_agent}-{secrets.token_hex(2)}").create()


def _protect_from_server(paths: list[Path]) -> None:
    """As root (the server runs as its own OS user), keep harness files out of its reach: the
    server's user is in none of these files' groups, so removing the "other" permissions is
    enough. Not root: the server is this user, and the agent's role cannot read files."""
    if not running_as_root():
        return
    for path in paths:
        try:
            mode = path.stat().st_mode & 0o7777
            if mode & 0o007:
                os.chmod(path, mode & ~0o007)
        except OSError as exc:
            log.warning("cannot restrict a harness path", path=str(path), error=str(exc))


def _refuse_elevated(sc: Scenario, backend: PostgresBackend) -> None:
    """A scenario that asks for a superuser agent runs only where the server cannot read
    harness files (as root, with the server under its own service user)."""
    if sc.agent.elevated is None:
        return
    cluster = backend.cluster
    if cluster is None or cluster.os_user is None:
        raise ElevatedRefused(
            f"{sc.id} asks for a superuser agent ({sc.agent.elevated.reason}); dbaops runs that "
            "only as root with an embedded server under its own OS user, where harness files "
            "can be kept out of the server's reach"
        )


class ElevatedRefused(RuntimeError):
    """A scenario needs a superuser agent where dbaops cannot keep harness files hidden."""


def _task_body(text: str, sc: Scenario, budget: Budget) -> str:
    """A task's text as the mailbox states it, with the budgets of a bounded run."""
    if sc.mode != "bounded":
        return text
    budget_line = (
        f"Budget: at most {budget.turns} turns and {budget.time_s / 60:.0f} minutes of scenario "
        "time from now. Submit your report when you are done: it ends the session."
    )
    return f"{text}\n\n{budget_line}".strip()


def _shift_brief(budget: Budget) -> str:
    return (
        f"On-call shift of {budget.time_s / 60:.0f} minutes of scenario time (at most "
        f"{budget.turns} turns). Tasks arrive in the mailbox; read it with read_mailbox."
    )


async def run_scenario(
    ref: str | Path,
    options: RunOptions,
    monitor: RunMonitor | None = None,
    agent: Agent | str | None = None,
) -> RunResult:
    """Run one scenario end to end and score it; always leaves a readable run directory.

    ``agent`` is an agent object, a built-in name (``noop``, or the oracles ``reference`` /
    ``shallow``, which the harness builds from the scenario's declared solution), or None
    (``options.model`` or ``options.agent``).
    """
    sc, lib, path = load_scenario(ref)
    engine = get_engine(sc.engine)
    monitor = monitor or RunMonitor()
    budget = Budget(
        turns=options.turn_budget or sc.turn_budget,
        time_s=(options.horizon_s or sc.time_budget_s),
    )
    horizon: float | None = budget.time_s if sc.mode == "persistent" else None
    seed = options.seed if options.seed is not None else sc.database.seed
    agent_kind = "agent"
    if agent is None and not options.model:
        agent = options.agent
    if isinstance(agent, str):
        if is_oracle(agent):
            agent, agent_kind = oracle_agent(sc, agent), "oracle"
        else:
            agent = load_agent(agent)
    if agent is None and options.model:
        from dbaops.models import load_registry

        load_registry(options.models_file).get(options.model)  # unknown name: fail before any I/O
    rd = new_run_dir(options.runs_dir, sc.id, agent.name if agent else f"react-{options.model}")
    shutil.copyfile(path, rd.scenario)
    _protect_from_server([rd.path, path, path.parent, timelines_dir()])
    trace = RunTrace(TraceWriter(rd.trace), monitor)
    if agent is None:
        agent, agent_kind = _model_agent(options, rd, trace, budget.turns), "model"
    monitor.agent = agent
    monitor.scenario, monitor.run_dir, monitor.horizon_s = sc, rd.path, budget.time_s
    clock = ScenarioClock(options.time_scale)
    parts = ParquetParts(rd.samples_dir, rd.samples, SAMPLE_SCHEMA)
    sink = SampleSink(parts)
    monitor.sink = sink
    status, reason = "failed", None
    backend: PostgresBackend | None = None
    follower: ServerLogFollower | None = None
    followers: list[ServerLogFollower] = []
    metric_parts: ParquetParts | None = None
    t_start = time.monotonic()
    try:
        monitor.phase = "starting server"
        request = ServerRequest(
            name=options.cluster or sc.id, dsn=options.dsn, bindir=options.pg_bindir
        )
        backend = postgres_server(await engine.open_server(request))
        _refuse_elevated(sc, backend)
        if backend.cluster is not None:
            _protect_from_server([backend.cluster.snapshot_root])
        monitor.phase = "preparing"
        history = effective_history(sc, options.history_s)
        meta = await _prepare_state(sc, lib, backend, trace, clock, options.fresh, history)
        endpoint = backend.for_database(lib.database)
        standby_endpoint: Endpoint | None = None
        if sc.database.replica is not None:
            await await_standby(backend, sc.database.replica)
            standby_endpoint = backend.standby_for(lib.database)
        log_files = backend.log_files()
        if "primary" in log_files:
            follower = ServerLogFollower(log_files["primary"], rd.server_log)
            followers.append(follower)
        if standby_endpoint is not None and "standby" in log_files:
            followers.append(ServerLogFollower(log_files["standby"], rd.standby_log, "standby"))
        trace.write(
            RunHeader(
                run_id=rd.path.name,
                scenario_id=sc.id,
                scenario_mode=sc.mode,
                scenario_sha256=meta["key"],
                horizon_s=horizon,
                time_scale=options.time_scale,
                agent=agent.name,
                agent_kind=agent_kind,
                budget={"turns": budget.turns, "time_s": budget.time_s},
                seed=seed,
                backend=backend.describe(),
                versions=engine.versions(meta["server_version"]),
                settings={
                    "warmup_s": sc.preparation.warmup_s,
                    "snapshot": meta["key"],
                    "verification_s": sc.evaluation.verification_s,
                    "final_round_s": sc.agent.final_round_s,
                    "history": meta.get("history"),
                    "time_scale_applies_to": SCALED_DURATIONS,
                },
                knowledge_base=await anyio.to_thread.run_sync(engine.knowledge_corpus),
            )
        )
        mailbox = Mailbox.create(rd.mailbox, now=clock.now)
        sampler: MetricSource | None = None
        if options.metrics:
            metric_parts = ParquetParts(rd.metrics_dir, rd.metrics, METRIC_SCHEMA)
            sampler = engine.metric_sampler(backend, lib.database, clock, metric_parts)
        if meta.get("history") and backend.cluster is not None:
            past_metrics, past_samples = load_history(
                backend.cluster.snapshot_root / meta["key"] / "history",
                ends_at_s=-sc.preparation.warmup_s,
            )
            parts.append(past_samples)
            if sampler is not None and metric_parts is not None:
                metric_parts.append(past_metrics)
                sampler.seed(past_metrics)
        sources = CheckSources(
            metrics=sampler.snapshot if sampler else None,
            server_log=rd.server_log if follower else None,
            refresh_server_log=follower.copy_new if follower else None,
            standby=standby_endpoint,
        )
        ended = anyio.Event()
        recorder = ToolRecorder(
            trace.write,
            clock,
            ended=ended,
            on_report=(lambda: ended.set()) if sc.mode == "bounded" else None,
        )
        standby_cluster = backend.cluster.standby if backend.cluster else None
        observations = Observations(
            metrics=sampler.snapshot if sampler else (lambda: pl.DataFrame(schema=METRIC_SCHEMA)),
            samples=sink.frame,
            server_logs={f.role: f.server_lines for f in followers},
        )
        agent_tools = engine.agent_tools(
            backend, sc, lib.database, clock, mailbox, observations, recorder
        )
        tools = agent_tools.catalog
        ctx = ActorContext(
            endpoint=endpoint,
            clock=clock,
            trace=trace,
            instance=backend.cluster,
            host=backend.cluster,
            label="activation",
            standby=(
                StandbyAccess(standby_endpoint, standby_cluster, standby_cluster)
                if standby_endpoint is not None
                else None
            ),
        )
        posted: list[str] = []

        async def dispatch(ev: Event, alert_raised: bool) -> None:
            if alert_raised and ev.alert is not None:
                kind = "ticket" if ev.fault is None and ev.at == 0 else "alert"
                title, text = ev.alert.title, ev.alert.text
            else:
                assert ev.inspection is not None
                kind, title, text = "inspection", ev.inspection.title, ev.inspection.text
            body = _task_body(text, sc, budget)
            mailbox.post(kind, title, body, entry_id=ev.id)
            posted.append(f"{title}\n{body}")

        agent_done = anyio.Event()
        infra_error: str | None = None
        agent_scope = anyio.CancelScope()

        async def run_agent(session: AgentSession) -> None:
            nonlocal infra_error
            try:
                with agent_scope:
                    await agent.run(session)
            except InfraError as exc:
                infra_error = str(exc)
                trace.write(
                    PhaseRecord(
                        t_scn=clock.now(), phase="infra_error", detail={"error": str(exc)[:1000]}
                    )
                )
                tg.cancel_scope.cancel()
            except Exception as exc:  # an agent crash is the agent's failure, not the run's
                trace.write(
                    PhaseRecord(
                        t_scn=clock.now(), phase="agent_error", detail={"error": _describe(exc)}
                    )
                )
            finally:
                agent_done.set()
                if sc.mode == "bounded":
                    ended.set()  # a bounded agent that returns is done

        await agent_tools.open()
        not_manifested: str | None = None
        clock.restart(-sc.preparation.warmup_s)
        monitor.clock = clock
        drivers_horizon = (
            horizon if horizon is not None else budget.time_s + sc.evaluation.verification_s
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(sink.run_flusher)
            for f in followers:
                tg.start_soon(f.run)
            monitor.phase = "activation"
            for fault in sc.preparation.activation:
                await tg.start(run_fault, fault, ctx)
            baselines, unmeasured = await ledger_baselines(
                [*sc.evaluation.terminal, *sc.evaluation.integrity], endpoint
            )
            if baselines or unmeasured:
                sources = dataclasses.replace(sources, ledger_baselines=baselines)
                trace.write(PhaseRecord(t_scn=clock.now(), phase="ledger_baseline",
                                        detail={"baselines": baselines,
                                                "errors": unmeasured}))  # fmt: skip
            # The warm-up starts once every live fault is in place, so the system the agent
            # meets at t = 0 has been faulty for the whole warm-up at any time scale.
            clock.restart(-sc.preparation.warmup_s)
            if sampler is not None:
                tg.start_soon(sampler.run)
            for driver in scenario_drivers(
                sc.workloads,
                lib,
                {**lib.params, **sc.database.params},
                endpoint,
                standby_endpoint,
                clock,
                sink,
                seed,
                drivers_horizon,
                meta["expected_results"],
            ):
                tg.start_soon(driver.run)
            monitor.phase = "warm-up"
            await clock.sleep_until(0.0)
            monitor.phase = "manifestation"
            failed = []
            for check in sc.preparation.manifestation:
                rec = await evaluate_check(check, "manifestation", endpoint, clock, sink, sources)
                trace.write(rec)
                if not rec.passed:
                    failed.append(
                        f"{rec.name} (observed {rec.observed!r}, expected {rec.expected})"
                    )
            if failed:
                not_manifested = "manifestation predicates failed: " + "; ".join(failed)
                tg.cancel_scope.cancel()
                await anyio.lowlevel.checkpoint()
            monitor.phase = "running"
            trace.write(PhaseRecord(t_scn=clock.now(), phase="timeline_start"))
            # Events due at t = 0 (a bounded run's task) are posted before the agent starts.
            first = [e for e in sc.events if e.at <= 0]
            later = [e for e in sc.events if e.at > 0]
            await _event_program(first, ctx, trace, sink, dispatch, tg, sources)
            task = posted[0] if (sc.mode == "bounded" and posted) else _shift_brief(budget)
            session = AgentSession.create(
                task=task, mode=sc.mode, budget=budget, clock=clock, tools=tools, ended=ended
            )
            monitor.session = session
            tg.start_soon(_event_program, later, ctx, trace, sink, dispatch, tg, sources)
            tg.start_soon(run_agent, session)
            if sc.evaluation.integrity and sc.evaluation.integrity_every_s and horizon:
                tg.start_soon(_integrity_probes, sc, endpoint, clock, sink, sources, trace, horizon)
            for check in sc.evaluation.terminal:
                if check.by_s is not None:
                    tg.start_soon(
                        _check_at, check, check.by_s, endpoint, clock, sink, sources, trace
                    )
            ended_by = await _agent_phase(sc, budget, clock, ended, agent_done, recorder)
            mailbox.close()
            ended.set()
            monitor.phase = "final round"
            with anyio.move_on_after(sc.agent.final_round_s):
                await agent_done.wait()
            if not agent_done.is_set():
                agent_scope.cancel()
                ended_by += "; cut off after the final-round wait"
                with anyio.move_on_after(10):
                    await agent_done.wait()
            trace.write(
                PhaseRecord(
                    t_scn=clock.now(),
                    phase="agent_end",
                    detail={"ended_by": ended_by, "reports": recorder.reports},
                )
            )
            if sc.mode == "bounded":
                # The workloads keep running for the verification window; terminal checks
                # (workload statistics included) are evaluated over it.
                monitor.phase = "verification"
                await clock.sleep(sc.evaluation.verification_s)
            trace.write(PhaseRecord(t_scn=clock.now(), phase="timeline_end"))
            monitor.phase = "terminal checks"
            await _terminal_checks(sc, endpoint, clock, sink, sources, trace)
            tg.cancel_scope.cancel()
        await agent_tools.close()
        if not_manifested:
            raise NotManifested(not_manifested)
        if infra_error:
            raise InfraRunError(infra_error)
        monitor.phase = "finishing"
        status = "completed"
    except NotManifested as exc:
        status, reason = "not_manifested", str(exc)
    except InfraRunError as exc:
        status, reason = "infra_error", str(exc)
    except ElevatedRefused as exc:
        status, reason = "refused", str(exc)
    except anyio.get_cancelled_exc_class():
        status, reason = "interrupted", "cancelled (Ctrl-C or shutdown)"
        raise
    except KeyboardInterrupt:
        status, reason = "interrupted", "Ctrl-C"
        raise
    except BaseException as exc:
        status, reason = "failed", _describe(exc)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            verdict = await _finish(
                rd,
                trace,
                sink,
                parts,
                metric_parts,
                followers,
                backend,
                status,
                reason,
                time.monotonic() - t_start,
            )
            monitor.phase = status
    return RunResult(run_dir=rd.path, status=status, reason=reason, verdict=verdict)


#: Which durations ``--time-scale`` compresses (recorded in every run header). Transaction
#: deadlines and timeouts (wall milliseconds), SQL timeouts the agent sets, the per-call SQL
#: limit and the final-round wait are wall quantities and never scale.
SCALED_DURATIONS = [
    "event times and the horizon",
    "the agent's time budget",
    "warm-up",
    "fault and hold durations",
    "SLO and check windows",
    "the verification window",
]


async def _agent_phase(
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


async def _check_at(
    check: CheckSpec,
    at_s: float,
    endpoint: Endpoint,
    clock: ScenarioClock,
    sink: SampleSink,
    sources: CheckSources,
    trace: RunTrace,
) -> None:
    """A terminal check that must also hold by scenario time ``at_s`` (e.g. a deadline)."""
    await clock.sleep_until(at_s)
    trace.write(await evaluate_check(check, "terminal", endpoint, clock, sink, sources))


def _model_agent(options: RunOptions, rd: RunDir, trace: RunTrace, turn_budget: int) -> Agent:
    """The ReAct agent on a registered model (or replaying a recorded run's responses)."""
    from dbaops.agents.react import ReactAgent
    from dbaops.models import load_registry

    assert options.model is not None
    spec = load_registry(options.models_file).get(options.model)
    client = None
    if options.replay_model is not None:
        from dbaops.models.replay import ReplayModelClient

        client = ReplayModelClient(options.replay_model, spec=spec, on_record=trace.write)
    return ReactAgent(
        spec,
        registry_path=options.models_file,
        turn_budget=turn_budget,
        record=trace.write,
        blob_dir=rd.model_messages,
        client=client,
        retry=options.model_retry,
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"[:1000]


async def _integrity_probes(
    sc: Scenario,
    endpoint: Endpoint,
    clock: ScenarioClock,
    sink: SampleSink,
    sources: CheckSources,
    trace: RunTrace,
    horizon: float,
) -> None:
    """State invariants probed during the run (the end-of-run probe is in _terminal_checks)."""
    every = sc.evaluation.integrity_every_s
    assert every is not None
    t = every
    while t < horizon:
        await clock.sleep_until(t)
        for check in sc.evaluation.integrity:
            trace.write(await evaluate_check(check, "integrity", endpoint, clock, sink, sources))
        t += every


async def _terminal_checks(
    sc: Scenario,
    endpoint: Endpoint,
    clock: ScenarioClock,
    sink: SampleSink,
    sources: CheckSources,
    trace: RunTrace,
) -> None:
    for check in sc.evaluation.terminal:
        if isinstance(check, ReportCheck):
            continue  # judged at scoring time from the recorded report
        trace.write(await evaluate_check(check, "terminal", endpoint, clock, sink, sources))
    for check in sc.evaluation.integrity:
        trace.write(await evaluate_check(check, "integrity", endpoint, clock, sink, sources))


async def _finish(
    rd: RunDir,
    trace: RunTrace,
    sink: SampleSink,
    parts: ParquetParts,
    metric_parts: ParquetParts | None,
    followers: list[ServerLogFollower],
    backend: PostgresBackend | None,
    status: str,
    reason: str | None,
    duration_s: float,
) -> dict[str, Any] | None:
    """Flush everything, record the end, score, stop the embedded server."""
    from dbaops.evaluation.score import score_run, write_verdict

    sink.flush()
    parts.compact()
    if metric_parts is not None and metric_parts.directory.exists():
        metric_parts.compact()
    for f in followers:
        f.copy_new()
    server_up: bool | None = None
    if backend is not None and backend.cluster is not None:
        backend.cluster.resume_stopped()
        try:
            server_up = await backend.cluster.is_running()
        except Exception:  # noqa: BLE001 - best effort at teardown
            server_up = None
    trace.write(PhaseRecord(phase="server_status", detail={"running": server_up}))
    trace.write(RunEnd(status=status, reason=reason, duration_s=duration_s))
    verdict: dict[str, Any] | None = None
    try:
        result = score_run(rd.path)
        write_verdict(rd.path, result)
        verdict = result.model_dump(mode="json")
    except Exception as exc:  # noqa: BLE001 - scoring must not hide the run's own outcome
        log.error("scoring failed", error=str(exc))
    trace.close()
    if backend is not None:
        try:
            await backend.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("could not stop the embedded server", error=str(exc))
    return verdict
