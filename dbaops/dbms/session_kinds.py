"""How an engine's sessions are handled by the runner, declared by each engine in its
package's ``sessions`` module (``SESSIONS``) and gathered by :mod:`dbaops.dbms.sessions`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from dbaops.dbms.plans import PlanNode

#: Isolation levels a scenario may name, as SQL.
ISOLATION = {
    "read_committed": "READ COMMITTED",
    "repeatable_read": "REPEATABLE READ",
    "serializable": "SERIALIZABLE",
}
ISOLATION_LEVELS = tuple(ISOLATION)


@dataclass(frozen=True)
class SessionDialect:
    """The few statements the runner's actors phrase per engine."""

    #: The ids of every session the server has.
    session_ids_sql: str
    #: ``BEGIN`` at an isolation level, as statements to run in order.
    begin: Callable[[str], list[str]]
    #: A statement that sleeps this many wall seconds on the server.
    sleep: Callable[[float], str]
    #: An expression counting the rows stored in table (schema, name) itself, not in the
    #: tables that inherit from it, with nothing resolved through the search path and no
    #: code run.
    count_rows: Callable[[str, str], str]
    #: A statement setting a session setting (the name already checked) to a value.
    set_setting: Callable[[str, str], str]
    #: The database the harness's server-wide statements connect to (None: the endpoint's).
    maintenance_database: str | None = None
    #: The application name the harness's sessions carry ("" where the engine has none).
    harness_application: str = ""
    #: Statements changing a server setting (the name already checked) persistently, and
    #: making the server read its configuration again (None: the engine has neither).
    set_server_setting: Callable[[str, str], str] | None = None
    reload_config: str | None = None
    #: The server's configuration file (in its directory) that ``edit_config`` faults and
    #: scaled timers append ``name = 'value'`` lines to (None: the engine has none).
    config_file: str | None = None
    #: A statement creating tablespace ``name`` (owned by a role, or None) at a directory.
    create_tablespace: Callable[[str, str | None, str], str] | None = None
    #: The server processes of a backend type, oldest first, as rows (pid, started), with
    #: parameters: backend type, application name or NULL, role or NULL, and the harness's
    #: application name (its own sessions are never chosen). None: not on this engine.
    server_processes_sql: str | None = None


@dataclass(frozen=True)
class EngineSessions:
    """An engine's sessions: their classes, their statements, the errors they raise."""

    #: The classes of the engine's session objects.
    session_types: tuple[type, ...]
    #: The engine's endpoint (a pydantic model with an ``engine`` field naming the engine).
    endpoint_type: type[BaseModel]
    #: The statements the runner phrases in the engine's SQL.
    dialect: SessionDialect
    #: A statement the server refused (each has a ``sqlstate``: PostgreSQL's SQLSTATE, or
    #: TiDB's error number as text).
    server_errors: tuple[type[BaseException], ...]
    #: The session is gone (reconnect if it should).
    connection_errors: tuple[type[BaseException], ...]
    #: Server errors that also mean the connection is unusable.
    lost_server_errors: tuple[type[BaseException], ...] = ()
    #: How the workloads' hot path runs a prepared statement of a session: ``(session,
    #: statement) -> run(args) -> rows`` (None: the statement's own ``fetch``).
    prepared_executor: (
        Callable[[Any, Any], Callable[[Sequence[Any]], Awaitable[list[Any]]]] | None
    ) = None
    #: Errors meaning a prepared statement's result type changed (ALTER TABLE): prepare again.
    stale_statement_errors: tuple[type[BaseException], ...] = ()
    #: The plan of a query on a session, read into plan nodes (``(session, sql, analyze)``;
    #: analyze runs the query and rolls back what it wrote). None: no plan checks.
    explain: Callable[[Any, str, bool], Awaitable[list[PlanNode]]] | None = None
    #: The server fills a prepared statement's arguments itself (else: the client does, in
    #: the engine's literals, whatever the workload's protocol).
    server_side_prepare: bool = True
