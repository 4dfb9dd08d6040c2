"""Executing fault parts: one-shot SQL and settings, and live actors (held sessions, loads).

Live actors cannot live in a file snapshot, so scenarios declare them as activation actors
(started after restore) or as timed faults in the event program. Every actor is recorded with
its pid and backend_start, so protected sessions can be recognised later.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import anyio
import structlog
from anyio import TASK_STATUS_IGNORED
from anyio.abc import TaskStatus

from dbaops.clock import ScenarioClock
from dbaops.containers.machine import ServerMachine
from dbaops.dbms.interface import InstanceController, ServerHost
from dbaops.dbms.sessions import (
    CONNECTION_ERRORS,
    SERVER_ERRORS,
    RunEndpoint,
    Session,
    endpoint_dialect,
    session_dialect,
    sqlstate_of,
)
from dbaops.record.kinds import CRASH_EXPECTED, ActorRecord, Record
from dbaops.scenario.faults import (
    CpuLimit,
    Crash,
    EditConfig,
    FaultSpec,
    FileSizeLimit,
    Freeze,
    HoldTransaction,
    IdleConnections,
    InstanceControl,
    LoadActor,
    Partition,
    SetSetting,
    SignalProcess,
    SqlFault,
    TablespaceVolume,
)

log = structlog.get_logger(__name__)

_T = TypeVar("_T")


class RecordSink(Protocol):
    def write(self, record: Record) -> None: ...


@dataclass
class ActorContext:
    """What actors need: where to connect, the clock, the trace, instance control."""

    endpoint: RunEndpoint
    clock: ScenarioClock
    trace: RecordSink
    instance: InstanceController | None = None
    host: ServerHost | None = None
    label: str = ""
    standby: StandbyAccess | None = None

    def on(self, server: str) -> ActorContext:
        """This context aimed at ``server`` (the primary, or the replica profile's standby)."""
        if server == "primary":
            return self
        if self.standby is None:
            raise FaultError("this part acts on the standby, but the run has no replica")
        return replace(
            self,
            endpoint=self.standby.endpoint,
            instance=self.standby.instance,
            host=self.standby.host,
            standby=None,
        )


@dataclass(frozen=True)
class StandbyAccess:
    """Where the replica profile's standby is, and its process control."""

    endpoint: RunEndpoint
    instance: InstanceController | None
    host: ServerHost | None


class FaultError(RuntimeError):
    """A fault could not be applied."""


async def _identity(conn: Session, ctx: ActorContext) -> tuple[int, str]:
    """The actor session's server pid and start time (on PostgreSQL asked while the session's
    statement statistics are still off, so no harness query shows in the fault's own)."""
    return await ctx.endpoint.identify(conn)


async def run_fault(
    fault: FaultSpec, ctx: ActorContext, *, task_status: TaskStatus[None] = TASK_STATUS_IGNORED
) -> None:
    """Apply a fault; live actors run until their duration ends or the run is cancelled.

    With ``await tg.start(run_fault, ...)`` the caller resumes once the fault is in place (a
    held transaction has taken its locks, a pool holds its connections), so a warm-up that
    follows measures the faulty system however long the fault took to set up."""
    # One-shot faults are in place when they return; live actors say so themselves.
    ctx = ctx.on(fault.server)
    if isinstance(fault, SqlFault):
        await _sql(fault, ctx)
    elif isinstance(fault, SetSetting):
        await _set_setting(fault, ctx)
    elif isinstance(fault, InstanceControl):
        await _instance(fault, ctx)
    elif isinstance(fault, EditConfig):
        await _edit_config(fault, ctx)
    elif isinstance(fault, SignalProcess):
        await _signal(fault, ctx)
    elif isinstance(fault, FileSizeLimit):
        await _file_size_limit(fault, ctx)
    elif isinstance(fault, TablespaceVolume):
        await _tablespace_volume(fault, ctx)
    elif isinstance(fault, CpuLimit):
        await _machine(ctx, fault.kind).limit_cpus(fault.cpus)
        _machine_record(ctx, fault.kind, "applied", cpus=fault.cpus)
    elif isinstance(fault, Freeze | Partition):
        return await _machine_outage(fault, ctx, task_status)
    elif isinstance(fault, Crash):
        return await _crash(fault, ctx, task_status)
    elif isinstance(fault, HoldTransaction):
        return await _hold(fault, ctx, task_status)
    elif isinstance(fault, LoadActor):
        return await _load(fault, ctx, task_status)
    elif isinstance(fault, IdleConnections):
        return await _idle(fault, ctx, task_status)
    else:  # pragma: no cover - the discriminated union makes this unreachable
        raise FaultError(f"unknown fault {fault!r}")
    task_status.started()


async def _sql(fault: SqlFault, ctx: ActorContext) -> None:
    conn = await ctx.endpoint.actor_session(fault.role, fault.application_name, fault.database)
    try:
        await _identity(conn, ctx)  # (its statistics are on again from here)
        for name, value in fault.settings.items():
            await conn.execute(session_dialect(conn).set_setting(name, value))
        try:
            if fault.in_transaction:
                async with conn.transaction():
                    await conn.execute(fault.sql)
            else:
                await conn.execute(fault.sql)
        except SERVER_ERRORS as exc:
            if fault.expect_sqlstate is None or sqlstate_of(exc) != fault.expect_sqlstate:
                raise
            return
        if fault.expect_sqlstate is not None:
            raise FaultError(
                f"the statement was to fail with SQLSTATE {fault.expect_sqlstate} as the "
                f"incident's did, but it succeeded: {fault.sql[:200]}"
            )
    finally:
        await conn.close(timeout=5)


def _statement(kind: str, statement: _T | None) -> _T:
    """One of the engine's statements for a fault, or a clear error where it has none."""
    if statement is None:
        raise FaultError(f"{kind} is not available on this engine")
    return statement


async def _server_session(ctx: ActorContext, *, admin: bool = True) -> Session:
    """A harness session for server-wide statements (in the engine's maintenance database)."""
    database = endpoint_dialect(ctx.endpoint).maintenance_database
    return await ctx.endpoint.harness_connect(database=database, admin=admin)


async def run_server_statements(ctx: ActorContext, kind: str, *statements: str | None) -> None:
    """Server-wide statements of the engine's dialect (None: the engine has none, a
    :class:`FaultError` before any session opens) on one harness session."""
    sqls = [_statement(kind, s) for s in statements]
    conn = await _server_session(ctx)
    try:
        for sql in sqls:
            await conn.execute(sql)
    finally:
        await conn.close(timeout=5)


async def _set_setting(fault: SetSetting, ctx: ActorContext) -> None:
    dialect = endpoint_dialect(ctx.endpoint)
    setting = _statement(fault.kind, dialect.set_server_setting)(fault.name, fault.value)
    reload = [] if fault.restart else [dialect.reload_config]
    await run_server_statements(ctx, fault.kind, setting, *reload)
    if fault.restart:
        if ctx.instance is None:
            raise FaultError("set_setting with restart needs instance control (embedded backend)")
        await ctx.instance.restart()


async def _instance(fault: InstanceControl, ctx: ActorContext) -> None:
    if ctx.instance is None:
        raise FaultError(f"instance action {fault.action!r} needs the embedded backend")
    if fault.action == "stop":
        await ctx.instance.stop()
    elif fault.action == "start":
        await ctx.instance.start()
    else:
        await ctx.instance.restart()


def _host(ctx: ActorContext, kind: str) -> ServerHost:
    if ctx.host is None:
        raise FaultError(f"{kind} needs the server's machine (the embedded backend)")
    return ctx.host


async def _edit_config(fault: EditConfig, ctx: ActorContext) -> None:
    _host(ctx, fault.kind).edit_config(fault.file, fault.prepend, fault.append, fault.comment_out)
    if fault.then == "reload":
        await run_server_statements(ctx, fault.kind, endpoint_dialect(ctx.endpoint).reload_config)
    elif fault.then == "restart":
        if ctx.instance is None:
            raise FaultError("edit_config with restart needs instance control (embedded backend)")
        await ctx.instance.restart()


async def _file_size_limit(fault: FileSizeLimit, ctx: ActorContext) -> None:
    _host(ctx, fault.kind).limit_file_size(None if fault.mb is None else fault.mb * 1024 * 1024)
    if ctx.instance is None:
        raise FaultError("file_size_limit restarts the server: it needs instance control")
    await ctx.instance.restart()


async def _tablespace_volume(fault: TablespaceVolume, ctx: ActorContext) -> None:
    create = _statement(fault.kind, endpoint_dialect(ctx.endpoint).create_tablespace)
    location = await _host(ctx, fault.kind).create_volume(fault.name, fault.size_mb)
    await run_server_statements(ctx, fault.kind, create(fault.name, fault.owner, location))


def _machine(ctx: ActorContext, kind: str) -> ServerMachine:
    machine = ctx.host.machine if ctx.host is not None else None
    if machine is None:
        raise FaultError(f"{kind} needs a server in a container (the docker backend)")
    return machine


def _machine_record(ctx: ActorContext, kind: str, status: str, **detail: object) -> None:
    ctx.trace.write(
        ActorRecord(
            t_scn=ctx.clock.now(), actor=f"{ctx.label}:{kind}", status=status, detail=detail
        )
    )


async def _machine_outage(
    fault: Freeze | Partition, ctx: ActorContext, ready: TaskStatus[None]
) -> None:
    """Freeze the machine or partition it for the fault's duration (or until the run ends),
    then undo it; the undo runs even when the run is cancelled, so no frozen container or
    packet filter outlives it."""
    machine = _machine(ctx, fault.kind)
    detail: dict[str, object] = {"duration_s": fault.duration_s}
    if isinstance(fault, Partition):
        await machine.partition(fault.mode)
        detail["mode"], undo = fault.mode, machine.heal
    else:
        await machine.freeze()
        undo = machine.thaw
    _machine_record(ctx, fault.kind, "started", **detail)
    ready.started()
    try:
        if fault.duration_s is None:
            await anyio.sleep_forever()
        else:
            await ctx.clock.sleep(fault.duration_s)
    finally:
        with anyio.CancelScope(shield=True):
            await undo()
            _machine_record(ctx, fault.kind, "finished", **detail)


async def _crash(fault: Crash, ctx: ActorContext, ready: TaskStatus[None]) -> None:
    """Kill the server's machine; a supervisor's restart after ``restart_after_s``."""
    await _machine(ctx, fault.kind).crash()
    _machine_record(ctx, fault.kind, "started", restart_after_s=fault.restart_after_s)
    ready.started()
    if fault.restart_after_s is None:
        return
    await ctx.clock.sleep(fault.restart_after_s)
    if ctx.instance is None:
        raise FaultError("crash with restart_after_s needs instance control")
    await ctx.instance.start()
    _machine_record(ctx, fault.kind, "finished", restarted=True)


async def _signal(fault: SignalProcess, ctx: ActorContext) -> None:
    host = _host(ctx, fault.kind)
    dialect = endpoint_dialect(ctx.endpoint)
    processes_sql = _statement(fault.kind, dialect.server_processes_sql)
    conn = await _server_session(ctx, admin=False)
    try:
        rows = await conn.fetch(
            processes_sql,
            fault.backend_type,
            fault.application_name,
            fault.role,
            dialect.harness_application,
        )
    finally:
        await conn.close(timeout=5)
    chosen = rows if fault.every else rows[:1]
    if not chosen:
        raise FaultError(
            f"signal_process: no {fault.backend_type!r} process matches "
            f"(application_name={fault.application_name!r}, role={fault.role!r})"
        )
    for row in chosen:
        host.signal(int(row["pid"]), fault.signal)
    ctx.trace.write(
        ActorRecord(
            t_scn=ctx.clock.now(),
            actor=f"{ctx.label}:{fault.kind}",
            status="signalled",
            role=fault.role,
            application_name=fault.application_name,
            pid=int(chosen[0]["pid"]),
            pids=[int(r["pid"]) for r in chosen],
            backend_start=str(chosen[0]["started"]),
            detail={"signal": fault.signal, "backend_type": fault.backend_type},
        )
    )


def _record(
    ctx: ActorContext,
    fault: HoldTransaction | LoadActor | IdleConnections,
    status: str,
    pid: int | None = None,
    backend_start: str | None = None,
    pids: list[int] | None = None,
    crash_expected: bool = False,
    **detail: object,
) -> None:
    if crash_expected:  # scoring leaves this session's crash lines out (the fault's own)
        detail[CRASH_EXPECTED] = True
    ctx.trace.write(
        ActorRecord(
            pids=list(pids or ([pid] if pid is not None else [])),
            t_scn=ctx.clock.now(),
            actor=f"{ctx.label}:{fault.kind}",
            status=status,
            role=fault.role,
            application_name=fault.application_name,
            protected=getattr(fault, "protected", False),
            pid=pid,
            backend_start=backend_start,
            detail=dict(detail),
        )
    )


async def _hold(fault: HoldTransaction, ctx: ActorContext, ready: TaskStatus[None]) -> None:
    conn = await ctx.endpoint.actor_session(fault.role, fault.application_name, fault.database)
    pid, started = await _identity(conn, ctx)
    finished = False

    def closed_by_server(_: object) -> None:
        # An idle session learns of its termination only here; record it as evidence.
        if not finished:
            _record(ctx, fault, "ended", pid, started, error="session closed by the server")

    conn.add_termination_listener(closed_by_server)
    try:
        for begin in session_dialect(conn).begin(fault.isolation):
            await conn.execute(begin)
        for stmt in fault.statements:
            await conn.execute(stmt)
        _record(ctx, fault, "started", pid, started)
        ready.started()
        if fault.idle:
            if fault.duration_s is None:
                await anyio.sleep_forever()
            else:
                await ctx.clock.sleep(fault.duration_s)
        else:
            wall = ctx.clock.wall_seconds(fault.duration_s) if fault.duration_s else 86400.0
            await conn.execute(session_dialect(conn).sleep(wall))
        await conn.execute("COMMIT" if fault.finish == "commit" else "ROLLBACK")
        finished = True
        _record(ctx, fault, "finished", pid, started)
    except (*SERVER_ERRORS, *CONNECTION_ERRORS) as exc:
        # Typically the agent (or a timeout) ended the session: that is evidence, not a crash.
        finished = True
        _record(ctx, fault, "ended", pid, started, error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        finished = True
        conn.terminate()


async def _load(fault: LoadActor, ctx: ActorContext, ready: TaskStatus[None]) -> None:
    connected = [0]
    expected = fault.crash_expected
    lost = (*SERVER_ERRORS, *CONNECTION_ERRORS)

    async def reconnect() -> Session:
        while True:  # every wall second until the server answers again
            await anyio.sleep(1.0)
            try:
                return await ctx.endpoint.actor_session(
                    fault.role, fault.application_name, fault.database
                )
            except lost:
                continue

    async def session(i: int) -> None:
        conn = await ctx.endpoint.actor_session(fault.role, fault.application_name, fault.database)
        first = True
        while True:
            pid: int | None = None
            started: str | None = None
            try:
                pid, started = await _identity(conn, ctx)
                if first:
                    _record(ctx, fault, "started", pid, started, session=i, crash_expected=expected)
                    first = False
                    connected[0] += 1
                    if connected[0] == fault.sessions:
                        ready.started()
                else:
                    _record(ctx, fault, "started", pid, started, session=i, reconnected=True,
                            crash_expected=expected)  # fmt: skip
                while True:
                    for stmt in fault.statements:
                        await conn.execute(stmt)
                    await anyio.sleep(fault.pause_ms / 1000.0)
            except lost as exc:
                error = f"{type(exc).__name__}: {exc}"[:300]
                _record(ctx, fault, "ended", pid, started, error=error)
            finally:
                conn.terminate()
            if not fault.reconnect or first:
                return
            conn = await reconnect()

    with anyio.move_on_after(
        ctx.clock.wall_seconds(fault.duration_s) if fault.duration_s else None
    ):
        async with anyio.create_task_group() as tg:
            for i in range(fault.sessions):
                tg.start_soon(session, i)


async def _drop_terminated(conns: list[Session], ctx: ActorContext) -> None:
    """Close our side of sessions that someone else terminated (without touching the idle ones,
    whose ``state_change`` must stay old)."""
    try:
        admin = await ctx.endpoint.harness_connect()
    except SERVER_ERRORS + (OSError,):
        return
    try:
        alive = {r[0] for r in await admin.fetch(session_dialect(admin).session_ids_sql)}
    finally:
        await admin.close()
    for c in conns:
        if not c.is_closed() and c.get_server_pid() not in alive:
            c.terminate()


async def _idle(fault: IdleConnections, ctx: ActorContext, ready: TaskStatus[None]) -> None:
    conns: list[Session] = []

    async def fill() -> tuple[list[int], str | None]:
        conns[:] = [c for c in conns if not c.is_closed()]
        opened: list[int] = []
        while len(conns) < fault.count:
            try:
                conn = await ctx.endpoint.actor_session(
                    fault.role, fault.application_name, fault.database
                )
            except SERVER_ERRORS + (OSError,) as exc:
                return opened, str(exc)[:300]
            conns.append(conn)
            opened.append(conn.get_server_pid())
        return opened, None

    try:
        pids, error = await fill()
        _record(ctx, fault, "started", pids=pids, opened=len(conns), error=error)
        ready.started()
        with anyio.move_on_after(
            ctx.clock.wall_seconds(fault.duration_s) if fault.duration_s is not None else None
        ):
            while True:
                await anyio.sleep(1.0 if fault.reconnect else 3600.0)
                if fault.reconnect:
                    await _drop_terminated(conns, ctx)
                    reopened, _ = await fill()
                    if reopened:  # every session the pool holds is on record, with its pid
                        _record(ctx, fault, "started", pids=reopened, reconnected=len(reopened))
        _record(ctx, fault, "finished", opened=len(conns))
    finally:
        for c in conns:
            c.terminate()
