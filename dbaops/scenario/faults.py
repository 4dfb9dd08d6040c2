"""Fault parts: what a scenario does to the database (construction, activation, events).

Each part is a pydantic model with a ``kind`` discriminator, so a scenario file that names an
unknown fault fails at load time with the known alternatives.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from dbaops.containers.machine import PartitionMode
from dbaops.workloads.spec import StrictModel

#: Which server a part acts on: the primary, or the replica profile's standby.
Server = Literal["primary", "standby"]


class _Fault(StrictModel):
    """What every fault has: the server it acts on, and whether it is a live actor (it runs
    beside the event program until its duration ends) or one-shot (in place when it returns)."""

    live: ClassVar[bool] = False
    #: Only a server in a container can suffer it (a scenario using it declares
    #: ``backend: docker``).
    needs_container: ClassVar[bool] = False
    server: Server = "primary"


class SqlFault(_Fault):
    """Run SQL once as a role (e.g. a bad ALTER, a batch update)."""

    kind: Literal["sql"] = "sql"
    role: str = "postgres"
    database: str | None = None  # default: the fixture database
    application_name: str = "psql"
    sql: str
    in_transaction: bool = False
    settings: dict[str, str] = Field(
        default_factory=dict,
        description="session settings (SET name = value) before the statement, e.g. the "
        "lock_timeout an interrupted migration ran with",
    )
    expect_sqlstate: str | None = Field(
        default=None,
        pattern=r"^[0-9A-Z]{4,5}$",
        description="the statement must fail with this SQLSTATE (TiDB: error number), as the "
        "incident's did (55P03: a lock timeout cut it off); the step fails if it succeeds or "
        "fails otherwise",
    )

    @model_validator(mode="after")
    def _setting_names(self) -> SqlFault:
        bad = [n for n in self.settings if not re.fullmatch(r"[a-z_][a-z0-9_.]*", n)]
        if bad:
            raise ValueError(f"settings: {bad} are not setting names")
        return self


class HoldTransaction(_Fault):
    """A session that opens a transaction, runs statements, then holds it (locks, snapshot).

    ``duration_s`` is scenario time (None: until the end of the run). ``idle`` keeps the session
    idle in transaction; otherwise it sits in ``pg_sleep`` (an active long transaction).
    """

    kind: Literal["hold_transaction"] = "hold_transaction"
    live: ClassVar[bool] = True
    role: str = "postgres"
    database: str | None = None
    application_name: str
    isolation: Literal["read_committed", "repeatable_read", "serializable"] = "read_committed"
    statements: list[str] = Field(default_factory=list)
    duration_s: float | None = None
    idle: bool = True
    finish: Literal["commit", "rollback"] = "rollback"
    protected: bool = False


class LoadActor(_Fault):
    """Background load: ``sessions`` loops running ``statements`` for ``duration_s``."""

    kind: Literal["load"] = "load"
    live: ClassVar[bool] = True
    role: str = "postgres"
    database: str | None = None
    application_name: str = "psql"
    statements: list[str] = Field(min_length=1)
    sessions: int = Field(default=1, ge=1, le=100)
    pause_ms: float = Field(default=0, ge=0)
    duration_s: float | None = None
    protected: bool = False
    reconnect: bool = Field(
        default=False,
        description="a lost session (server restart, terminated backend) reconnects every "
        "wall second and goes on, as a service would; each new session is on record",
    )
    crash_expected: bool = Field(
        default=False,
        description="its sessions are the fault: the server may crash because of them (the "
        "kernel's OOM killer kills one); a crash of one of its sessions is the scenario's, "
        "not the agent's, and does not fail the run's verdicts",
    )


class IdleConnections(_Fault):
    """Open ``count`` idle sessions as a role and keep them (connection pressure)."""

    kind: Literal["idle_connections"] = "idle_connections"
    live: ClassVar[bool] = True
    role: str
    database: str | None = None
    application_name: str = "psql"
    count: int = Field(ge=1, le=500)
    duration_s: float | None = None
    reconnect: bool = Field(
        default=False, description="reopen lost connections every second (a misbehaving pool)"
    )


class SetSetting(_Fault):
    """ALTER SYSTEM SET name = value, then reload (or restart when ``restart``)."""

    kind: Literal["set_setting"] = "set_setting"
    name: str
    value: str
    restart: bool = False


class InstanceControl(_Fault):
    """Stop, start or restart the server (embedded backend only)."""

    kind: Literal["instance"] = "instance"
    action: Literal["stop", "start", "restart"]


class EditConfig(_Fault):
    """Edit a configuration file in the data directory as an operator's hand edit would
    (embedded backend only): comment out lines matching ``comment_out``, add ``prepend`` lines
    at the top (``pg_hba.conf`` is first-match) and ``append`` lines at the end, then reload,
    restart or leave the server alone. The harness connects as ``postgres`` over loopback: an
    ``pg_hba.conf`` edit should name the roles it means."""

    kind: Literal["edit_config"] = "edit_config"
    file: Literal["postgresql.conf", "pg_hba.conf"]
    append: list[str] = Field(default_factory=list)
    prepend: list[str] = Field(default_factory=list)
    comment_out: str | None = Field(default=None, description="regex of lines to comment out")
    then: Literal["reload", "restart", "nothing"] = "reload"


class SignalProcess(_Fault):
    """Send an OS signal to server processes (embedded backend only): ``KILL`` crashes one (a
    killed backend or auxiliary process makes the postmaster restart every session), ``STOP``
    freezes it (it holds its locks and answers no cancel), ``CONT`` resumes it, ``TERM`` ends a
    backend. Processes are chosen by ``backend_type`` (as in ``pg_stat_activity``) and, for
    client backends, ``application_name`` and ``role``; ``every`` signals all matches, else
    the oldest."""

    kind: Literal["signal_process"] = "signal_process"
    signal: Literal["KILL", "TERM", "STOP", "CONT", "QUIT", "INT"]
    backend_type: str = "client backend"
    application_name: str | None = None
    role: str | None = None
    every: bool = False


class FileSizeLimit(_Fault):
    """Restart the server under a file-size limit (RLIMIT_FSIZE; embedded backend only): no
    file it writes, a table or index segment, a temporary file, may grow past ``mb``, and
    writes that need more fail with "could not extend file …: File too large" (SQLSTATE
    XX000, HINT: check free disk space) while the server keeps running: a table that cannot
    grow, as on a full volume. It holds for the rest of the run (an agent's restart keeps
    it); ``mb: null`` lifts it. WAL segments (16 MB) and the log must fit, hence at least 32."""

    kind: Literal["file_size_limit"] = "file_size_limit"
    mb: int | None = Field(ge=32, description="the limit in MiB (null: none)")


class TablespaceVolume(_Fault):
    """A tablespace on a small filesystem of its own (embedded backend, dbaops as root): an
    ext4 image of ``size_mb`` MiB, loop-mounted, as a cheap volume would be. Whatever the
    scenario puts there can fill it for real: writes then fail with "could not extend file …:
    No space left on device" (SQLSTATE 53100) while the server, whose data directory and WAL
    are elsewhere, keeps running. Snapshots carry the volume; a run's end unmounts it. The
    primary only, and not with a replica profile (one host: one location for both)."""

    kind: Literal["tablespace_volume"] = "tablespace_volume"
    name: str = Field(pattern=r"^[a-z_][a-z0-9_]{0,62}$", description="the tablespace's name")
    size_mb: int = Field(ge=8, le=4096)
    owner: str | None = Field(default=None, description="the tablespace's owner role")
    server: Literal["primary"] = "primary"


class Freeze(_Fault):
    """Freeze the server's machine (docker backend): the cgroup freezer stops scheduling every
    process of the server (``docker pause``) for ``duration_s`` (None: until the run ends).
    Sessions keep their sockets open and answer nothing; clients time out; the server logs
    nothing, because nothing in it runs."""

    kind: Literal["freeze"] = "freeze"
    live: ClassVar[bool] = True
    needs_container: ClassVar[bool] = True
    duration_s: float | None = Field(default=None, gt=0)


class Crash(_Fault):
    """Crash the server's machine (docker backend): every process of the server is killed at
    once (SIGKILL to its container), as in a power loss; nothing is flushed or logged. The
    server stays down until someone starts it (``restart_after_s``: a supervisor starts it
    that long after), and its next start runs crash recovery."""

    kind: Literal["crash"] = "crash"
    live: ClassVar[bool] = True  # with restart_after_s it waits beside the program
    needs_container: ClassVar[bool] = True
    restart_after_s: float | None = Field(default=None, ge=0)


class CpuLimit(_Fault):
    """Change the CPU limit of the server's container (docker backend) for the rest of the
    run, restarts included: a noisy neighbour or a smaller instance class. ``cpus: null``
    gives back the scenario's own limit."""

    kind: Literal["cpu_limit"] = "cpu_limit"
    needs_container: ClassVar[bool] = True
    cpus: float | None = Field(gt=0, le=256)


class Partition(_Fault):
    """A network partition between the standby and its primary (docker backend, replica
    profile) for ``duration_s`` (None: until the run ends). ``drop`` loses their packets in the
    standby's network namespace: neither side hears a reset, each waits for its own timeouts
    (``wal_receiver_timeout``, ``wal_sender_timeout``, TCP keepalives), while the harness
    still reaches both. ``disconnect`` takes the standby's network link away: connections to
    the primary fail at once, and the standby is unreachable until it heals."""

    kind: Literal["partition"] = "partition"
    live: ClassVar[bool] = True
    needs_container: ClassVar[bool] = True
    server: Literal["standby"] = "standby"
    mode: PartitionMode = "drop"
    duration_s: float | None = Field(default=None, gt=0)


FaultSpec = Annotated[
    SqlFault
    | HoldTransaction
    | LoadActor
    | IdleConnections
    | SetSetting
    | InstanceControl
    | EditConfig
    | SignalProcess
    | FileSizeLimit
    | TablespaceVolume
    | Freeze
    | Crash
    | CpuLimit
    | Partition,
    Field(discriminator="kind"),
]
