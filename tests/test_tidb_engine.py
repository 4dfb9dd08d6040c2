"""TiDB behind the engine seam, against the real embedded server: lifecycle and snapshots, a
user's server by DSN, the metric sampler, and the agent's five tool roles as its TiDB user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import polars as pl
import pytest

from dbaops.clock import ScenarioClock
from dbaops.dbms.interface import Observations, ServerRequest
from dbaops.dbms.registry import engine_names, get_engine
from dbaops.dbms.tidb.endpoint import execute, fetch_value
from dbaops.dbms.tidb.engine import TidbBackend, TidbEngine, external_endpoint
from dbaops.dbms.tidb.knowledge import error_units, variable_units
from dbaops.dbms.tidb.metrics import COUNTERS, GAUGES, REGISTRY
from dbaops.dbms.tidb.sampler import TidbMetricSampler, parse_prometheus
from dbaops.dbms.tidb.serverlog import slow_log_stamp
from dbaops.execution.checks import ledger_baselines
from dbaops.mailbox import Mailbox
from dbaops.record.tables import SAMPLE_SCHEMA
from dbaops.scenario.checks import LedgerCheck
from dbaops.scenario.loader import load_scenario
from dbaops.tools.names import AGENT_TOOLS
from dbaops.tools.recording import ToolRecorder

pytestmark = pytest.mark.anyio


# -- pure parts -----------------------------------------------------------------------------
def test_the_engine_is_registered() -> None:
    assert "tidb" in engine_names()
    engine = get_engine("tidb")
    assert isinstance(engine, TidbEngine) and engine.dialect == "mysql"


def test_prometheus_families_are_summed_per_label() -> None:
    text = (
        "# HELP tidb_server_query_total x\n"
        'tidb_server_query_total{resource_group="default",result="OK",type="Query"} 5\n'
        'tidb_server_query_total{resource_group="default",result="OK",type="Ping"} 2\n'
        'tidb_server_query_total{resource_group="default",result="Error",type="Query"} 1\n'
        'tidb_server_connections{resource_group="default"} 3\n'
        "process_cpu_seconds_total 1.5e+00\n"
        "unrelated_total 9\n"
    )
    got = parse_prometheus(text, [*GAUGES, *COUNTERS])
    assert got == {
        ("tidb_server_query_total", "OK"): 7.0,
        ("tidb_server_query_total", "Error"): 1.0,
        ("tidb_server_connections", ""): 3.0,
        ("process_cpu_seconds_total", ""): 1.5,
    }


def test_slow_log_records_are_stamped_on_their_first_line() -> None:
    assert slow_log_stamp("# Time: 2026-12-02T20:01:02.5+00:00") == (1796241662.5, 0)
    assert slow_log_stamp("# Conn_ID: 5") is None
    assert slow_log_stamp("select 1;") is None


def test_the_agents_logs_leave_out_the_harness_user() -> None:
    from dbaops.dbms.tidb.serverlog import without_harness_lines, without_harness_records

    slow = [
        "# Time: 2026-12-02T20:01:02.1+00:00", "# User@Host: root[root] @ 127.0.0.1",
        "SELECT check_sql;",
        "# Time: 2026-12-02T20:01:03.1+00:00", "# User@Host: app_rw[app_rw] @ 127.0.0.1",
        "SELECT app_sql;",
    ]  # fmt: skip
    assert without_harness_records(slow) == slow[3:]
    lines = ["[..] [WARN] [x.go:1] [q] [user=root] [sql=check]", "[..] [WARN] [q] [user=app_rw]"]
    assert without_harness_lines(lines) == lines[1:]


def test_reference_units() -> None:
    [err] = error_units("[\"kv:9007\"]\nerror = '''\nWrite conflict\n'''\nworkaround = 'retry'\n")
    assert err.title == "error 9007 kv:9007" and "Workaround: retry" in err.body
    tidb_vars = (
        '\t// TiDBGCLifetime sets the retention window\n\tTiDBGCLifetime = "tidb_gc_life_time"\n'
    )
    sysvar = '\t{Scope: ScopeGlobal, Name: TiDBGCLifetime, Value: "10m0s", Type: TypeDuration, '
    [var] = variable_units(tidb_vars, sysvar)
    assert var.title == "tidb_gc_life_time (system variable)"
    assert "Scope: GLOBAL" in var.body and 'Default: "10m0s"' in var.body
    assert "retention window" in var.body


def test_a_dsn_names_the_users_server() -> None:
    ep = external_endpoint("mysql://dba:p%40ss@db.example:4001/shop")
    assert (ep.host, ep.port, ep.user, ep.password, ep.database) == (
        "db.example", 4001, "dba", "p@ss", "shop",
    )  # fmt: skip
    assert external_endpoint("mysql://127.0.0.1").port == 4000
    with pytest.raises(ValueError, match="mysql://"):
        external_endpoint("postgresql://x")


# -- against the server ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def backend(tidb_binary: object) -> AsyncIterator[TidbBackend]:
    server = await get_engine("tidb").open_server(ServerRequest(name="pytest-tidb-engine"))
    assert isinstance(server, TidbBackend)
    conn = await server.admin.raw_connect()
    try:
        await execute(conn, "CREATE DATABASE IF NOT EXISTS shop")
        await execute(conn, "CREATE TABLE IF NOT EXISTS shop.t (id INT PRIMARY KEY, v INT)")
    finally:
        conn.close()
    try:
        yield server
    finally:
        await server.close()
    assert server.server is not None and not server.server.process_alive()


async def test_the_embedded_server_behind_the_seam(backend: TidbBackend) -> None:
    assert backend.kind == "embedded"
    info = backend.describe()
    assert info["engine"] == "tidb" and info["port"] == backend.admin.port
    assert "release_version" in info and "binary" in info
    assert (await backend.server_version()).startswith("8.0.11-TiDB-")
    assert set(backend.log_files()) == {"primary", "slow"}
    versions = get_engine("tidb").versions(await backend.server_version())
    assert {"tidb", "aiomysql", "sqlglot"} <= set(versions)
    store = backend.snapshots
    assert store is not None
    async with store.lock(exclusive=True):
        await store.capture("k")
    assert store.has("k")
    async with store.lock(exclusive=False):
        await store.restore("k")
    store.drop("k")


async def test_a_ledger_counts_the_rows_of_the_tables_it_lists(backend: TidbBackend) -> None:
    """``count_rows_of`` on TiDB: each listed table counted by the harness, one sum."""
    conn = await backend.admin.raw_connect()
    try:
        for name, rows in (("ledger_a", 3), ("ledger-b", 2)):  # a name that needs quoting
            await execute(conn, f"DROP TABLE IF EXISTS shop.`{name}`")
            await execute(conn, f"CREATE TABLE shop.`{name}` (id INT PRIMARY KEY)")
            values = ", ".join(f"({i})" for i in range(rows))
            await execute(conn, f"INSERT INTO shop.`{name}` VALUES {values}")
    finally:
        conn.close()
    check = LedgerCheck(
        name="rows",
        count_rows_of="SELECT table_schema, table_name FROM information_schema.tables "
        "WHERE table_schema = 'shop' AND table_name LIKE 'ledger%'",
    )
    measures, errors = await ledger_baselines([check], backend.for_database("shop"))
    assert errors == {} and measures == {"rows": 5}


async def test_a_users_server_by_dsn(backend: TidbBackend) -> None:
    dsn = f"mysql://root@127.0.0.1:{backend.admin.port}"
    external = await get_engine("tidb").open_server(ServerRequest(name="x", dsn=dsn))
    assert isinstance(external, TidbBackend)
    assert external.kind == "external"
    assert external.snapshots is None and external.log_files() == {}
    assert (await external.server_version()) == (await backend.server_version())
    await external.close()


async def test_the_sampler_records_metrics_and_gaps(backend: TidbBackend) -> None:
    sampler = TidbMetricSampler(backend.admin, ScenarioClock(1.0), None)
    async with aiohttp.ClientSession() as http:
        assert await sampler.sample_once(http)
        conn = await backend.admin.raw_connect()
        try:
            for _ in range(10):
                await execute(conn, "SELECT * FROM shop.t")
        finally:
            conn.close()
        assert await sampler.sample_once(http)
        frame = sampler.snapshot()
        metrics = set(frame["metric"].to_list())
        assert {"tidb.connections", "tidb.memory_rss_bytes", "tidb.queries_per_s",
                "tidb.active_sessions", "tidb.lock_waits", "sampler.up"} <= metrics  # fmt: skip
        assert metrics <= set(REGISTRY), "every metric recorded is declared (checks validate on it)"
        ok_rate = frame.filter(
            (pl.col("metric") == "tidb.queries_per_s") & (pl.col("label") == "OK")
        )["value"]
        assert ok_rate.len() == 1 and ok_rate[0] > 0  # a rate from the second sample on
        sampler.close()
        down = TidbMetricSampler(
            backend.admin.model_copy(update={"port": 1, "status_port": 1}), ScenarioClock(), None
        )
        assert not await down.sample_once(http)
        assert down.snapshot().filter(pl.col("metric") == "sampler.up")["value"].to_list() == [0]


async def test_the_agent_tools_on_tidb(backend: TidbBackend, tmp_path: Path) -> None:
    sc, _, _ = load_scenario("pg-sf-01")  # for the agent's settings only
    clock = ScenarioClock(1.0)
    records: list[object] = []
    assert backend.server is not None
    server = backend.server
    admin = await backend.admin.raw_connect()
    try:
        await execute(admin, "SET GLOBAL tidb_slow_log_threshold = 0")
        observations = Observations(
            metrics=lambda: pl.DataFrame(schema={"t_s": pl.Float64, "metric": pl.String,
                                                 "label": pl.String, "value": pl.Float64}),
            samples=lambda: pl.DataFrame(schema=SAMPLE_SCHEMA),
            server_logs={
                "primary": lambda: server.log_path.read_text().splitlines(),
                "slow": lambda: server.slow_log_path.read_text().splitlines()
                if server.slow_log_path.exists() else [],
            },
        )  # fmt: skip
        tools = get_engine("tidb").agent_tools(
            backend, sc, "shop", clock, Mailbox.create(tmp_path / "mailbox", now=clock.now),
            observations, ToolRecorder(records.append, clock),  # type: ignore[arg-type]
        )  # fmt: skip
        assert set(tools.catalog) == set(AGENT_TOOLS)
        # the harness's own statement (as its checks run): the agent must not read it
        await execute(admin, "SELECT 'harness_marker_42' AS m FROM DUAL")
        await tools.open()
        await tools.begin()
        try:
            for table in ("statements_summary", "statements_summary_history"):
                summary = await tools.catalog["execute_sql"].handler(
                    {"sql": f"SELECT QUERY_SAMPLE_TEXT FROM information_schema.{table}"}
                )
                assert summary.ok and "harness_marker_42" not in summary.observation, table
            hidden = await tools.catalog["read_log"].handler(
                {"source": "slow", "pattern": "harness_marker"}
            )
            assert hidden.ok and "harness_marker_42" not in hidden.observation
            sql = await tools.catalog["execute_sql"].handler(
                {"sql": "SELECT CURRENT_USER() AS me, count(*) AS n FROM t"}
            )
            assert sql.ok and f"{sc.agent.role}@%" in sql.observation
            status = await tools.catalog["manage_instance"].handler({"action": "status"})
            assert "server running: True" in status.observation
            log = await tools.catalog["read_log"].handler({"source": "tidb", "pattern": "TiDB"})
            assert log.ok and "matching line(s)" in log.observation
            slow = await tools.catalog["read_log"].handler({"source": "slow", "pattern": "FROM t"})
            assert slow.ok and "count(*)" in slow.observation
            kb = await tools.catalog["query_knowledge_base"].handler({"query": "8175 memory"})
            assert kb.ok and "executor:8175" in kb.observation
            bad = await tools.catalog["read_log"].handler({"source": "postgresql"})
            assert not bad.ok and "'tidb' or 'slow' or 'workload'" in bad.observation
        finally:
            await tools.close()
    finally:
        await execute(admin, "SET GLOBAL tidb_slow_log_threshold = 300")
        admin.close()
    assert len(records) == 9  # every call recorded


async def test_the_react_agent_works_a_tidb_ticket_with_the_tidb_catalog(
    backend: TidbBackend, tmp_path: Path
) -> None:
    """The ReAct agent over real HTTP (the local scripted OpenAI-compatible server) calls the
    TiDB tools on the real server; the model sees TiDB's catalog."""
    import anyio

    from dbaops.agents.base import AgentSession, Budget
    from dbaops.agents.react import ReactAgent
    from dbaops.models import ModelSpec, Prices
    from dbaops.testing import OpenAITestServer, ScriptedResponse
    from dbaops.testing.openai_server import ScriptedToolCall

    def step(name: str, args: dict[str, object]) -> ScriptedResponse:
        return ScriptedResponse(tool_calls=[ScriptedToolCall(name=name, arguments=args)])

    script = [
        step("execute_sql", {"sql": "SELECT count(*) AS trx FROM information_schema.TIDB_TRX"}),
        step("query_knowledge_base", {"query": "tidb_mem_quota_query"}),
        step(
            "manage_instance",
            {"action": "set_variable", "name": "tidb_mem_quota_query", "value": "2147483648"},
        ),  # fmt: skip
        step(
            "submit_report",
            {
                "summary": "report quota raised",
                "root_cause": "8175",
                "actions": "SET GLOBAL tidb_mem_quota_query",
                "verification": "-",
            },
        ),  # fmt: skip
    ]
    sc, _, _ = load_scenario("pg-sf-01")
    clock = ScenarioClock(1.0)
    ended = anyio.Event()
    records: list[object] = []
    observations = Observations(
        metrics=lambda: pl.DataFrame(schema={"t_s": pl.Float64, "metric": pl.String,
                                             "label": pl.String, "value": pl.Float64}),
        samples=lambda: pl.DataFrame(schema=SAMPLE_SCHEMA),
    )  # fmt: skip
    recorder = ToolRecorder(records.append, clock, ended=ended, on_report=ended.set)  # type: ignore[arg-type]
    tools = get_engine("tidb").agent_tools(
        backend, sc, "shop", clock, Mailbox.create(tmp_path / "mailbox", now=clock.now),
        observations, recorder,
    )  # fmt: skip
    await tools.open()
    try:
        with OpenAITestServer(script) as server:
            spec = ModelSpec(name="t", base_url=server.base_url, model="test-model",
                             prices=Prices(input=1.0, cached_input=0.5, output=2.0))  # fmt: skip
            agent = ReactAgent(spec, turn_budget=10)
            session = AgentSession.create(
                task="Ticket: the nightly report fails with error 8175. Fix it safely.",
                mode="bounded", budget=Budget(turns=10, time_s=600.0), clock=clock,
                tools=tools.catalog, ended=ended,
            )  # fmt: skip
            with anyio.fail_after(120):
                await agent.run(session)
            first = server.chat_requests[0].body
    finally:
        await tools.close()
    names = sorted(t["function"]["name"] for t in first["tools"])
    assert names == sorted(AGENT_TOOLS)
    described = {t["function"]["name"]: t["function"]["description"] for t in first["tools"]}
    assert "TiDB" in described["execute_sql"] and "TiDB" in described["manage_instance"]
    # query_metrics tells a TiDB agent what TiDB's sampler records, not PostgreSQL's views
    metrics = described["query_metrics"]
    assert "lock waits" in metrics and "tidb-server" in metrics
    assert not any(pg in metrics for pg in ("pg_stat_statements", "WAL", "checkpoint"))
    assert ended.is_set()
    conn = await backend.admin.raw_connect()
    try:
        assert str(await fetch_value(conn, "SELECT @@global.tidb_mem_quota_query")) == "2147483648"
    finally:
        conn.close()
