"""The runner's sessions on TiDB (:class:`dbaops.dbms.tidb.connection.MysqlConnection` through
:class:`~dbaops.dbms.tidb.endpoint.TidbEndpoint`), against the real embedded server: the
asyncpg-shaped surface the workloads, actors and checks use, errors by MySQL error number,
lost sessions, timeouts, transactions; and a TiDB scenario's static problems."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import polars as pl
import pytest
import yaml

from dbaops.dbms.sessions import (
    CONNECTION_ERRORS,
    LOST_ERRORS,
    SERVER_ERRORS,
    session_dialect,
)
from dbaops.dbms.tidb.binary import TidbBinary
from dbaops.dbms.tidb.connection import MysqlConnectionLost, MysqlServerError, fill_placeholders
from dbaops.dbms.tidb.server import TidbServer
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.scenario.loader import ScenarioError, load_scenario, timelines_dir
from dbaops.testing.tidb import tidb_with_agent

pytestmark = pytest.mark.anyio


def test_placeholders_are_filled_with_mysql_literals_outside_quotes() -> None:
    sql = "SELECT '$1', `$2`, $1, $2 /* $1 */ FROM t WHERE a = $3 -- $2"
    out = fill_placeholders(sql, [7, "it's a \\ test", None])
    assert out == (
        "SELECT '$1', `$2`, 7, 'it\\'s a \\\\ test' /* $1 */ FROM t WHERE a = NULL -- $2"
    )
    assert fill_placeholders("SELECT '%s' % 2", []) == "SELECT '%s' % 2"


def test_errors_are_classified_alike_for_both_engines() -> None:
    assert issubclass(MysqlServerError, SERVER_ERRORS)
    assert issubclass(MysqlConnectionLost, CONNECTION_ERRORS)
    assert issubclass(MysqlConnectionLost, LOST_ERRORS)
    assert MysqlServerError(1213, "Deadlock found").sqlstate == "1213"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def server(tidb_binary: TidbBinary) -> AsyncIterator[TidbServer]:
    async with tidb_with_agent("pytest-tidb-sessions", tidb_binary) as started:
        yield started


async def test_the_surface_the_runner_uses(server: TidbServer) -> None:
    endpoint = server.endpoint("shop")
    conn = await endpoint.harness_connect()
    try:
        assert await conn.fetchval("SELECT @@SESSION.max_execution_time") == 0
        assert await conn.fetchval("SELECT $1 + $2", 2, 3) == 5
        row = await conn.fetchrow("SELECT 1 AS a, 'x' AS b")
        assert row is not None and row["b"] == "x" and row[0] == 1 and dict(row.items())["a"] == 1
        assert await conn.fetch("SELECT 1 FROM DUAL WHERE 1 = 0") == []
        assert await conn.execute("CREATE TABLE IF NOT EXISTS sess_t (id int PRIMARY KEY)") == "OK"
        with pytest.raises(MysqlServerError) as failed:
            await conn.execute("SELECT * FROM no_such_table")
        assert failed.value.sqlstate == "1146"
        assert not conn.is_closed()  # a refused statement keeps the session
        async with conn.transaction():
            await conn.execute("INSERT INTO sess_t VALUES ($1)", 1)
            assert conn.is_in_transaction()
        assert not conn.is_in_transaction()
        with pytest.raises(MysqlServerError):
            async with conn.transaction():
                await conn.execute("INSERT INTO sess_t VALUES (2)")
                await conn.execute("INSERT INTO sess_t VALUES (1)")  # duplicate key
        assert await conn.fetchval("SELECT count(*) FROM sess_t") == 1  # rolled back
        pid, _started = await endpoint.identify(conn)
        assert pid == conn.get_server_pid()
    finally:
        await conn.close()


async def test_a_killed_session_is_lost_and_a_timed_out_call_closes_it(
    server: TidbServer,
) -> None:
    endpoint = server.endpoint("shop")
    admin = await endpoint.harness_connect()
    await admin.execute("CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY ''")
    await admin.execute("GRANT SELECT ON shop.* TO 'app'@'%'")
    client = await endpoint.connect("app", "pytest")
    try:
        assert await client.fetchval("SELECT CURRENT_USER()") == "app@%"
        await admin.execute(f"KILL {client.get_server_pid()}")
        # seen before it is used (as asyncpg sees it), so a pool does not hand it out
        with anyio.fail_after(60):
            while not client.is_closed():  # noqa: ASYNC110 - polling the socket's state
                await anyio.sleep(0.01)
        with pytest.raises(MysqlConnectionLost):
            await client.fetchval("SELECT 1")
        assert client.is_closed()
        with pytest.raises(TimeoutError):
            await admin.fetchval(session_dialect(admin).sleep(5), timeout=0.2)
        assert admin.is_closed()  # cut off mid-protocol: not reusable
    finally:
        await client.close()
        await admin.close()


async def test_begin_at_an_isolation_level_is_tidb_syntax(server: TidbServer) -> None:
    endpoint = server.endpoint("shop")
    conn, other = await endpoint.connect(), await endpoint.connect()
    try:
        await other.execute("CREATE TABLE IF NOT EXISTS iso_t (id int PRIMARY KEY)")
        for level, sees_the_commit in (("read_committed", True), ("repeatable_read", False)):
            await other.execute("DELETE FROM iso_t")
            for statement in session_dialect(conn).begin(level):
                await conn.execute(statement)
            assert conn.is_in_transaction()
            assert await conn.fetchval("SELECT count(*) FROM iso_t") == 0
            await other.execute("INSERT INTO iso_t VALUES (1)")  # autocommit
            seen = await conn.fetchval("SELECT count(*) FROM iso_t")
            assert seen == (1 if sees_the_commit else 0), level
            await conn.execute("ROLLBACK")
    finally:
        await conn.close()
        await other.close()


# -- a TiDB scenario's static problems --------------------------------------------------------
def _variant(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load((timelines_dir() / "tb-qp-01.yaml").read_text())
    data.update(changes)
    path = tmp_path / "tb-variant.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_library_scenario_loads(tmp_path: Path) -> None:
    sc, lib, _ = load_scenario(_variant(tmp_path))
    assert sc.engine == "tidb" and lib.engine == "tidb"


def test_a_tidb_scenario_names_what_it_cannot_use(tmp_path: Path) -> None:
    prep = yaml.safe_load((timelines_dir() / "tb-qp-01.yaml").read_text())["preparation"]
    prep["activation"].append({"kind": "signal_process", "signal": "STOP"})
    with pytest.raises(ScenarioError) as bad:
        load_scenario(_variant(tmp_path, database={"library": "shop"}, preparation=prep))
    text = str(bad.value)
    assert "'shop' is written for postgres, the scenario runs on tidb" in text
    assert "fault 'signal_process' is not available on tidb" in text


def test_a_tidb_scenario_may_use_only_what_its_engine_declares(tmp_path: Path) -> None:
    """The engine's capabilities decide (no engine-name branch): a plan check (PostgreSQL's
    EXPLAIN format), a standby and the docker backend are refused on TiDB, naming the field."""
    data = yaml.safe_load((timelines_dir() / "tb-qp-01.yaml").read_text())
    plan = {"check": "plan", "name": "p", "sql": "SELECT 1", "has_node": ["Seq Scan"]}
    evaluation = {**data["evaluation"], "terminal": [*data["evaluation"]["terminal"], plan]}
    database = {**data["database"], "replica": {}}
    with pytest.raises(ScenarioError) as bad:
        load_scenario(
            _variant(tmp_path, evaluation=evaluation, database=database, backend="docker")
        )
    text = str(bad.value)
    assert "check 'plan' is not available on tidb" in text
    assert "database.replica: tidb scenarios have no standby" in text
    assert "backend: tidb runs on the embedded backend only" in text


async def test_a_cluster_scenario_is_refused_on_the_embedded_server(tmp_path: Path) -> None:
    """``topology: cluster`` (PD, TiKV or TiFlash needed) is refused, naming the way to run it,
    before any server starts; the setting is TiDB's only."""
    variant = _variant(tmp_path, topology="cluster")
    result = await run_scenario(variant, RunOptions(runs_dir=tmp_path / "runs", agent="noop"))
    assert result.status == "refused"
    assert result.reason is not None and "needs a TiDB cluster" in result.reason
    assert "--dsn mysql://" in result.reason
    data = yaml.safe_load((timelines_dir() / "pg-qt-01.yaml").read_text())
    data["topology"] = "cluster"
    pg = tmp_path / "pg-variant.yaml"
    pg.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match="topology: postgres has no 'cluster' topology"):
        load_scenario(pg)


def test_sql_is_checked_in_the_mysql_dialect(tmp_path: Path) -> None:
    reference = {"steps": [{"tool": "execute_sql", "args": {"sql": "SELEC 1"}}]}
    with pytest.raises(ScenarioError) as bad:
        load_scenario(_variant(tmp_path, reference=reference))
    assert "reference.steps[0].args.sql: SQL does not parse (MySQL dialect)" in str(bad.value)


async def test_killing_a_session_that_holds_buffered_writes_leaves_the_server_up(
    server: TidbServer,
) -> None:
    """The pinned TiDB panics on this KILL with its default txn-total-size-limit (see
    dbaops.dbms.tidb.server.TXN_TOTAL_SIZE_LIMIT); dbaops' configuration avoids it."""
    endpoint = server.endpoint("shop")
    admin = await endpoint.harness_connect()
    holder = await endpoint.connect()
    try:
        await admin.execute("CREATE TABLE IF NOT EXISTS kill_t (id int PRIMARY KEY, v int)")
        await admin.execute("SET SESSION cte_max_recursion_depth = 10000")
        await admin.execute(
            "REPLACE INTO kill_t WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s"
            " WHERE n < 1000) SELECT n, 1 FROM s"
        )
        for statement in session_dialect(holder).begin("repeatable_read"):
            await holder.execute(statement)
        await holder.execute("UPDATE kill_t SET v = v + 1 WHERE id BETWEEN 1 AND 100")
        await anyio.sleep(1)  # idle in the transaction, as the price-sync job of tb-sf-01
        await admin.execute(f"KILL {holder.get_server_pid()}")
        with pytest.raises(MysqlConnectionLost):
            await holder.fetchval("SELECT 1")
        fresh = await endpoint.harness_connect()  # a new session: the server still answers
        try:
            assert await fresh.fetchval("SELECT sum(v) FROM kill_t") == 1000  # rolled back
        finally:
            await fresh.close()
        assert server.process_alive()
    finally:
        await holder.close()
        await admin.close()


async def test_every_survey_probe_reads_the_embedded_server(server: TidbServer) -> None:
    from dbaops.dbms.tidb.survey import SURVEY_PROBES
    from dbaops.execution.survey import take_survey
    from dbaops.scenario.specs import DifficultySpec

    spec = DifficultySpec(path=["a", "b"], modalities={"sql": {"causal": "shop"}})
    admin = await server.endpoint("shop").harness_connect()
    try:
        await admin.execute("SET GLOBAL max_execution_time = 20")
    finally:
        await admin.close()
    survey = await take_survey(
        "tidb",
        spec,
        server.endpoint("shop"),
        t_scn=0.0,
        history_before_s=-30.0,
        metrics=pl.DataFrame(),
        log_lines=[],
    )
    assert set(survey.sql) == set(SURVEY_PROBES)
    assert {n: p.error for n, p in survey.sql.items() if p.error} == {}
    assert any(row.startswith("t | shop") for row in survey.sql["tables"].rows)
    # the GLOBAL value, not the survey session's own
    assert "max_execution_time | 20 | 0" in survey.sql["settings"].rows
    admin = await server.endpoint("shop").harness_connect()
    try:
        await admin.execute("SET GLOBAL max_execution_time = 0")
    finally:
        await admin.close()
