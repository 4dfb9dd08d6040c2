"""PostgreSQL behind the engine seam (:class:`dbaops.dbms.interface.DatabaseEngine`).

- lifecycle: the embedded cluster (:mod:`dbaops.dbms.postgres.cluster`, snapshots included) or
  a user's server by DSN (:mod:`dbaops.dbms.postgres.server`);
- endpoints and harness connections: :mod:`dbaops.dbms.postgres.endpoint`;
- the agent's role and tools: :mod:`dbaops.dbms.postgres.agent_role`, :mod:`dbaops.tools`
  (``execute_sql`` on asyncpg, ``query_metrics``, ``manage_instance``, ``read_log``,
  ``query_knowledge_base`` over the PostgreSQL manual);
- the metric sampler's queries: :mod:`dbaops.dbms.postgres.sampler`,
  :mod:`dbaops.dbms.postgres.metrics_sql`;
- the server log's format: :mod:`dbaops.dbms.postgres.serverlog`;
- the safety judge's dialect: ``postgres`` (pglast).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from dbaops.clock import ScenarioClock
from dbaops.dbms.interface import DatabaseEngine, DatabaseServer, Observations, ServerRequest
from dbaops.dbms.postgres import preparation
from dbaops.dbms.postgres.dialect import DIALECT
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.fixture import build_fixture as build_library_fixture
from dbaops.dbms.postgres.sampler import MetricSampler, harness_sampler
from dbaops.dbms.postgres.server import (
    PostgresBackend,
    container_backend,
    embedded_backend,
    external_backend,
    postgres_server,
)
from dbaops.dbms.postgres.serverlog import log_line_stamp
from dbaops.dbms.postgres.sql_tool import SqlSession
from dbaops.dbms.postgres.tool_catalog import (
    PostgresToolEnvironment,
    StandbyToolEnvironment,
    build_tool_catalog,
)
from dbaops.mailbox import Mailbox
from dbaops.record.kinds import KnowledgeCorpus
from dbaops.record.tables import ParquetParts
from dbaops.scenario.model import ReplicaSpec, Scenario
from dbaops.tools.base import Tool
from dbaops.tools.knowledge import describe_corpus
from dbaops.tools.recording import ToolRecorder
from dbaops.workloads.spec import WorkloadLibrary


def agent_sql_session(sc: Scenario, endpoint: Endpoint) -> SqlSession:
    """The agent's own SQL session on one server, with the scenario's limits."""
    return SqlSession(
        endpoint,
        role=sc.agent.role,
        timeout_s=sc.agent.sql_timeout_s,
        max_rows=sc.agent.max_rows,
        monitor=endpoint,
    )


@dataclass
class PostgresAgentTools:
    """The agent's tool catalog on one run's servers, and the SQL sessions behind it."""

    catalog: dict[str, Tool]
    sessions: list[SqlSession]

    async def open(self) -> None:
        """Connect the primary's session now (the standby's connects on first use)."""
        await self.sessions[0].open()

    async def begin(self) -> None:
        """Nothing to drop: harness sessions are kept out of pg_stat_statements and the log
        (:data:`~dbaops.dbms.postgres.endpoint.HIDDEN_SETTINGS`)."""

    async def close(self) -> None:
        for session in self.sessions:
            await session.close()


class PostgresEngine(DatabaseEngine):
    """PostgreSQL 15 and later."""

    name: ClassVar[str] = "postgres"
    dialect: ClassVar[str] = DIALECT.sql_dialect

    async def open_server(
        self, request: ServerRequest, progress: Callable[[str], None] | None = None
    ) -> PostgresBackend:
        if request.dsn:
            return await external_backend(request.dsn)
        if request.backend == "docker":
            return await container_backend(request, progress)
        return await embedded_backend(request.name, request.bindir, request.snapshot_group)

    def release_cluster_dir(self, path: Path) -> list[str]:
        """A volume's loop mount left under ``path``, a postmaster still running there (fast
        shutdown), the docker backend's containers and networks of the cluster and its
        standby."""
        import os
        import signal

        import anyio

        from dbaops.containers.daemon import daemon_unavailable
        from dbaops.dbms.postgres.container import remove_labelled
        from dbaops.dbms.postgres.volumes import unmount_under

        done: list[str] = []
        unmount_under(path)
        pidfile = path / "data" / "postmaster.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text().splitlines()[0]), signal.SIGINT)
                done.append(f"stopped the postmaster of {path}")
            except (OSError, ValueError, IndexError):
                pass
        if daemon_unavailable() is None:
            roots = {str(path), f"{path}/standby"}
            removed = anyio.run(remove_labelled, roots.__contains__)
            done += [f"removed container or network {name}" for name in removed]
        return done

    def metric_sampler(
        self,
        server: DatabaseServer,
        database: str,
        clock: ScenarioClock,
        parts: ParquetParts,
        agent_role: str | None = None,
        interval_s: float = 1.0,
    ) -> MetricSampler:
        endpoint = postgres_server(server).for_database(database)
        return harness_sampler(endpoint, clock, parts, interval_s=interval_s, agent_role=agent_role)

    async def build_fixture(
        self,
        server: DatabaseServer,
        library: WorkloadLibrary,
        params: dict[str, int],
        seed: int,
        date: str,
    ) -> float:
        return await build_library_fixture(
            postgres_server(server).admin, library, params, seed, date
        )

    async def apply_server_settings(self, server: DatabaseServer, settings: dict[str, str]) -> None:
        await preparation.apply_server_settings(postgres_server(server), settings)

    async def statement_marks(self, endpoint: object) -> object | None:
        return await preparation.statement_marks(_endpoint(endpoint))

    async def forget_statements(self, endpoint: object, marks: object) -> None:
        assert isinstance(marks, dict)
        await preparation.forget_statements(_endpoint(endpoint), marks)

    async def make_standby(self, server: DatabaseServer, replica: ReplicaSpec) -> None:
        await preparation.make_standby(postgres_server(server), replica)

    async def await_standby(self, server: DatabaseServer, replica: ReplicaSpec) -> None:
        await preparation.await_standby(postgres_server(server), replica)

    def versions(self, server_version: str) -> dict[str, str]:
        import asyncpg

        return {
            **self.harness_versions(),
            "asyncpg": asyncpg.__version__,
            "postgres": server_version,
        }

    def knowledge_corpus(self) -> KnowledgeCorpus:
        """What ``query_knowledge_base`` searches (the PostgreSQL manual, when installed)."""
        return describe_corpus()

    def agent_tools(
        self,
        server: DatabaseServer,
        sc: Scenario,
        database: str,
        clock: ScenarioClock,
        mailbox: Mailbox,
        observations: Observations,
        recorder: ToolRecorder,
    ) -> PostgresAgentTools:
        """The five tool roles (plus the mailbox tools) on the run's primary and, in the
        replica profile, its standby."""
        pg = postgres_server(server)
        endpoint = pg.for_database(database)
        sql = agent_sql_session(sc, endpoint)
        sessions = [sql]
        standby: StandbyToolEnvironment | None = None
        standby_endpoint = pg.standby_for(database)
        if standby_endpoint is not None:
            standby_sql = agent_sql_session(sc, standby_endpoint)
            sessions.append(standby_sql)
            standby = StandbyToolEnvironment(
                endpoint=standby_endpoint,
                instance=pg.cluster.standby if pg.cluster else None,
                sql=standby_sql,
            )
        env = PostgresToolEnvironment(
            endpoint=endpoint,
            clock=clock,
            observations=observations,
            log_line_stamp=log_line_stamp,
            instance=pg.cluster,
            mailbox=mailbox,
            sql=sql,
            standby=standby,
        )
        return PostgresAgentTools(build_tool_catalog(env, recorder), sessions)


__all__ = ["PostgresAgentTools", "PostgresEngine", "ServerRequest", "agent_sql_session"]


#: The engine this package registers (``dbaops.engines`` entry point).
ENGINE = PostgresEngine


def _endpoint(endpoint: object) -> Endpoint:
    if not isinstance(endpoint, Endpoint):
        raise TypeError(f"{type(endpoint).__name__} is not a PostgreSQL endpoint")
    return endpoint
