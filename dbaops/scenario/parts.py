"""Reusable, parameterised scenario parts: faults/actors and checks.

Each part is a pydantic model with a ``kind`` (faults) or ``check`` (checks) discriminator, so a
scenario file that names an unknown part fails at load time with the known alternatives.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from dbaops.workloads.spec import StrictModel


class SqlFault(StrictModel):
    """Run SQL once as a role (e.g. a bad ALTER, a batch update)."""

    kind: Literal["sql"] = "sql"
    role: str = "postgres"
    database: str | None = None  # default: the fixture database
    application_name: str = "psql"
    sql: str
    in_transaction: bool = False


class HoldTransaction(StrictModel):
    """A session that opens a transaction, runs statements, then holds it (locks, snapshot).

    ``duration_s`` is scenario time (None: until the end of the run). ``idle`` keeps the session
    idle in transaction; otherwise it sits in ``pg_sleep`` (an active long transaction).
    """

    kind: Literal["hold_transaction"] = "hold_transaction"
    role: str = "postgres"
    database: str | None = None
    application_name: str
    isolation: Literal["read_committed", "repeatable_read", "serializable"] = "read_committed"
    statements: list[str] = Field(default_factory=list)
    duration_s: float | None = None
    idle: bool = True
    finish: Literal["commit", "rollback"] = "rollback"
    protected: bool = False


class LoadActor(StrictModel):
    """Background load: ``sessions`` loops running ``statements`` for ``duration_s``."""

    kind: Literal["load"] = "load"
    role: str = "postgres"
    database: str | None = None
    application_name: str = "psql"
    statements: list[str] = Field(min_length=1)
    sessions: int = Field(default=1, ge=1, le=100)
    pause_ms: float = Field(default=0, ge=0)
    duration_s: float | None = None
    protected: bool = False


class IdleConnections(StrictModel):
    """Open ``count`` idle sessions as a role and keep them (connection pressure)."""

    kind: Literal["idle_connections"] = "idle_connections"
    role: str
    database: str | None = None
    application_name: str = "psql"
    count: int = Field(ge=1, le=500)
    duration_s: float | None = None
    reconnect: bool = Field(
        default=False, description="reopen lost connections every second (a misbehaving pool)"
    )


class SetSetting(StrictModel):
    """ALTER SYSTEM SET name = value, then reload (or restart when ``restart``)."""

    kind: Literal["set_setting"] = "set_setting"
    name: str
    value: str
    restart: bool = False


class InstanceControl(StrictModel):
    """Stop, start or restart the server (embedded backend only)."""

    kind: Literal["instance"] = "instance"
    action: Literal["stop", "start", "restart"]


FaultSpec = Annotated[
    SqlFault | HoldTransaction | LoadActor | IdleConnections | SetSetting | InstanceControl,
    Field(discriminator="kind"),
]


# -- checks ------------------------------------------------------------------------------------
Comparison = Literal["==", "!=", ">", ">=", "<", "<="]


class SqlCheck(StrictModel):
    """A SQL query returning one value compared with ``expect`` (default: true)."""

    check: Literal["sql"] = "sql"
    name: str
    sql: str
    role: str = "postgres"
    login: bool = Field(
        default=False,
        description="log in as ``role`` (its per-role settings apply) instead of SET ROLE",
    )
    database: str | None = None
    op: Comparison = "=="
    expect: Any = True
    by_s: float | None = Field(
        default=None, ge=0, description="terminal checks: must also hold at this scenario time"
    )
    description: str = ""


class WorkloadCheck(StrictModel):
    """A statistic of a workload's recent SLO samples compared with a value.

    ``stat``: p50_ms, p95_ms, p99_ms (over completed units: on time or late; errors and drops
    are separate statistics), on_time_ratio, error_ratio, drop_ratio, miss_ratio (anything not
    on time), count. ``over_s``: the trailing scenario-time window the statistic covers.
    """

    check: Literal["workload"] = "workload"
    name: str
    workload: str
    stat: Literal[
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "on_time_ratio",
        "error_ratio",
        "drop_ratio",
        "miss_ratio",
        "count",
    ]
    op: Comparison
    value: float
    over_s: float = 10.0
    by_s: float | None = Field(
        default=None, ge=0, description="terminal checks: must also hold at this scenario time"
    )
    description: str = ""


CheckSpec = Annotated[SqlCheck | WorkloadCheck, Field(discriminator="check")]


def compare(observed: Any, op: Comparison, expected: Any) -> bool:
    """Apply a comparison; None never satisfies an ordering."""
    if op == "==":
        return bool(observed == expected)
    if op == "!=":
        return bool(observed != expected)
    if observed is None or expected is None:
        return False
    if op == ">":
        return bool(observed > expected)
    if op == ">=":
        return bool(observed >= expected)
    if op == "<":
        return bool(observed < expected)
    return bool(observed <= expected)
