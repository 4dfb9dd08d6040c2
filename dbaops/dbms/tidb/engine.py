"""TiDB behind the engine seam (:class:`dbaops.dbms.interface.DatabaseEngine`).

- lifecycle: the embedded ``tidb-server`` (:mod:`dbaops.dbms.tidb.server`, snapshots included)
  or a user's own TiDB by DSN (``mysql://user:password@host:port``; instance control and
  snapshots are then unavailable, and what needs PD/TiKV works there);
- the agent's user and tools: :mod:`dbaops.dbms.tidb.agent_role`, ``execute_sql``
  (:mod:`dbaops.dbms.tidb.sql_session`), ``manage_instance``
  (:mod:`dbaops.dbms.tidb.instance_tool`), ``read_log`` over ``tidb.log`` and the slow log,
  ``query_metrics`` over :mod:`dbaops.dbms.tidb.sampler`'s samples;
- the safety judge's dialect: ``mysql`` (sqlglot).

Scenarios cannot name this engine yet (the scenario model allows ``postgres`` only): the
runner's fixture, workloads and checks still speak PostgreSQL.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urlparse

import anyio

from dbaops.clock import ScenarioClock
from dbaops.dbms.interface import (
    DatabaseEngine,
    DatabaseServer,
    Observations,
    ServerRequest,
)
from dbaops.dbms.tidb.agent_role import grant_tidb_dba
from dbaops.dbms.tidb.dialect import DIALECT
from dbaops.dbms.tidb.endpoint import CONNECTION_ERRORS, TidbEndpoint, execute, fetch_value
from dbaops.dbms.tidb.fixture import build_fixture as build_library_fixture
from dbaops.dbms.tidb.instance_tool import tidb_instance_tool
from dbaops.dbms.tidb.preparation import apply_server_settings as apply_global_settings
from dbaops.dbms.tidb.sampler import TidbMetricSampler
from dbaops.dbms.tidb.server import TidbError, TidbServer
from dbaops.dbms.tidb.serverlog import (
    forget_harness_records,
    log_line_stamp,
    slow_log_stamp,
    without_harness_lines,
    without_harness_records,
)
from dbaops.dbms.tidb.sql_session import TidbSqlSession, tidb_sql_tool
from dbaops.mailbox import Mailbox
from dbaops.record.kinds import KnowledgeCorpus
from dbaops.record.tables import ParquetParts
from dbaops.scenario.model import Scenario
from dbaops.tools.base import Tool
from dbaops.tools.logs import ServerLogSource, log_tool
from dbaops.tools.mailbox_tools import mailbox_tools
from dbaops.tools.metrics_tool import metrics_tool
from dbaops.tools.recording import ToolRecorder
from dbaops.workloads.spec import WorkloadLibrary


@dataclass
class TidbSnapshots:
    """The embedded server's snapshot group as a :class:`~dbaops.dbms.interface.SnapshotStore`."""

    server: TidbServer

    @property
    def root(self) -> Path:
        return self.server.snapshot_root

    def has(self, key: str) -> bool:
        return self.server.has_snapshot(key)

    async def capture(self, key: str) -> float:
        return await self.server.capture_snapshot(key)

    async def restore(self, key: str) -> float:
        return await self.server.restore_snapshot(key)

    def drop(self, key: str) -> None:
        self.server.drop_snapshot(key)

    def lock(self, *, exclusive: bool) -> Any:
        return self.server.snapshot_lock(exclusive=exclusive)


@dataclass
class TidbBackend:
    """A TiDB server of one run: the embedded one (``server``) or a user's (``external``)."""

    server: TidbServer | None
    external: TidbEndpoint | None = None

    @property
    def admin(self) -> TidbEndpoint:
        """The harness's endpoint (follows the embedded server's current ports)."""
        if self.server is not None:
            return self.server.endpoint()
        assert self.external is not None
        return self.external

    @property
    def kind(self) -> str:
        return self.server.backend if self.server is not None else "external"

    def for_database(self, database: str) -> TidbEndpoint:
        return self.admin.for_database(database)

    def standby_for(self, database: str) -> None:
        """The embedded TiDB has no standby."""
        return None

    @property
    def cluster(self) -> TidbServer | None:
        """The embedded server (instance control), None for a user's TiDB."""
        return self.server

    @property
    def host(self) -> None:
        """No host-level faults (signals, disks, limits) on TiDB yet."""
        return None

    @property
    def standby_instance(self) -> None:
        """The embedded TiDB has no standby."""
        return None

    @property
    def standby_host(self) -> None:
        """The embedded TiDB has no standby."""
        return None

    async def server_version(self) -> str:
        conn = await self.admin.raw_connect()
        try:
            return str(await fetch_value(conn, "SELECT VERSION()"))
        finally:
            conn.close()

    @property
    def snapshots(self) -> TidbSnapshots | None:
        return TidbSnapshots(self.server) if self.server is not None else None

    def log_files(self) -> dict[str, Path]:
        if self.server is None:
            return {}
        return {"primary": self.server.log_path, "slow": self.server.slow_log_path}

    async def close(self) -> None:
        if self.server is not None:
            await self.server.dispose()

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "engine": "tidb",
            "kind": self.kind,
            "host": self.admin.host,
            "port": self.admin.port,
        }
        if self.server is not None:
            info.update(self.server.describe())
        return info


def tidb_server(server: object) -> TidbBackend:
    """``server`` as a TiDB server; a clear error for another engine's."""
    if not isinstance(server, TidbBackend):
        raise TypeError(f"{type(server).__name__} is not a TiDB server")
    return server


def external_endpoint(dsn: str) -> TidbEndpoint:
    """A user's TiDB from ``mysql://user:password@host:port[/database]`` (port 4000 and user
    ``root`` by default)."""
    url = urlparse(dsn)
    if url.scheme not in ("mysql", "tidb"):
        raise ValueError(f"a TiDB DSN starts with mysql:// (got {dsn.split(':', 1)[0]}://)")
    return TidbEndpoint(
        host=url.hostname or "127.0.0.1",
        port=url.port or 4000,
        user=unquote(url.username or "root"),
        password=unquote(url.password) if url.password else None,
        database=url.path.lstrip("/") or None,
    )


@dataclass
class TidbAgentTools:
    """The agent's tool catalog on a TiDB server, and the SQL session behind it."""

    catalog: dict[str, Tool]
    session: TidbSqlSession
    prepare: Callable[[], Any]
    admin: TidbEndpoint
    #: the embedded server's slow log (None: a user's TiDB, whose files dbaops cannot reach)
    slow_log: Path | None = None

    async def open(self) -> None:
        """Create the agent's user (a fresh password per run), then connect its session."""
        await self.prepare()
        await self.session.open()

    async def begin(self) -> None:
        """Clear the statements summary (switching it off and on empties it): the agent's
        PROCESS privilege reads every user's statements there, sample texts included, and
        TiDB cannot keep one session out of it, so the harness's preparation and
        manifestation checks would tell the agent what is judged. The workloads refill it.
        ``read_log`` filters the harness's user out of the logs; the slow log's file, which
        the agent also reads through ``information_schema.slow_query``, loses the harness's
        records here. A server the scenario has left stopped has nothing to clear: it starts
        with an empty summary."""
        try:
            conn = await self.admin.raw_connect()
        except CONNECTION_ERRORS:
            conn = None
        if conn is not None:
            try:
                await execute(conn, "SET GLOBAL tidb_enable_stmt_summary = OFF")
                await execute(conn, "SET GLOBAL tidb_enable_stmt_summary = ON")
            finally:
                conn.close()
        if self.slow_log is not None:
            await anyio.to_thread.run_sync(forget_harness_records, self.slow_log)

    async def close(self) -> None:
        await self.session.close()


class TidbEngine(DatabaseEngine):
    """TiDB (the SQL layer; embedded with unistore storage, or a user's cluster)."""

    name: ClassVar[str] = "tidb"
    dialect: ClassVar[str] = DIALECT.sql_dialect

    async def open_server(
        self, request: ServerRequest, progress: Callable[[str], None] | None = None
    ) -> TidbBackend:
        if request.dsn:
            endpoint = external_endpoint(request.dsn)
            conn = await endpoint.raw_connect()
            conn.close()
            return TidbBackend(None, endpoint)
        if request.backend != "embedded":
            raise TidbError(f"TiDB runs on the embedded backend only (not {request.backend})")
        server = await TidbServer.open(request.name, snapshot_group=request.snapshot_group)
        server.acquire()
        try:
            await server.start()
        except BaseException:
            server.release()
            raise
        return TidbBackend(server)

    async def build_fixture(
        self,
        server: DatabaseServer,
        library: WorkloadLibrary,
        params: dict[str, int],
        seed: int,
        date: str,
    ) -> float:
        return await build_library_fixture(tidb_server(server).admin, library, params, seed, date)

    async def apply_server_settings(self, server: DatabaseServer, settings: dict[str, str]) -> None:
        await apply_global_settings(tidb_server(server).admin, settings)

    def release_cluster_dir(self, path: Path) -> list[str]:
        """A tidb-server still running from ``path`` (SIGTERM)."""
        import os
        import signal

        pidfile = path / "tidb.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text().splitlines()[0]), signal.SIGTERM)
                return [f"stopped the tidb-server of {path}"]
            except (OSError, ValueError, IndexError):
                pass
        return []

    def metric_sampler(
        self,
        server: DatabaseServer,
        database: str,
        clock: ScenarioClock,
        parts: ParquetParts,
        agent_role: str | None = None,
        interval_s: float = 1.0,
    ) -> TidbMetricSampler:
        admin = tidb_server(server).admin  # (no lock waits by role yet)
        return TidbMetricSampler(admin, clock, parts, interval_s=interval_s)

    def versions(self, server_version: str) -> dict[str, str]:
        import aiomysql
        import sqlglot

        return {
            **self.harness_versions(),
            "aiomysql": aiomysql.__version__,
            "sqlglot": sqlglot.__version__,
            "tidb": server_version,
        }

    def knowledge_corpus(self) -> KnowledgeCorpus:
        from dbaops.dbms.tidb.knowledge import describe_tidb_corpus

        return describe_tidb_corpus()

    def agent_tools(
        self,
        server: DatabaseServer,
        sc: Scenario,
        database: str,
        clock: ScenarioClock,
        mailbox: Mailbox,
        observations: Observations,
        recorder: ToolRecorder,
    ) -> TidbAgentTools:
        """The five tool roles (plus the mailbox tools) as the agent's cloud-DBA user."""
        backend = tidb_server(server)
        user, password = sc.agent.role, secrets.token_urlsafe(18)
        endpoint = backend.for_database(database)

        async def prepare() -> None:
            conn = await backend.admin.raw_connect()
            try:
                await grant_tidb_dba(conn, user, password, databases=[database])
            finally:
                conn.close()

        session = TidbSqlSession(
            endpoint,
            user,
            password,
            monitor=backend.admin,
            timeout_s=sc.agent.sql_timeout_s,
            max_rows=sc.agent.max_rows,
        )
        return TidbAgentTools(
            build_tidb_catalog(backend, session, password, clock, observations, mailbox, recorder),
            session,
            prepare,
            backend.admin,
            backend.server.slow_log_path if backend.server is not None else None,
        )


def build_tidb_catalog(
    backend: TidbBackend,
    session: TidbSqlSession,
    password: str,
    clock: ScenarioClock,
    observations: Observations,
    mailbox: Mailbox,
    recorder: ToolRecorder,
) -> dict[str, Tool]:
    """TiDB's tools, each recorded in the trace (the same names as PostgreSQL's catalog)."""
    from dbaops.dbms.tidb.knowledge import tidb_knowledge_tool
    from dbaops.tools.names import AGENT_TOOLS

    logs = observations.server_logs
    tidb_log, slow_log = logs.get("primary", list), logs.get("slow", list)
    servers = {
        "tidb": ServerLogSource(
            lambda: without_harness_lines(tidb_log()), log_line_stamp, "the TiDB server log: "
            "errors, slow and expensive queries, DDL, GC, memory quota actions"
        ),
        "slow": ServerLogSource(
            lambda: without_harness_records(slow_log()), slow_log_stamp, "the slow query log: "
            "each slow statement with its time, connection, latency breakdown and plan"
        ),
    }  # fmt: skip
    tools = [
        tidb_sql_tool(session),
        metrics_tool(observations.metrics, observations.samples, clock, dialect=DIALECT),
        tidb_instance_tool(backend.admin, backend.server, session.user, password),
        log_tool(servers, observations.samples, clock),
        tidb_knowledge_tool(),
        *mailbox_tools(mailbox),
    ]
    catalog = {t.spec.name: recorder.wrap(t) for t in tools}
    if set(catalog) != set(AGENT_TOOLS):
        raise RuntimeError(f"the tool catalog {sorted(catalog)} differs from AGENT_TOOLS")
    return catalog


#: The engine this package registers (``dbaops.engines`` entry point).
ENGINE = TidbEngine
