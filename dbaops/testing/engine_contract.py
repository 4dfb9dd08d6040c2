"""The engine certification suite: the same contract checked on every registered engine, as
Inspect's sandbox ``self_check`` does for its sandboxes.

An engine package gives the few facts the suite cannot derive in a ``contract`` module
(``CONTRACT``, an :class:`EngineContract`); :func:`contract_checks` lists the checks, each an
``async`` function of an :class:`ContractServer`, and :func:`open_contract_server` starts the
engine's embedded server for them. ``tests/test_engine_contract.py`` runs every check on every
engine; a third engine passes the suite before a scenario runs on it.

What the suite holds an engine to: the server opens and says what it is; a snapshot taken and
restored forgets what was written after it; the fixture of the engine's library builds; the
agent's five tools work on it (the SQL tool, a setting changed through the instance tool and
read back by the harness, a restart, the log tool, the knowledge base, the metric tool that
describes this engine's metrics); each declared fault kind that needs no host or container
applies; a real server log line reads through the dialect's stamp;
a terminated session is logged without looking like a crash; what the engine declares
(fault, check and instance kinds) is something the format has.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import anyio
import polars as pl
from pydantic import TypeAdapter

from dbaops.clock import ScenarioClock
from dbaops.dbms.dialect import EngineDialect, engine_dialect, engine_packages
from dbaops.dbms.interface import DatabaseEngine, DatabaseServer, Observations, ServerRequest
from dbaops.dbms.registry import get_engine
from dbaops.execution.actors import ActorContext, run_fault
from dbaops.mailbox import Mailbox
from dbaops.record.tables import SAMPLE_SCHEMA
from dbaops.scenario.checks import CheckSpec
from dbaops.scenario.faults import FaultSpec
from dbaops.scenario.loader import load_scenario
from dbaops.tools.names import AGENT_TOOLS
from dbaops.tools.recording import ToolRecorder
from dbaops.workloads.spec import WorkloadLibrary


@dataclass(frozen=True)
class EngineContract:
    """What an engine tells the suite (its package's ``contract.CONTRACT``)."""

    #: A database every fresh server of the engine has.
    database: str
    #: Where the suite may create a table (``schema.name``, qualified as the engine quotes
    #: nothing: plain lower-case names).
    scratch_table: str
    #: A library scenario of the engine: its workload library is built as the fixture and
    #: its agent settings (role, limits) are the tools'.
    scenario: str
    #: A global setting the agent's instance tool may change that disturbs nothing.
    setting: str
    #: Two values the suite may set it to, each with what ``read_setting_sql`` then returns;
    #: the suite sets one the server does not have yet, so a change that did nothing fails.
    setting_values: tuple[tuple[str, str], tuple[str, str]]
    #: SQL on a fresh harness session returning the setting's value as text.
    read_setting_sql: str
    #: The instance tool's action that changes a setting (its args: name, value).
    set_action: str
    #: A statement ending session ``{session}`` (its id as ``identify`` gives it).
    terminate_sql: str
    #: The server log (a key of ``DatabaseServer.log_files``) the suite reads.
    log: str = "primary"


@dataclass
class ContractServer:
    """One engine's server under the contract, with what the checks share."""

    engine: DatabaseEngine
    dialect: EngineDialect
    contract: EngineContract
    server: DatabaseServer
    workdir: Path
    opened_at: float


def engine_contract(name: str) -> EngineContract:
    """The contract facts of engine ``name`` (``<package>.contract.CONTRACT``)."""
    module = importlib.import_module(f"{engine_packages()[name]}.contract")
    contract = getattr(module, "CONTRACT", None)
    if not isinstance(contract, EngineContract):
        raise TypeError(f"{module.__name__}.CONTRACT is not an EngineContract")
    return contract


@asynccontextmanager
async def open_contract_server(name: str, workdir: Path) -> AsyncIterator[ContractServer]:
    """Engine ``name``'s embedded server for the suite (closed on exit)."""
    engine = get_engine(name)
    opened_at = time.time()
    server = await engine.open_server(ServerRequest(name=f"contract-{name}"))
    try:
        yield ContractServer(
            engine, engine_dialect(name), engine_contract(name), server, workdir, opened_at
        )
    finally:
        await server.close()


async def _value(cs: ContractServer, sql: str, database: str | None = None) -> Any:
    conn = await cs.server.for_database(database or cs.contract.database).harness_connect(
        admin=True
    )
    try:
        return await conn.fetchval(sql, timeout=60)
    finally:
        await conn.close(timeout=5)


async def _execute(cs: ContractServer, sql: str) -> None:
    conn = await cs.server.for_database(cs.contract.database).harness_connect(admin=True)
    try:
        await conn.execute(sql, timeout=60)
    finally:
        await conn.close(timeout=5)


def _lines_of(path: Path) -> Callable[[], list[str]]:
    return lambda: path.read_text(errors="replace").splitlines() if path.exists() else []


async def _fixture(cs: ContractServer) -> tuple[WorkloadLibrary, str]:
    """The contract scenario's library built small on the server (each check that needs it
    builds it, so every check runs alone too), and a login role of it."""
    _, lib, _ = load_scenario(cs.contract.scenario)
    small = {name: min(value, 200) for name, value in lib.params.items()}
    await cs.engine.build_fixture(cs.server, lib, small, 42, "2026-01-01")
    login_role = next(r.name for r in lib.roles if r.login and not r.superuser and not r.dba)
    return lib, login_role


# -- the checks --------------------------------------------------------------------------------
async def check_identity(cs: ContractServer) -> None:
    """The server opens, says what it is, and a harness session knows its own id."""
    assert cs.server.kind == "embedded"
    assert cs.server.describe()["engine"] == cs.engine.name
    version = await cs.server.server_version()
    assert version
    assert set(DatabaseEngine.harness_versions()) <= set(cs.engine.versions(version))
    assert cs.contract.log in cs.server.log_files()
    endpoint = cs.server.for_database(cs.contract.database)
    conn = await endpoint.harness_connect(admin=True)
    try:
        session, _ = await endpoint.identify(conn)
        assert isinstance(session, int) and session > 0
    finally:
        await conn.close(timeout=5)


async def check_snapshot_round_trip(cs: ContractServer) -> None:
    """A snapshot restored forgets what was written after it was taken."""
    store = cs.server.snapshots
    assert store is not None, "an embedded server can be snapshotted"
    schema, marker = cs.contract.scratch_table.split(".")
    count = (
        "SELECT count(*) FROM information_schema.tables "  # noqa: S608 (the engine's constants)
        f"WHERE table_schema = '{schema}' AND table_name = '{marker}'"
    )
    async with store.lock(exclusive=True):
        await store.capture("contract")
    try:
        assert store.has("contract")
        await _execute(cs, f"CREATE TABLE {cs.contract.scratch_table} (id INT)")
        assert int(await _value(cs, count)) == 1
        async with store.lock(exclusive=False):
            await store.restore("contract")
        assert int(await _value(cs, count)) == 0
    finally:
        store.drop("contract")


async def check_fixture_and_agent_tools(cs: ContractServer) -> None:
    """The engine's library fixture builds, and the agent's five tools work on it."""
    sc, lib, _ = load_scenario(cs.contract.scenario)
    assert sc.engine == cs.engine.name
    small = {name: min(value, 200) for name, value in lib.params.items()}
    seconds = await cs.engine.build_fixture(cs.server, lib, small, 42, "2026-01-01")
    assert seconds > 0
    clock = ScenarioClock(1.0)
    records: list[object] = []
    logs = cs.server.log_files()
    observations = Observations(
        metrics=lambda: pl.DataFrame(
            schema={"t_s": pl.Float64, "metric": pl.String, "label": pl.String, "value": pl.Float64}
        ),
        samples=lambda: pl.DataFrame(schema=SAMPLE_SCHEMA),
        server_logs={role: _lines_of(path) for role, path in logs.items()},
    )
    tools = cs.engine.agent_tools(
        cs.server,
        sc,
        lib.database,
        clock,
        Mailbox.create(cs.workdir / "mailbox", now=clock.now),
        observations,
        ToolRecorder(records.append, clock),  # type: ignore[arg-type]
    )
    assert set(AGENT_TOOLS) <= set(tools.catalog)
    assert cs.dialect.metrics_overview in tools.catalog["query_metrics"].spec.description
    await tools.open()
    await tools.begin()
    try:
        call = {name: tool.handler for name, tool in tools.catalog.items()}
        sql = await call["execute_sql"]({"sql": "SELECT 1 AS one"})
        assert sql.ok, sql.observation
        status = await call["manage_instance"]({"action": "status"})
        assert status.ok, status.observation
        current = str(await _value(cs, cs.contract.read_setting_sql))
        value, shown = next(v for v in cs.contract.setting_values if v[1] != current)
        changed = await call["manage_instance"](
            {"action": cs.contract.set_action, "name": cs.contract.setting, "value": value}
        )
        assert changed.ok, changed.observation
        assert str(await _value(cs, cs.contract.read_setting_sql)) == shown
        restarted = await call["manage_instance"]({"action": "restart"})
        assert restarted.ok, restarted.observation
        assert str(await _value(cs, cs.contract.read_setting_sql)) == shown
        again = await call["execute_sql"]({"sql": "SELECT 1 AS one"})
        assert again.ok, again.observation
        kb = await call["query_knowledge_base"]({"query": "lock wait timeout"})
        assert kb.ok, kb.observation
        listing = await call["query_metrics"]({})
        assert listing.ok, listing.observation
    finally:
        await tools.close()
    assert len(records) == 7, "every call is recorded"


async def check_log_stamp_and_termination(cs: ContractServer) -> None:
    """A session ended by the server is logged in lines the dialect's stamp reads (the run's
    time base), and none of them looks like a crash to the engine's crash markers."""
    lib, login_role = await _fixture(cs)
    path = cs.server.log_files()[cs.contract.log]
    before = path.read_text(errors="replace").splitlines() if path.exists() else []
    endpoint = cs.server.for_database(lib.database)
    # a client's session (the harness's own are kept out of the server log)
    victim = await endpoint.connect(login_role, "contract-victim")
    try:
        session, _ = await endpoint.identify(victim)
        await _execute(cs, cs.contract.terminate_sql.format(session=session))
        with anyio.fail_after(30):
            while True:  # the victim's session is gone (the server ended it)
                try:
                    await victim.fetchval("SELECT 1", timeout=5)
                except Exception:  # noqa: BLE001 (any engine's error for a lost session)
                    break
                await anyio.sleep(0.2)
    finally:
        try:
            await victim.close(timeout=5)
        except Exception:  # noqa: BLE001, S110 (already gone)
            pass
    assert await _value(cs, "SELECT 1") in (1, "1")  # the server is still up
    # the server writes its log asynchronously: wait for the lines the termination wrote,
    # so the crash check below reads them rather than passing on an unwritten log
    with anyio.fail_after(30):
        while len(lines := path.read_text(errors="replace").splitlines()) <= len(before):  # noqa: ASYNC110, E501 - a file another process writes: polled
            await anyio.sleep(0.2)
    stamps = [s for s in map(cs.dialect.log_line_stamp, lines) if s is not None]
    assert stamps, f"no line of {path} reads through the {cs.engine.name} log stamp"
    for wall, pid in stamps:
        assert cs.opened_at - 120 <= wall <= time.time() + 120, (wall, cs.opened_at)
        assert isinstance(pid, int) and pid >= 0
    new = lines[len(before) :]
    crash = [line for line in new for m in cs.dialect.crash_markers if m in line]
    assert not crash, f"a terminated session reads as a crash: {crash[:3]}"


async def check_declared_kinds(cs: ContractServer) -> None:
    """What the engine declares is something the scenario format has."""
    can = cs.dialect.capabilities
    faults = {model.model_fields["kind"].default for model in get_args(get_args(FaultSpec)[0])}
    checks = {model.model_fields["check"].default for model in get_args(get_args(CheckSpec)[0])}
    assert can.fault_kinds <= faults, can.fault_kinds - faults
    assert can.check_kinds <= checks, can.check_kinds - checks
    assert {"embedded"} <= can.backends <= {"embedded", "docker"}
    assert "standalone" in can.topologies
    assert {"status", "restart", cs.contract.set_action} <= set(cs.dialect.instance_actions)
    assert set(cs.dialect.metrics) and all("." in name for name in cs.dialect.metrics)
    assert cs.engine.dialect == cs.dialect.sql_dialect


#: Fault kinds the suite applies on every engine that declares them (the rest act on the
#: server's host or container: tests/test_os_and_client_faults.py, tests/test_containers.py).
EXERCISED_FAULTS = (
    "sql",
    "hold_transaction",
    "load",
    "idle_connections",
    "set_setting",
    "instance",
)


def _minimal_fault(kind: str, cs: ContractServer, login_role: str) -> FaultSpec:
    """The smallest fault of ``kind``: it must apply and leave the server answering."""
    minimal: dict[str, dict[str, Any]] = {
        "sql": {"sql": "SELECT 1"},
        "hold_transaction": {
            "application_name": "contract",
            "statements": ["SELECT 1"],
            "duration_s": 0.5,
        },
        "load": {"statements": ["SELECT 1"], "duration_s": 0.5, "pause_ms": 50},
        "idle_connections": {"role": login_role, "count": 2, "duration_s": 0.5},
        "set_setting": {"name": cs.contract.setting, "value": cs.contract.setting_values[0][0]},
        "instance": {"action": "restart"},
    }
    data = minimal[kind]
    adapter: TypeAdapter[FaultSpec] = TypeAdapter(FaultSpec)
    return adapter.validate_python({"kind": kind, **data})


async def check_declared_faults(cs: ContractServer) -> None:
    """Every fault kind the engine declares among :data:`EXERCISED_FAULTS` applies on the
    fixture (a live actor runs its course) and the server answers after it."""
    lib, login_role = await _fixture(cs)
    records: list[object] = []
    clock = ScenarioClock(1.0)

    class _Trace:
        def write(self, record: object) -> None:
            records.append(record)

    ctx = ActorContext(
        endpoint=cs.server.for_database(lib.database),
        clock=clock,
        trace=_Trace(),  # type: ignore[arg-type]
        instance=cs.server.cluster,
        host=cs.server.host,
        label="contract",
    )
    kinds = [k for k in EXERCISED_FAULTS if k in cs.dialect.capabilities.fault_kinds]
    assert {"sql", "instance"} <= set(kinds), "every engine runs SQL and restarts"
    for kind in kinds:
        fault = _minimal_fault(kind, cs, login_role)
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                await tg.start(run_fault, fault, ctx)
        assert await _value(cs, "SELECT 1") in (1, "1"), kind
    assert records, "the actors record what they did"


ContractCheck = Callable[[ContractServer], Awaitable[None]]


def contract_checks() -> dict[str, ContractCheck]:
    """Every check of the suite by name, in the order they run (the fixture check restarts the
    server; the termination check reads the log the others wrote)."""
    return {
        "identity": check_identity,
        "declared_kinds": check_declared_kinds,
        "snapshot_round_trip": check_snapshot_round_trip,
        "fixture_and_agent_tools": check_fixture_and_agent_tools,
        "declared_faults": check_declared_faults,
        "log_stamp_and_termination": check_log_stamp_and_termination,
    }
