"""The engine seam: what a database engine provides to the harness.

One :class:`DatabaseEngine` per DBMS, registered by name (:mod:`dbaops.dbms.registry`), gives
the runner everything engine-specific:

- the server lifecycle: :meth:`DatabaseEngine.open_server` starts the embedded server (or
  connects to a user's server by DSN; containers are another lifecycle behind the same call)
  and returns a :class:`DatabaseServer`: connection endpoints, snapshot capture/restore
  (:class:`SnapshotStore`), log files;
- the agent's five tool roles (``execute_sql``, ``query_metrics``, ``manage_instance``,
  ``read_log``, ``query_knowledge_base``): :meth:`DatabaseEngine.agent_tools`, and the
  corpus the knowledge tool searches: :meth:`DatabaseEngine.knowledge_corpus`;
- the metric sampler's queries: :meth:`DatabaseEngine.metric_sampler`;
- the server log's format: :meth:`DatabaseEngine.log_line_stamp`;
- the SQL dialect the safety judge parses: :attr:`DatabaseEngine.dialect`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import polars as pl
from pydantic import BaseModel, Field

from dbaops.clock import ScenarioClock
from dbaops.containers.resources import ServerResources
from dbaops.record.tables import ParquetParts

if TYPE_CHECKING:
    from dbaops.containers.machine import ServerMachine
    from dbaops.dbms.sessions import RunEndpoint
    from dbaops.mailbox import Mailbox
    from dbaops.record.kinds import KnowledgeCorpus
    from dbaops.scenario.model import ReplicaSpec, Scenario
    from dbaops.tools.base import Tool
    from dbaops.tools.recording import ToolRecorder
    from dbaops.workloads.spec import WorkloadLibrary


class ServerRequest(BaseModel):
    """Which server a run wants."""

    name: str = Field(description="the embedded server's name (one per scenario or worker)")
    dsn: str | None = Field(default=None, description="a user's own server instead")
    bindir: Path | None = Field(default=None, description="the engine's binaries")
    backend: Literal["embedded", "docker"] = Field(
        default="embedded",
        description="embedded: a local server process; docker: the same "
        "server inside a container (resource limits, machine-level faults)",
    )
    resources: ServerResources = Field(
        default_factory=ServerResources, description="the container's limits (docker)"
    )
    image: str | None = Field(
        default=None,
        description="docker: a named server image (pulled when missing) instead "
        "of dbaops' own, built from Debian packages",
    )
    snapshot_group: str | None = Field(
        default=None,
        description="servers of one group share their dirty snapshots (the campaign workers "
        "of one scenario); default: the server's own name",
    )


class SnapshotStore(Protocol):
    """A server's dirty snapshots, shared read-only by the servers of one snapshot group."""

    @property
    def root(self) -> Path:
        """The directory of the group's snapshots (one subdirectory per key)."""
        ...

    def has(self, key: str) -> bool: ...

    async def capture(self, key: str) -> float:
        """Copy the server's state into snapshot ``key``; returns seconds."""
        ...

    async def restore(self, key: str) -> float:
        """Replace the server's state with snapshot ``key`` and start it; returns seconds."""
        ...

    def drop(self, key: str) -> None: ...

    def lock(self, *, exclusive: bool) -> AbstractAsyncContextManager[None]:
        """Shared while restoring, exclusive while checking, building and capturing."""
        ...


class InstanceController(Protocol):
    """Server process control; only an embedded server has one."""

    async def start(self) -> None: ...
    async def stop(self, mode: str = "fast") -> None: ...
    async def restart(self) -> None: ...
    async def is_running(self) -> bool: ...
    async def machine_summary(self) -> str | None: ...


class ServerHost(Protocol):
    """The server's machine, for OS-level faults (harness only; never given to an agent)."""

    def edit_config(
        self, file: str, prepend: list[str], append: list[str], comment_out: str | None
    ) -> None: ...
    def signal(self, pid: int, signal_name: str) -> None: ...
    def limit_file_size(self, limit_bytes: int | None) -> None: ...
    async def create_volume(self, name: str, size_mb: int) -> str: ...
    @property
    def machine(self) -> ServerMachine | None: ...


class ServerInstance(InstanceController, Protocol):
    """An embedded server as the harness controls it: its directory and OS user, a fresh
    cluster before a snapshot is built, and the process control of faults and the
    instance tool."""

    @property
    def root(self) -> Path:
        """The server's directory."""
        ...

    @property
    def os_user(self) -> str | None:
        """The OS user the server runs as (None: the harness's own)."""
        ...

    async def reinitialize(self) -> None:
        """An empty cluster, as initdb (or the engine's first start) leaves it."""
        ...

    def resume_stopped(self) -> None:
        """Resume a server a fault left stopped (SIGSTOP), so it can be shut down."""
        ...


class DatabaseServer(Protocol):
    """A running server of one run: embedded (with instance control and snapshots) or
    external (a user's server: neither)."""

    @property
    def kind(self) -> str:
        """``embedded`` or ``external``."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the run header records about the server."""
        ...

    async def server_version(self) -> str: ...

    @property
    def admin(self) -> RunEndpoint:
        """The harness's endpoint on the server (its maintenance database)."""
        ...

    def for_database(self, database: str) -> RunEndpoint:
        """The connection endpoint of ``database`` on this server."""
        ...

    def standby_for(self, database: str) -> RunEndpoint | None:
        """The endpoint of ``database`` on the standby (None: the server has none)."""
        ...

    @property
    def cluster(self) -> ServerInstance | None:
        """The embedded server's control (None: a user's server)."""
        ...

    @property
    def host(self) -> ServerHost | None:
        """The server's machine for OS-level faults (None: not reachable, or not yet)."""
        ...

    @property
    def standby_instance(self) -> InstanceController | None:
        """The standby's process control (None: no standby, or not embedded)."""
        ...

    @property
    def standby_host(self) -> ServerHost | None:
        """The standby's machine for OS-level faults (None: no standby)."""
        ...

    @property
    def snapshots(self) -> SnapshotStore | None:
        """The server's snapshot store (None: the server cannot be snapshotted)."""
        ...

    def log_files(self) -> dict[str, Path]:
        """The server's own log file per server of the run (``primary``, ``standby``);
        empty when the server's log is not reachable (an external server)."""
        ...

    async def close(self) -> None:
        """Stop what the run started and release the server."""
        ...


class MetricSource(Protocol):
    """A metric sampler a run starts: samples into Parquet parts, with an in-memory view."""

    #: The successful samples so far.
    samples: int

    async def run(self) -> None: ...

    def snapshot(self) -> pl.DataFrame:
        """Every row sampled so far (history included)."""
        ...

    def seed(self, frame: pl.DataFrame) -> None:
        """Take in the metrics of the workload history before the run."""
        ...


class AgentTools(Protocol):
    """The agent's tool catalog on one run's servers, with the sessions behind it."""

    @property
    def catalog(self) -> dict[str, Tool]: ...

    async def open(self) -> None:
        """Connect the agent's session before the faults start (as a DBA's psql would be)."""
        ...

    async def begin(self) -> None:
        """The agent starts now (after the warm-up and the manifestation checks): drop what
        the server's statement statistics hold of the harness's own statements, where its
        sessions cannot be kept out of them (their SQL is scenario internals)."""
        ...

    async def close(self) -> None: ...


@dataclass
class Observations:
    """What the agent's read-only tools observe, as the engine and the harness expose it
    (never by opening files in the run directory)."""

    metrics: Callable[[], pl.DataFrame]
    samples: Callable[[], pl.DataFrame]
    server_logs: dict[str, Callable[[], list[str]]] = field(default_factory=dict)


class DatabaseEngine(ABC):
    """One database engine (PostgreSQL, TiDB, ...)."""

    #: The name scenarios give in ``engine:``.
    name: ClassVar[str]
    #: The SQL dialect of the safety judge's front end.
    dialect: ClassVar[str]

    @abstractmethod
    async def open_server(
        self, request: ServerRequest, progress: Callable[[str], None] | None = None
    ) -> DatabaseServer:
        """Start (or connect to) the server a run uses; ``progress`` hears about long steps
        (an image build)."""

    @abstractmethod
    async def build_fixture(
        self,
        server: DatabaseServer,
        library: WorkloadLibrary,
        params: dict[str, int],
        seed: int,
        date: str,
    ) -> float:
        """(Re)create ``library``'s fixture database on ``server`` from scratch: its roles,
        schema, seeded data and indexes, the SQL rendered with ``params``, ``seed`` and the
        scenario's ``date``; returns seconds taken."""

    @abstractmethod
    async def apply_server_settings(self, server: DatabaseServer, settings: dict[str, str]) -> None:
        """Scenario server settings (``database.settings``) on an embedded ``server``, kept in
        the snapshot (a restart where the engine needs one)."""

    async def statement_marks(self, endpoint: RunEndpoint) -> object | None:
        """What the server's statement statistics hold before construction, for
        :meth:`forget_statements` (None: the engine's statistics need no such care)."""
        return None

    async def forget_statements(self, endpoint: RunEndpoint, marks: object) -> None:
        """Take what ran since ``marks`` out of the statistics the snapshot keeps (the
        construction's statements are scenario internals)."""
        del endpoint, marks  # nothing to forget by default

    async def make_standby(self, server: DatabaseServer, replica: ReplicaSpec) -> None:
        """The replica profile's standby of ``server`` (engines whose capabilities declare a
        replica implement it)."""
        raise NotImplementedError(f"{self.name} has no standby")

    async def await_standby(self, server: DatabaseServer, replica: ReplicaSpec) -> None:
        """Wait until the standby streams and has replayed what the primary wrote."""
        raise NotImplementedError(f"{self.name} has no standby")

    @abstractmethod
    def metric_sampler(
        self,
        server: DatabaseServer,
        database: str,
        clock: ScenarioClock,
        parts: ParquetParts,
        agent_role: str | None = None,
        interval_s: float = 1.0,
    ) -> MetricSource:
        """The harness's metric sampler of ``database`` (hidden from the agent), sampling every
        ``interval_s`` scenario seconds; with ``agent_role``, where the engine can tell, how
        many sessions wait on the agent's locks (``locks.blocked_by_agent``, for the judge
        only)."""

    def release_cluster_dir(self, path: Path) -> list[str]:
        """Before ``dbaops clean`` removes the cluster directory ``path`` (a killed run's,
        perhaps): stop what of this engine still runs there and undo what it mounted or
        created for it; what was done, in words (nothing by default)."""
        return []

    def log_line_stamp(self, line: str) -> tuple[float, int] | None:
        """The wall time and process id of a server log line (None: a continuation line), as
        the engine's dialect reads it."""
        from dbaops.dbms.dialect import engine_dialect

        return engine_dialect(self.name).log_line_stamp(line)

    @abstractmethod
    def versions(self, server_version: str) -> dict[str, str]:
        """The versions the run header records (the server's and the harness's)."""

    @staticmethod
    def harness_versions() -> dict[str, str]:
        """The versions every engine's run header records: dbaops, Python, polars."""
        import platform

        import polars

        import dbaops

        return {
            "dbaops": dbaops.__version__,
            "python": platform.python_version(),
            "polars": polars.__version__,
        }

    @abstractmethod
    def knowledge_corpus(self) -> KnowledgeCorpus:
        """What the engine's ``query_knowledge_base`` searches (recorded in the run header)."""

    @abstractmethod
    def agent_tools(
        self,
        server: DatabaseServer,
        sc: Scenario,
        database: str,
        clock: ScenarioClock,
        mailbox: Mailbox,
        observations: Observations,
        recorder: ToolRecorder,
    ) -> AgentTools:
        """The five tool roles on ``server`` (plus the mailbox tools), recorded by
        ``recorder``."""
