"""Runs one scenario against a live database: a short sequence of phases over one run context.

:func:`run_scenario` plans the run (:func:`_plan`: scenario, agent, run directory, trace, clock),
opens the scenario engine's server (:func:`_open_server`), prepares the dirty state
(:func:`_prepare`), writes the run header (:func:`_write_header`), sets up what observes the run
and what the agent acts with (:func:`_equip`), runs the timeline (:func:`_run_timeline`) and
finishes (:func:`_finish`: flush, record the end, score, stop the server).

One anyio task group per run owns the workload drivers, the sample flusher, the metric sampler,
the server-log followers, activation actors, the event program and the agent session. The end
of the scenario, Ctrl-C or a crash of one task cancels the group; the run record is flushed in
a shielded ``finally`` whatever happened, so an interrupted run can still be scored.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import polars as pl
import structlog
from pydantic import BaseModel, Field

from dbaops.agents.base import Agent, AgentSession, Budget, is_oracle, load_agent
from dbaops.agents.noop import NoopAgent, noop_waits
from dbaops.agents.reference import oracle_agent
from dbaops.clock import ScenarioClock
from dbaops.containers.daemon import DockerUnavailable
from dbaops.dbms.dialect import engine_dialect
from dbaops.dbms.interface import (
    AgentTools,
    DatabaseEngine,
    DatabaseServer,
    MetricSource,
    Observations,
    ServerRequest,
)
from dbaops.dbms.osuser import running_as_root
from dbaops.dbms.registry import get_engine
from dbaops.dbms.sessions import RunEndpoint
from dbaops.evaluation.safety.models import BOOTSTRAP_SUPERUSER
from dbaops.execution.actors import ActorContext, StandbyAccess, run_fault
from dbaops.execution.checks import CheckSources, ledger_baselines
from dbaops.execution.history import effective_history, load_history
from dbaops.execution.preparation import NotManifested, prepare_state
from dbaops.execution.scaled_settings import apply_scaled_settings
from dbaops.execution.serverlog import ServerLogFollower
from dbaops.execution.state_probe import StateProbe
from dbaops.execution.survey import take_survey
from dbaops.execution.timeline import Checker, agent_phase, event_program
from dbaops.mailbox import Mailbox
from dbaops.models.errors import InfraError, ModelConfigError
from dbaops.models.registry import ModelSpec
from dbaops.record.kinds import CheckRecord, EventRecord, PhaseRecord, Record, RunEnd, RunHeader
from dbaops.record.layout import RunDir
from dbaops.record.load import RunData, load_run
from dbaops.record.tables import METRIC_SCHEMA, SAMPLE_SCHEMA, ParquetParts
from dbaops.record.trace import TraceWriter
from dbaops.scenario.loader import load_scenario, timelines_dir
from dbaops.scenario.model import Event, Scenario
from dbaops.tools.recording import ToolRecorder
from dbaops.workloads.host import DriverPlan, DriverProcess, run_workloads
from dbaops.workloads.lag import DEFAULT_BOUND_MS, ClientLagMonitor
from dbaops.workloads.sink import RECENT_WINDOW_S, SampleSink
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
    backend: Literal["embedded", "docker"] | None = Field(
        default=None,
        description="where the server runs (default: the scenario's backend, else embedded)",
    )
    docker_image: str | None = Field(
        default=None, description="docker backend: a named server image instead of dbaops' own"
    )
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
    drivers_inline: bool = Field(
        default=False,
        description="run the workload drivers on the run's own event loop instead of their own "
        "process (for debugging: the agent, the sampler and the judge then share their loop)",
    )
    client_lag_bound_ms: float = Field(
        default=DEFAULT_BOUND_MS,
        gt=0,
        description="warn (trace and live view) when a second's p99 client lag exceeds this",
    )


class RunResult(BaseModel):
    """How a run ended (its verdict is the caller's to compute, once)."""

    run_dir: Path
    status: str
    reason: str | None = None


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
    client_lag: ClientLagMonitor | None = None


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


class RunRefused(RuntimeError):
    """The run cannot be made as configured (re-running it unchanged cannot help)."""


class ElevatedRefused(RunRefused):
    """A scenario needs a superuser agent where dbaops cannot keep harness files hidden."""


@dataclass
class RunContext:
    """What the phases of one run share; later phases fill in the optional parts."""

    sc: Scenario
    lib: WorkloadLibrary
    options: RunOptions
    engine: DatabaseEngine
    monitor: RunMonitor
    agent: Agent
    agent_kind: str
    budget: Budget
    horizon: float | None  # persistent: the event program's length; bounded: None
    seed: int
    rd: RunDir
    trace: RunTrace
    clock: ScenarioClock
    parts: ParquetParts
    sink: SampleSink
    t_start: float = field(default_factory=time.monotonic)
    backend: DatabaseServer | None = None
    followers: list[ServerLogFollower] = field(default_factory=list)
    metric_parts: ParquetParts | None = None


@dataclass
class Prepared:
    """The prepared database of a run."""

    backend: DatabaseServer
    meta: dict[str, Any]
    endpoint: RunEndpoint
    standby_endpoint: RunEndpoint | None
    follower: ServerLogFollower | None


@dataclass
class Equipment:
    """What observes the run and what the agent acts with."""

    mailbox: Mailbox
    sampler: MetricSource | None
    sources: CheckSources
    recorder: ToolRecorder
    ended: anyio.Event
    agent_tools: AgentTools
    actors: ActorContext


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


def _refuse_elevated(sc: Scenario, backend: DatabaseServer) -> None:
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
    """Run one scenario end to end; always leaves a readable run directory, which the caller
    scores once (:func:`dbaops.evaluation.score.score_and_record`).

    ``agent`` is an agent object, a built-in name (``noop``, or the oracles ``reference`` /
    ``shallow``, which the harness builds from the scenario's declared solution), or None
    (``options.model`` or ``options.agent``).
    """
    ctx = _plan(ref, options, monitor or RunMonitor(), agent)
    status, reason = "failed", None
    failure: str | None = None
    try:
        await _preflight(ctx)
        prepared = await _prepare(ctx, await _open_server(ctx))
        await _write_header(ctx, prepared)
        await _run_timeline(ctx, prepared, _equip(ctx, prepared))
        ctx.monitor.phase = "finishing"
        status = "completed"
    except NotManifested as exc:
        status, reason = "not_manifested", str(exc)
    except InfraRunError as exc:
        status, reason = "infra_error", str(exc)
    except RunRefused as exc:
        status, reason = "refused", str(exc)
    except anyio.get_cancelled_exc_class():
        status, reason = "interrupted", "cancelled (Ctrl-C or shutdown)"
        raise
    except KeyboardInterrupt:
        status, reason = "interrupted", "Ctrl-C"
        raise
    except BaseException as exc:
        status, reason = "failed", _describe(exc)
        failure = "".join(traceback.format_exception(exc))[-8000:]
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await _finish(ctx, status, reason, failure)
            ctx.monitor.phase = status
    return RunResult(run_dir=ctx.rd.path, status=status, reason=reason)


def _plan(
    ref: str | Path, options: RunOptions, monitor: RunMonitor, agent: Agent | str | None
) -> RunContext:
    """Load the scenario, choose the agent, create the run directory, its trace and clock."""
    sc, lib, path = load_scenario(ref)
    engine = get_engine(sc.engine)
    budget = Budget(
        turns=options.turn_budget or sc.turn_budget,
        time_s=(options.horizon_s or sc.time_budget_s),
    )
    horizon: float | None = budget.time_s if sc.mode == "persistent" else None
    seed = options.seed if options.seed is not None else sc.database.seed
    agent_kind = "agent"
    model_agent = bool(options.model) or options.replay_model is not None
    if agent is None and not model_agent:
        agent = options.agent
    if isinstance(agent, str):
        if is_oracle(agent):
            agent, agent_kind = oracle_agent(sc, agent), "oracle"
        elif agent == "noop":
            wait = noop_waits(sc.mode, sc.evaluation.may_heal, options.time_scale)
            agent = NoopAgent(wait=wait)
        else:
            agent = load_agent(agent)
    if agent is None and options.model and options.replay_model is None:
        from dbaops.models import load_registry

        load_registry(options.models_file).get(options.model)  # unknown name: fail before any I/O
    rd = new_run_dir(options.runs_dir, sc.id, _run_dir_agent_name(options, agent))
    shutil.copyfile(path, rd.scenario)
    _protect_from_server([rd.path, path, path.parent, timelines_dir()])
    trace = RunTrace(TraceWriter(rd.trace), monitor)
    if agent is None:
        agent = _model_agent(options, rd, trace, budget.turns)
        agent_kind = "replay" if options.replay_model is not None else "model"
    monitor.agent = agent
    monitor.scenario, monitor.run_dir, monitor.horizon_s = sc, rd.path, budget.time_s
    parts = ParquetParts(rd.samples_dir, rd.samples, SAMPLE_SCHEMA)
    # the in-memory window every workload check reads from: at least its longest over_s
    sink = SampleSink(parts, recent_s=max(RECENT_WINDOW_S, sc.longest_workload_window_s() + 10))
    monitor.sink = sink
    return RunContext(
        sc=sc,
        lib=lib,
        options=options,
        engine=engine,
        monitor=monitor,
        agent=agent,
        agent_kind=agent_kind,
        budget=budget,
        horizon=horizon,
        seed=seed,
        rd=rd,
        trace=trace,
        clock=ScenarioClock(options.time_scale),
        parts=parts,
        sink=sink,
    )


async def _preflight(ctx: RunContext) -> None:
    """Check the agent's model endpoint before any database work: a wrong port or key costs
    no restore, warm-up or retries. Unreachable: an infrastructure error; a refused key: the
    run is refused (re-running it as configured cannot help)."""
    check = getattr(ctx.agent, "preflight", None)
    if check is None:
        return
    ctx.monitor.phase = "checking the model endpoint"
    try:
        await check()
    except (InfraError, ModelConfigError) as exc:
        ctx.trace.write(
            PhaseRecord(phase="model_endpoint", detail={"ok": False, "error": str(exc)})
        )
        if isinstance(exc, InfraError):
            raise InfraRunError(str(exc)) from None
        raise RunRefused(str(exc)) from None
    ctx.trace.write(PhaseRecord(phase="model_endpoint", detail={"ok": True}))


def _backend_of(sc: Scenario, options: RunOptions) -> Literal["embedded", "docker"]:
    """Where the run's server runs; a scenario whose faults need a container refuses the
    embedded server and a user's own."""
    chosen = options.backend or sc.backend or "embedded"
    if sc.topology == "cluster" and not options.dsn:
        raise RunRefused(
            f"{sc.id} needs a TiDB cluster (topology: cluster: PD, TiKV or TiFlash), which the "
            "embedded tidb-server does not have; run it against your cluster with --dsn "
            "mysql://USER:PASSWORD@HOST:PORT"
        )
    if sc.backend == "docker" and (chosen != "docker" or options.dsn):
        raise RunRefused(
            f"{sc.id} needs the docker backend (its faults need a container); run it with "
            "--backend docker on a machine with a Docker daemon"
        )
    return chosen


async def _open_server(ctx: RunContext) -> DatabaseServer:
    """Start (or connect to) the scenario engine's server."""
    ctx.monitor.phase = "starting server"
    options = ctx.options
    request = ServerRequest(
        name=options.cluster or ctx.sc.id,
        dsn=options.dsn,
        bindir=options.pg_bindir,
        backend=_backend_of(ctx.sc, options),
        resources=ctx.sc.resources,
        image=options.docker_image,
        snapshot_group=ctx.sc.id,  # every worker's cluster of this scenario shares them
    )

    def progress(line: str) -> None:
        ctx.monitor.phase = f"building the server image: {line[:100]}"

    try:
        server = await ctx.engine.open_server(request, progress)
    except DockerUnavailable as exc:
        raise RunRefused(f"{ctx.sc.id} runs on the docker backend: {exc}") from None
    ctx.backend = backend = server
    _refuse_elevated(ctx.sc, backend)
    if backend.snapshots is not None:
        _protect_from_server([backend.snapshots.root])
    return backend


async def _prepare(ctx: RunContext, backend: DatabaseServer) -> Prepared:
    """Restore the dirty state (building its snapshot first when needed), wait for the
    standby, follow the servers' logs."""
    sc, lib = ctx.sc, ctx.lib
    ctx.monitor.phase = "preparing"
    history = effective_history(sc, ctx.options.history_s)
    meta = await prepare_state(sc, lib, backend, ctx.trace, ctx.clock, ctx.options.fresh, history)
    endpoint = backend.for_database(lib.database)
    standby_endpoint: RunEndpoint | None = None
    if sc.database.replica is not None:
        await ctx.engine.await_standby(backend, sc.database.replica)
        standby_endpoint = backend.standby_for(lib.database)
    follower: ServerLogFollower | None = None
    engine = ctx.engine.name
    for role, source in backend.log_files().items():
        if role == "standby" and standby_endpoint is None:
            continue
        log_follower = ServerLogFollower(source, ctx.rd.engine_log(engine, role), role)
        ctx.followers.append(log_follower)
        if role == "primary":
            follower = log_follower
    return Prepared(backend, meta, endpoint, standby_endpoint, follower)


async def _write_header(ctx: RunContext, prepared: Prepared) -> None:
    """The run header: what ran, with which versions, seeds, budgets and corpus."""
    sc, meta = ctx.sc, prepared.meta
    ctx.trace.write(
        RunHeader(
            run_id=ctx.rd.path.name,
            scenario_id=sc.id,
            scenario_mode=sc.mode,
            scenario_sha256=meta["key"],
            horizon_s=ctx.horizon,
            time_scale=ctx.options.time_scale,
            agent=ctx.agent.name,
            agent_kind=ctx.agent_kind,
            budget={"turns": ctx.budget.turns, "time_s": ctx.budget.time_s},
            seed=ctx.seed,
            backend=prepared.backend.describe(),
            versions=ctx.engine.versions(meta["server_version"]),
            settings={
                **_model_settings(ctx),
                "warmup_s": sc.preparation.warmup_s,
                "snapshot": meta["key"],
                "verification_s": sc.evaluation.verification_s,
                "final_round_s": sc.agent.final_round_s,
                "history": meta.get("history"),
                "time_scale_applies_to": SCALED_DURATIONS,
            },
            knowledge_base=await anyio.to_thread.run_sync(ctx.engine.knowledge_corpus),
        )
    )


def _model_settings(ctx: RunContext) -> dict[str, Any]:
    """What the header records of a model agent: its entry (no key: entries name the key's
    variable only), so a replay needs nothing but the run; and the run a replay reproduces."""
    spec = getattr(ctx.agent, "spec", None)
    out: dict[str, Any] = {}
    if isinstance(spec, ModelSpec):
        out.update(model=spec.name, model_spec=spec.model_dump(mode="json"))
    if ctx.options.replay_model is not None:
        out["replay_of"] = str(ctx.options.replay_model)
    return out


def _equip(ctx: RunContext, prepared: Prepared) -> Equipment:
    """The mailbox, the metric sampler (with the history's metrics), the check sources, the
    agent's tools and the context the fault actors run in."""
    sc, rd, clock, backend = ctx.sc, ctx.rd, ctx.clock, prepared.backend
    mailbox = Mailbox.create(rd.mailbox, now=clock.now)
    sampler: MetricSource | None = None
    if ctx.options.metrics:
        ctx.metric_parts = ParquetParts(rd.metrics_dir, rd.metrics, METRIC_SCHEMA)
        # (an elevated agent logging in as the harness's superuser cannot be told apart)
        agent_role = None if sc.agent.role == BOOTSTRAP_SUPERUSER else sc.agent.role
        sampler = ctx.engine.metric_sampler(
            backend, ctx.lib.database, clock, ctx.metric_parts, agent_role=agent_role
        )
    store = backend.snapshots
    recorded = prepared.meta.get("history")
    if recorded and store is not None:
        past_metrics, past_samples = load_history(
            store.root / prepared.meta["key"] / "history",
            ends_at_s=-sc.preparation.warmup_s,
            history_scale=float(recorded["scale"]),
            duration_s=float(recorded["duration_s"]),
            time_scale=clock.time_scale,
        )
        ctx.parts.append(past_samples)
        if sampler is not None and ctx.metric_parts is not None:
            ctx.metric_parts.append(past_metrics)
            sampler.seed(past_metrics)
    follower = prepared.follower
    sources = CheckSources(
        metrics=sampler.snapshot if sampler else None,
        server_log=follower.target if follower else None,
        refresh_server_log=follower.copy_new if follower else None,
        log_line_stamp=engine_dialect(sc.engine).log_line_stamp,
        standby=prepared.standby_endpoint,
    )
    ended = anyio.Event()
    recorder = ToolRecorder(
        ctx.trace.write,
        clock,
        ended=ended,
        on_report=(lambda: ended.set()) if sc.mode == "bounded" else None,
    )
    observations = Observations(
        metrics=sampler.snapshot if sampler else (lambda: pl.DataFrame(schema=METRIC_SCHEMA)),
        samples=ctx.sink.frame,
        server_logs={f.role: f.server_lines for f in ctx.followers},
    )
    agent_tools = ctx.engine.agent_tools(
        backend, sc, ctx.lib.database, clock, mailbox, observations, recorder
    )
    standby_endpoint = prepared.standby_endpoint
    actors = ActorContext(
        endpoint=prepared.endpoint,
        clock=clock,
        trace=ctx.trace,
        instance=backend.cluster,
        host=backend.host,
        label="activation",
        standby=(
            StandbyAccess(standby_endpoint, backend.standby_instance, backend.standby_host)
            if standby_endpoint is not None
            else None
        ),
    )
    return Equipment(mailbox, sampler, sources, recorder, ended, agent_tools, actors)


@dataclass
class _AgentRun:
    """The agent's task in the timeline: when it is done and how it ended."""

    done: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    infra_error: str | None = None


async def _run_agent(
    ctx: RunContext,
    kit: Equipment,
    session: AgentSession,
    state: _AgentRun,
    tg: anyio.abc.TaskGroup,
) -> None:
    """The agent's session; an infrastructure failure ends the run (never the agent's), an
    agent crash is the agent's failure."""
    clock = ctx.clock
    try:
        with state.scope:
            await ctx.agent.run(session)
    except InfraError as exc:
        state.infra_error = str(exc)
        ctx.trace.write(
            PhaseRecord(t_scn=clock.now(), phase="infra_error", detail={"error": str(exc)[:1000]})
        )
        tg.cancel_scope.cancel()
    except Exception as exc:  # an agent crash is the agent's failure, not the run's
        ctx.trace.write(
            PhaseRecord(t_scn=clock.now(), phase="agent_error", detail={"error": _describe(exc)})
        )
    finally:
        state.done.set()
        if ctx.sc.mode == "bounded":
            kit.ended.set()  # a bounded agent that returns is done


async def _run_timeline(ctx: RunContext, prepared: Prepared, kit: Equipment) -> None:
    """Activation, warm-up, manifestation, the event program and the agent's session, the
    verification window and the terminal checks, in one task group; the workload drivers run
    in their own process (started first, so its start-up overlaps the activation)."""
    process = None if ctx.options.drivers_inline else await DriverProcess.spawn()
    lag = ClientLagMonitor(
        ctx.trace.write,
        window_s=1.0 / ctx.clock.time_scale,  # a wall second
        bound_ms=ctx.options.client_lag_bound_ms,
    )
    ctx.monitor.client_lag = lag
    ctx.sink.watch(lag)
    try:
        await _timeline(ctx, prepared, kit, process)
    finally:
        if process is not None:
            await process.aclose()
        lag.close()  # the last samples are in: report a stretch still open


async def _timeline(
    ctx: RunContext,
    prepared: Prepared,
    kit: Equipment,
    process: DriverProcess | None,
) -> None:
    """The body of :func:`_run_timeline`."""
    sc, lib, clock, trace, sink = ctx.sc, ctx.lib, ctx.clock, ctx.trace, ctx.sink
    endpoint, budget, monitor = prepared.endpoint, ctx.budget, ctx.monitor
    sources = kit.sources
    posted: list[str] = []

    async def dispatch(ev: Event, alert_raised: bool) -> None:
        if alert_raised and ev.alert is not None:
            kind = "ticket" if ev.fault is None and ev.at == 0 else "alert"
            title, text = ev.alert.title, ev.alert.text
        else:
            assert ev.inspection is not None
            kind, title, text = "inspection", ev.inspection.title, ev.inspection.text
        body = _task_body(text, sc, budget)
        kit.mailbox.post(kind, title, body, entry_id=ev.id, scheduled_s=ev.at)
        posted.append(f"{title}\n{body}")

    agent_run = _AgentRun()
    await kit.agent_tools.open()
    # The scenario's server timers in scenario time, before the state is first read (they are
    # part of the baseline, not a change of the agent's).
    await apply_scaled_settings(sc, kit.actors, ctx.options.time_scale, trace)
    probe = StateProbe(endpoint, clock, trace)
    # Before any live fault (one may take the server down): the baseline when the agent's
    # start cannot be read.
    await probe.take("prepared")
    not_manifested: str | None = None
    clock.restart(-sc.preparation.warmup_s)
    monitor.clock = clock
    horizon = ctx.horizon
    drivers_horizon = (
        horizon if horizon is not None else budget.time_s + sc.evaluation.verification_s
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(sink.run_flusher)
        for f in ctx.followers:
            tg.start_soon(f.run)
        monitor.phase = "activation"
        for fault in sc.preparation.activation:
            await tg.start(run_fault, fault, kit.actors)
        baselines, unmeasured = await ledger_baselines(
            [*sc.evaluation.terminal, *sc.evaluation.integrity], endpoint
        )
        if baselines or unmeasured:
            sources = dataclasses.replace(sources, ledger_baselines=baselines)
            trace.write(PhaseRecord(t_scn=clock.now(), phase="ledger_baseline",
                                    detail={"baselines": baselines,
                                            "errors": unmeasured}))  # fmt: skip
        if process is not None:
            await process.ready()
        # The warm-up starts once every live fault is in place (and the drivers can start),
        # so the system the agent meets at t = 0 has been faulty for the whole warm-up at any
        # time scale.
        clock.restart(-sc.preparation.warmup_s)
        if kit.sampler is not None:
            tg.start_soon(kit.sampler.run)
        plan = DriverPlan.for_clock(
            clock,
            workloads=sc.workloads,
            library=lib,
            params={**lib.params, **sc.database.params},
            primary=endpoint,
            standby=prepared.standby_endpoint,
            seed=ctx.seed,
            horizon_s=drivers_horizon,
            expected=prepared.meta["expected_results"],
            earliest_s=-sc.preparation.warmup_s,  # jobs at negative times run in the warm-up
        )
        tg.start_soon(run_workloads, plan, sink, process)
        monitor.phase = "warm-up"
        await clock.sleep_until(0.0)
        monitor.phase = "manifestation"
        checker = Checker(endpoint, clock, sink, sources, trace)
        failed = []
        for check in sc.preparation.manifestation:
            rec = await checker.record(check, "manifestation")
            if not rec.passed:
                failed.append(f"{rec.name} (observed {rec.observed!r}, expected {rec.expected})")
        if failed:
            not_manifested = "manifestation predicates failed: " + "; ".join(failed)
            tg.cancel_scope.cancel()
            await anyio.lowlevel.checkpoint()
        if not not_manifested:
            await _survey(ctx, prepared, kit)
        monitor.phase = "running"
        await kit.agent_tools.begin()
        trace.write(PhaseRecord(t_scn=clock.now(), phase="timeline_start"))
        # Events due at t = 0 (a bounded run's task) are posted before the agent starts.
        first = [e for e in sc.events if e.at <= 0]
        later = [e for e in sc.events if e.at > 0]
        await event_program(first, kit.actors, checker, dispatch, tg)
        task = posted[0] if (sc.mode == "bounded" and posted) else _shift_brief(budget)
        session = AgentSession.create(
            task=task,
            mode=sc.mode,
            budget=budget,
            clock=clock,
            tools=kit.agent_tools.catalog,
            ended=kit.ended,
        )
        monitor.session = session
        await probe.take("agent_start")
        probe.active = True
        tg.start_soon(event_program, later, kit.actors, checker, dispatch, tg, probe)
        tg.start_soon(_run_agent, ctx, kit, session, agent_run, tg)
        if sc.evaluation.integrity and sc.evaluation.integrity_every_s and horizon:
            tg.start_soon(checker.integrity_probes, sc, horizon)
        for check in sc.evaluation.terminal:
            if check.by_s is not None:
                tg.start_soon(checker.at, check, check.by_s)
        ended_by = await agent_phase(sc, budget, clock, kit.ended, agent_run.done, kit.recorder)
        kit.mailbox.close()
        kit.ended.set()
        monitor.phase = "final round"
        with anyio.move_on_after(sc.agent.final_round_s):
            await agent_run.done.wait()
        if not agent_run.done.is_set():
            agent_run.scope.cancel()
            ended_by += "; cut off after the final-round wait"
            with anyio.move_on_after(10):
                await agent_run.done.wait()
        # The agent logs off: its sessions close (an open transaction rolls back, its locks
        # go), as a DBA's psql would, before the end state is read; a lock it left could
        # otherwise hold the reading up until it fails.
        await kit.agent_tools.close()
        # Read before the agent's end is on record, so the terminal checks' window (units
        # scheduled after it) never holds the harness's own reading.
        probe.active = False
        await probe.take("agent_end", retry_s=15.0)
        trace.write(
            PhaseRecord(
                t_scn=clock.now(),
                phase="agent_end",
                detail={"ended_by": ended_by, "reports": kit.recorder.reports},
            )
        )
        if sc.mode == "bounded":
            # The workloads keep running for the verification window; terminal checks
            # (workload statistics included) are evaluated over it.
            monitor.phase = "verification"
            await clock.sleep(sc.evaluation.verification_s)
        trace.write(PhaseRecord(t_scn=clock.now(), phase="timeline_end"))
        monitor.phase = "terminal checks"
        await checker.terminal(sc)
        tg.cancel_scope.cancel()
    await kit.agent_tools.close()
    if not_manifested:
        raise NotManifested(not_manifested)
    if agent_run.infra_error:
        raise InfraRunError(agent_run.infra_error)


async def _survey(ctx: RunContext, prepared: Prepared, kit: Equipment) -> None:
    """Record the observation surface the scenario declares, as the agent is about to meet
    it (see :mod:`dbaops.execution.survey`); bounded scenarios with a difficulty path only."""
    spec = ctx.sc.evaluation.difficulty
    if spec is None or not spec.modalities or ctx.sc.mode != "bounded":
        return
    ctx.monitor.phase = "survey"
    metrics = kit.sampler.snapshot() if kit.sampler is not None else pl.DataFrame()
    history_before = -ctx.sc.preparation.warmup_s
    lines = [ln for f in ctx.followers for ln in f.server_lines()]
    record = await take_survey(
        ctx.sc.engine,
        spec,
        prepared.endpoint,
        t_scn=ctx.clock.now(),
        history_before_s=history_before,
        metrics=metrics,
        log_lines=lines,
        standby=prepared.standby_endpoint,
    )
    ctx.trace.write(record)


#: Which durations ``--time-scale`` compresses (recorded in every run header). Transaction
#: deadlines and timeouts (wall milliseconds), SQL timeouts the agent sets, the per-call SQL
#: limit and the final-round wait are wall quantities and never scale.
SCALED_DURATIONS = [
    "event times and the horizon",
    "the agent's time budget",
    "warm-up",
    "fault and hold durations",
    "the scenario's server timers (scaled_settings)",
    "SLO and check windows",
    "the verification window",
]


def _model_agent(options: RunOptions, rd: RunDir, trace: RunTrace, turn_budget: int) -> Agent:
    """The ReAct agent on a registered model, or replaying a recorded run's responses (then
    it needs nothing but the recorded run: no registry entry, no key, no endpoint)."""
    from dbaops.agents.react import ReactAgent
    from dbaops.models import load_registry

    if options.replay_model is None:
        assert options.model is not None
        spec = load_registry(options.models_file).get(options.model)
        return ReactAgent(
            spec,
            registry_path=options.models_file,
            turn_budget=turn_budget,
            record=trace.write,
            blob_dir=rd.model_messages,
            retry=options.model_retry,
        )
    from dbaops.models.replay import ReplayModelClient, load_call_records

    recorded = load_run(options.replay_model)  # read once: the header and the calls
    client = ReplayModelClient(
        options.replay_model,
        records=load_call_records(recorded),
        spec=_recorded_spec(recorded, options),
        on_record=trace.write,
    )
    agent = ReactAgent(
        client.spec,
        turn_budget=turn_budget,
        record=trace.write,
        blob_dir=rd.model_messages,
        client=client,
    )
    agent.name = f"replay:{agent.name}"
    return agent


def _recorded_spec(recorded: RunData, options: RunOptions) -> ModelSpec | None:
    """The model entry of the run a replay reproduces: as its header recorded it, else the
    registry's entry of ``--model``, else None (rebuilt from the recorded calls)."""
    header = recorded.header
    entry = header.settings.get("model_spec") if header is not None else None
    if isinstance(entry, dict):
        return ModelSpec.model_validate(entry)
    if options.model:
        from dbaops.models import load_registry

        return load_registry(options.models_file).get(options.model)
    return None


def _run_dir_agent_name(options: RunOptions, agent: Agent | None) -> str:
    if agent is not None:
        return agent.name
    if options.replay_model is not None:
        return f"replay-react-{options.model or 'recorded'}"
    return f"react-{options.model}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"[:1000]


async def _finish(
    ctx: RunContext, status: str, reason: str | None, failure: str | None = None
) -> None:
    """Flush everything, record the end, stop the embedded server (the caller scores the
    run once: :func:`dbaops.evaluation.score.score_and_record`)."""
    ctx.sink.flush()
    ctx.parts.compact()
    metric_parts, backend, trace = ctx.metric_parts, ctx.backend, ctx.trace
    if metric_parts is not None and metric_parts.directory.exists():
        metric_parts.compact()
    for f in ctx.followers:
        f.copy_new()
    server_up: bool | None = None
    if backend is not None and backend.cluster is not None:
        backend.cluster.resume_stopped()
        try:
            server_up = await backend.cluster.is_running()
        except Exception:  # noqa: BLE001 - best effort at teardown
            server_up = None
    trace.write(PhaseRecord(phase="server_status", detail={"running": server_up}))
    duration_s = time.monotonic() - ctx.t_start
    trace.write(RunEnd(status=status, reason=reason, duration_s=duration_s, traceback=failure))
    trace.close()
    if backend is not None:
        try:
            await backend.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("could not stop the embedded server", error=str(exc))
