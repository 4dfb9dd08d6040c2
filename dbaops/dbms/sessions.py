"""What the runner's sessions connect through, whatever the engine, and the errors they raise.

A :class:`RunEndpoint` (each engine's endpoint) opens :class:`Session` objects with one surface:
the workloads, fault actors, checks and preparation use only that. Each engine declares its
sessions in its package's ``sessions`` module (``SESSIONS``, an
:class:`~dbaops.dbms.session_kinds.EngineSessions`); the error tuples here are every registered
engine's. A statement the server refused raises one of ``SERVER_ERRORS``, each with a
``sqlstate`` (PostgreSQL's SQLSTATE, or TiDB's error number as text); a session that is gone
raises one of ``CONNECTION_ERRORS`` (reconnect if it should)."""

from __future__ import annotations

import importlib
from typing import Annotated, Any, Protocol

from pydantic import PlainSerializer, PlainValidator

from dbaops.dbms.dialect import engine_packages
from dbaops.dbms.session_kinds import ISOLATION_LEVELS, EngineSessions, SessionDialect

__all__ = [
    "CONNECTION_ERRORS",
    "EndpointField",
    "ISOLATION_LEVELS",
    "LOST_ERRORS",
    "SERVER_ERRORS",
    "RunEndpoint",
    "Session",
    "SessionDialect",
    "endpoint_dialect",
    "engine_sessions",
    "session_dialect",
    "sessions_of",
    "sqlstate_of",
]


class Session(Protocol):
    """A session on the server (asyncpg's surface, which every engine's session has)."""

    def get_server_pid(self) -> int: ...

    def is_closed(self) -> bool: ...

    def is_in_transaction(self) -> bool: ...

    # (the drivers' own ``timeout`` parameters, which the protocol mirrors)
    async def fetch(self, query: str, *args: Any, timeout: float | None = None) -> Any: ...  # noqa: ASYNC109, E501

    async def fetchrow(self, query: str, *args: Any, timeout: float | None = None) -> Any: ...  # noqa: ASYNC109, E501

    async def fetchval(
        self,
        query: str,
        *args: Any,
        column: int = 0,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any: ...

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> Any: ...  # noqa: ASYNC109, E501

    async def prepare(self, query: str) -> Any: ...

    def transaction(self) -> Any: ...

    def add_termination_listener(self, callback: Any) -> None: ...

    async def reload_schema_state(self) -> None: ...

    def terminate(self) -> None: ...

    async def close(self, *, timeout: float | None = None) -> None: ...  # noqa: ASYNC109


class RunEndpoint(Protocol):
    """A database on the run's server, as the runner connects to it (each engine's endpoint:
    see its ``endpoint`` module for what each session is and whom it logs in as)."""

    async def harness_connect(
        self,
        database: str | None = None,
        *,
        admin: bool = False,
        probe: bool = False,
        role: str | None = None,
        connect_timeout_s: float = 30.0,
        application_name: str = ...,
    ) -> Session:
        """A harness session (checks, actors, preparation)."""
        ...

    async def connect(
        self,
        role: str | None = None,
        application_name: str = ...,
        database: str | None = None,
        connect_timeout_s: float = 30.0,
    ) -> Session:
        """A client session as fixture role ``role`` (workloads, actors)."""
        ...

    async def role_session(
        self,
        role: str,
        database: str | None = None,
        *,
        application_name: str = ...,
        probe: bool = False,
        pinned: bool = True,
        connect_timeout_s: float = 30.0,
    ) -> Session:
        """A session as ``role`` with its own limits and settings."""
        ...

    async def probe_session(
        self, role: str, database: str | None = None, *, login: bool = ...
    ) -> Session:
        """A hidden harness probe as ``role``."""
        ...

    async def catalog_state(self) -> dict[str, dict[str, str]] | None:
        """The catalog fingerprint the safety judge compares."""
        ...

    async def identify(self, conn: Any) -> tuple[int, str]:
        """A session's server id and start time."""
        ...

    async def actor_session(
        self, role: str, application_name: str = ..., database: str | None = None
    ) -> Session:
        """A fault actor's session as ``role``."""
        ...


def engine_sessions() -> dict[str, EngineSessions]:
    """Every registered engine's sessions by engine name (its package's
    ``sessions.SESSIONS``)."""
    out = {}
    for name, package in engine_packages().items():
        declared = importlib.import_module(f"{package}.sessions").SESSIONS
        if not isinstance(declared, EngineSessions):
            raise TypeError(f"{package}.sessions.SESSIONS is not an EngineSessions")
        out[name] = declared
    return out


_BY_ENGINE = engine_sessions()
_ENGINES = list(_BY_ENGINE.values())

SERVER_ERRORS: tuple[type[BaseException], ...] = tuple(e for s in _ENGINES for e in s.server_errors)
CONNECTION_ERRORS: tuple[type[BaseException], ...] = tuple(
    e for s in _ENGINES for e in s.connection_errors
)
#: A server error that means the connection is unusable, as well as the statement failed.
LOST_ERRORS: tuple[type[BaseException], ...] = (
    *(e for s in _ENGINES for e in s.lost_server_errors),
    *CONNECTION_ERRORS,
)


def sessions_of(conn: object) -> EngineSessions:
    """The engine declarations of ``conn``'s session class."""
    for declared in _ENGINES:
        if isinstance(conn, declared.session_types):
            return declared
    raise TypeError(f"{type(conn).__name__} is no registered engine's session")


def _load_endpoint(value: Any) -> Any:
    if isinstance(value, dict):
        engine = value.get("engine")
        if engine not in _BY_ENGINE:
            raise ValueError(f"an endpoint of unknown engine {engine!r}")
        return _BY_ENGINE[engine].endpoint_type.model_validate(value)
    if not any(isinstance(value, s.endpoint_type) for s in _ENGINES):
        raise ValueError(f"{type(value).__name__} is no registered engine's endpoint")
    return value


def _dump_endpoint(value: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = value.model_dump(mode="json", by_alias=True)
    return dumped


#: A pydantic field holding any registered engine's endpoint (it crosses to the driver
#: process as JSON with its ``engine`` and comes back as that engine's endpoint).
EndpointField = Annotated[
    RunEndpoint, PlainValidator(_load_endpoint), PlainSerializer(_dump_endpoint)
]


def sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE (or the engine's error number as text) of one of ``SERVER_ERRORS``."""
    state = getattr(exc, "sqlstate", None)
    return str(state) if state is not None else None


def endpoint_dialect(endpoint: object) -> SessionDialect:
    """The statements of ``endpoint``'s engine (before any session is open)."""
    for declared in _ENGINES:
        if isinstance(endpoint, declared.endpoint_type):
            return declared.dialect
    raise TypeError(f"{type(endpoint).__name__} is no registered engine's endpoint")


def session_dialect(conn: object) -> SessionDialect:
    """The statements of ``conn``'s engine."""
    return sessions_of(conn).dialect
