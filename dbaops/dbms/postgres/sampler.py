"""Metric sampler: what a DBA would chart, sampled every scenario second into a long table.

Storage
    Long format, :data:`METRIC_SCHEMA` = ``t_s`` (Float64 scenario seconds of the sample),
    ``metric`` (String, dotted name), ``label`` (String, ``key=value[,key=value]`` or ``""``),
    ``value`` (Float64). Written as ``metrics/part-*.parquet`` by :class:`MetricSampler` through
    a :class:`~dbaops.record.tables.ParquetParts` sink; read back with
    :func:`dbaops.record.tables.read_metrics`.

Kinds (registry: :data:`REGISTRY`, name -> :class:`MetricSpec` with kind, unit, description)
    ``counter``  cumulative value exactly as PostgreSQL reports it. :func:`query_series` with
                 ``rate=True`` turns it into per-second rates (a decrease counts as a reset).
    ``gauge``    level at the sample instant.
    ``delta``    increment since the previous successful sample (only ``statements.*``, where
                 cumulative values per query are kept by the sampler and only the top-N queries
                 by execution time of each sample are written).

Metrics (label key in braces; ``*`` = counter, ``+`` = delta, others gauges)
    db.*                 sampled database: xact_commit* xact_rollback* blks_read* blks_hit*
                         tup_returned* tup_fetched* tup_inserted* tup_updated* tup_deleted*
                         conflicts* temp_files* temp_bytes* deadlocks* blk_read_time_ms*
                         blk_write_time_ms* session_time_ms* active_time_ms*
                         idle_in_transaction_time_ms* sessions* sessions_abandoned*
                         sessions_fatal* sessions_killed*, numbackends size_bytes xid_age mxid_age
    activity.*           cluster-wide client backends, the sampler excluded: count{state}
                         waiting{wait_event_type} connections max_connections oldest_xact_age_s
                         oldest_query_age_s oldest_idle_in_xact_s oldest_xmin_age_xids
                         autovacuum_workers parallel_workers prepared_xacts
                         oldest_prepared_xact_age_s
    locks.*              cluster-wide: granted{mode} waiting{mode} waiting_by_type{locktype}
                         waiting_relation{table} oldest_wait_s, blocked_by_agent (with the
                         agent's role: sessions waiting on the agent's locks)
    table.*{table}       top-N user tables of the sampled database by live+dead rows, then
                         scans: size_bytes n_live_tup n_dead_tup n_mod_since_analyze
                         n_ins_since_vacuum last_{vacuum,autovacuum,analyze,autoanalyze}_age_s,
                         seq_scan* seq_tup_read* idx_scan* idx_tup_fetch* n_tup_ins* n_tup_upd*
                         n_tup_del* n_tup_hot_upd* vacuum_count* autovacuum_count*
                         analyze_count* autoanalyze_count*
    vacuum.progress{table}  running vacuums, heap blocks scanned / total
    statements.*{queryid,tag}  pg_stat_statements of the sampled database, top-N by execution
                         time per sample: calls+ total_exec_ms+ rows+ shared_blks_hit+
                         shared_blks_read+ io_read_ms+, mean_ms (gauge). ``queryid`` is the
                         8-hex-digit prefix of ``to_hex(queryid)``; ``tag`` comes from a
                         ``/*q:tag*/`` comment in the query text, when present
    wal.*                bytes* (LSN position) records* fpi* buffers_full*
    checkpoint.*         timed* requested* write_ms* sync_ms* buffers_written*
    bgwriter.*           buffers_clean* maxwritten_clean* buffers_alloc*
                         buffers_backend* buffers_backend_fsync* (PG <= 16)
    io.*{backend_type}   PG 16+ pg_stat_io summed over objects/contexts: reads* writes*
                         extends* hits* evictions* fsyncs*
    archiver.*           archived* failed* ready_files
    replication.*        lag_bytes{app} write_lag_s{app} flush_lag_s{app} replay_lag_s{app}
                         slot_retained_bytes{slot} slot_active{slot} slot_xmin_age_xids{slot}
                         replay_delay_s (standby only)
    server.uptime_s, sampler.up (1 per sample, 0 per failed attempt = a gap), sampler.duration_ms

Fixed label domains (activity states, wait event types, lock modes) are written with zeros on
every sample; other labelled series appear only while they exist.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import asyncpg
import polars as pl
import structlog

from dbaops.clock import ScenarioClock
from dbaops.dbms.metric_spec import MetricKind, MetricSpec
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.metrics import REGISTRY
from dbaops.dbms.postgres.metrics_sql import (
    SAMPLER_APPLICATION_NAME,
    Capabilities,
    build_sample_sql,
    build_tag_sql,
    probe,
)
from dbaops.execution.metrics_query import (
    MetricInfo,
    UnknownMetricError,
    format_metric_list,
    format_series,
    list_metrics,
    query_series,
)
from dbaops.execution.metrics_registry import metric_kind
from dbaops.record.metric_rows import MetricRows
from dbaops.record.tables import ParquetParts

__all__ = [
    "REGISTRY",
    "SAMPLER_APPLICATION_NAME",
    "ConnectionFactory",
    "MetricInfo",
    "MetricKind",
    "MetricSampler",
    "MetricSpec",
    "UnknownMetricError",
    "format_metric_list",
    "format_series",
    "list_metrics",
    "metric_kind",
    "query_series",
    "short_queryid",
]

log = structlog.get_logger(__name__)

ConnectionFactory = Callable[[], Awaitable[asyncpg.Connection]]

#: pg_stat_statements counters per query: calls, total_ms, rows, blks_hit, blks_read, io_ms.
_PgssRow = tuple[float, float, float, float, float, float]
_STATEMENT_METRICS = (
    "statements.calls",
    "statements.total_exec_ms",
    "statements.rows",
    "statements.shared_blks_hit",
    "statements.shared_blks_read",
    "statements.io_read_ms",
)
# Best effort: keep the sampler out of the server log and out of pg_stat_statements.
_QUIET_SETTINGS = (
    ("log_min_duration_statement", "-1"),
    ("log_statement", "none"),
    ("auto_explain.log_min_duration", "-1"),
    ("pg_stat_statements.track", "none"),
)


def short_queryid(queryid: int) -> str:
    """First 8 digits of ``to_hex(queryid)`` (PostgreSQL's rendering of the int64)."""
    return format(queryid & 0xFFFFFFFFFFFFFFFF, "x")[:8]


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(
        exc,
        asyncpg.PostgresConnectionError
        | asyncpg.InterfaceError
        | ConnectionError
        | OSError
        | TimeoutError,
    ):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        return state.startswith(("57", "08"))  # operator intervention, connection exception
    return False


def harness_sampler(
    endpoint: Endpoint,
    clock: ScenarioClock,
    parts: ParquetParts,
    interval_s: float = 1.0,
    agent_role: str | None = None,
) -> MetricSampler:
    """A sampler of ``endpoint``'s database on hidden harness connections, writing ``parts``
    (``agent_role``: also how many sessions wait on the agent's locks)."""

    async def connect() -> Any:
        return await endpoint.harness_connect()

    return MetricSampler(
        connect,
        clock,
        parts,
        database=endpoint.database,
        interval_s=interval_s,
        agent_role=agent_role,
    )


class MetricSampler:
    """Samples one database (plus cluster-wide views) on a dedicated connection.

    ``connect`` opens a new connection to the sampled database; the sampler names its session
    like every harness session (``pgwatch``) and leaves those sessions out of its metrics. One
    sample is one statement (plus, when new top queries appear,
    one lookup of their ``/*q:tag*/``). Samples are taken every ``interval_s`` scenario seconds
    but never more often than every ``min_wall_interval_s`` wall seconds. Rows are buffered
    and appended to ``sink`` every ``flush_every`` samples and when :meth:`run` is cancelled.
    """

    def __init__(
        self,
        connect: ConnectionFactory,
        clock: ScenarioClock,
        sink: ParquetParts | None,
        *,
        database: str,
        interval_s: float = 1.0,
        min_wall_interval_s: float = 0.5,
        top_n: int = 10,
        create_pgss: bool = False,
        flush_every: int = 5,
        keep_history: bool = True,
        sample_timeout_s: float = 10.0,
        backoff_initial_s: float = 0.2,
        backoff_max_s: float = 2.0,
        agent_role: str | None = None,
    ) -> None:
        if interval_s <= 0 or min_wall_interval_s < 0 or top_n < 1 or flush_every < 1:
            raise ValueError("invalid sampler parameters")
        self._connect = connect
        self._clock = clock
        self.database = database
        self.interval_s = interval_s
        self.min_wall_interval_s = min_wall_interval_s
        self.top_n = top_n
        self.create_pgss = create_pgss
        self.flush_every = flush_every
        self.sample_timeout_s = sample_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.agent_role = agent_role

        self._conn: asyncpg.Connection | None = None
        self._caps: Capabilities | None = None
        self._stmt: Any = None  # asyncpg PreparedStatement of the sample SQL
        self._backoff = backoff_initial_s
        self.last_sample_t = 0.0  # scenario time of the last sample taken
        self._pgss_prev: dict[int, _PgssRow] | None = None
        self._own_qids: set[int] = set()
        self._tags: dict[int, str | None] = {}
        self.rows = MetricRows(sink, keep_history=keep_history)
        self._recheck_pgss_at = 0
        self._create_tried = False
        self._consecutive_failures = 0
        self._failing_since: float | None = None

        #: Counters of the sampler's own work (for reports and tests).
        self.samples = 0
        self.failures = 0
        self.reconnects = 0
        self.durations_ms: list[float] = []

    # -- public ---------------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities | None:
        """What the server offered on the current connection (None while disconnected)."""
        return self._caps

    def wall_interval(self) -> float:
        """Wall seconds between samples."""
        return max(self.interval_s * self._clock.time_scale, self.min_wall_interval_s)

    async def run(self) -> None:
        """Sample until cancelled; never raises on database trouble (it records gaps)."""
        try:
            next_mono = self._clock.mono()
            while True:
                delay = next_mono - self._clock.mono()
                if delay > 0:
                    await anyio.sleep(delay)
                ok = await self.sample_once()
                if self.rows.pending_samples >= self.flush_every:
                    await self.flush()
                now = self._clock.mono()
                if ok:
                    # One interval after the sample's own timestamp at the earliest: a sample
                    # that started late (a busy event loop) does not bring the next one closer.
                    taken = self._clock.to_mono(self.last_sample_t)
                    interval = self.wall_interval()
                    next_mono = max(next_mono + interval, taken + interval, now)
                else:
                    next_mono = now + max(self.wall_interval(), self._backoff)
        finally:
            with anyio.CancelScope(shield=True):
                await self.flush()
                await self._close()

    async def sample_once(self) -> bool:
        """Take one sample now; returns False (and records ``sampler.up`` = 0) on failure."""
        t = self._clock.now()
        connected = False
        try:
            conn = await self._ensure_connection()
            connected = True
            t = self._clock.now()  # connecting may have taken a while
            self.last_sample_t = t
            await self._sample(conn, t)
        except Exception as exc:  # never crash the run: record a gap
            self._record_failure(t, exc, connected)
            return False
        if self._failing_since is not None:
            log.info("sampler_recovered", gap_s=round(t - self._failing_since, 3))
            self._failing_since = None
        self._consecutive_failures = 0
        self._backoff = self.backoff_initial_s
        return True

    def _record_failure(self, t: float, exc: Exception, connected: bool) -> None:
        self.failures += 1
        self._consecutive_failures += 1
        if self._failing_since is None:
            self._failing_since = t
        self.rows.add(t, "sampler.up", "", 0.0)
        self.rows.end_sample()
        conn_lost = (
            not connected
            or _is_connection_error(exc)
            or (self._conn is not None and self._conn.is_closed())
        )
        if self._consecutive_failures == 1 or self._consecutive_failures % 50 == 0:
            log.warning(
                "sampler_sample_failed",
                t_s=round(t, 3),
                error=f"{type(exc).__name__}: {exc}",
                connection_lost=conn_lost,
                consecutive=self._consecutive_failures,
            )
        if not conn_lost and not isinstance(exc, asyncpg.PostgresError):
            log.exception("sampler_unexpected_error")
        if conn_lost:
            self._drop_connection()
            self._backoff = min(self._backoff * 2, self.backoff_max_s)
        else:
            self._caps = None  # re-probe before the next sample: an extension may be gone

    async def flush(self) -> None:
        """Move buffered rows to the in-memory history and the sink."""
        await self.rows.flush()

    def seed(self, frame: pl.DataFrame) -> None:
        """Rows recorded before this sampler started (the workload history)."""
        self.rows.seed(frame)

    def snapshot(self) -> pl.DataFrame:
        """All rows sampled so far (history plus unflushed buffer), in :data:`METRIC_SCHEMA`."""
        return self.rows.snapshot()

    def cost_summary(self) -> dict[str, float]:
        """Per-sample wall cost (ms) of the successful samples so far."""
        d = sorted(self.durations_ms)
        if not d:
            return {"samples": 0}
        return {
            "samples": len(d),
            "mean_ms": sum(d) / len(d),
            "p50_ms": d[len(d) // 2],
            "p95_ms": d[min(len(d) - 1, int(len(d) * 0.95))],
            "max_ms": d[-1],
            "failures": self.failures,
            "reconnects": self.reconnects,
        }

    # -- connection ---------------------------------------------------------------------------
    async def _ensure_connection(self) -> asyncpg.Connection:
        if self._conn is not None and not self._conn.is_closed():
            if self._caps is None:
                await self._prepare(self._conn)
            return self._conn
        if self._conn is not None:
            self._drop_connection()
        conn = await self._connect()
        try:
            await conn.execute(
                "SELECT set_config('application_name', $1, false), "
                "set_config('statement_timeout', $2, false), "
                "set_config('lock_timeout', '1s', false), set_config('jit', 'off', false)",
                SAMPLER_APPLICATION_NAME,
                f"{int(self.sample_timeout_s * 1000)}ms",
            )
            for name, value in _QUIET_SETTINGS:
                try:
                    await conn.execute("SELECT set_config($1, $2, false)", name, value)
                except asyncpg.PostgresError:
                    pass  # not superuser, or module not loaded
            await self._prepare(conn)
        except BaseException:
            conn.terminate()
            raise
        if self.samples or self.failures:
            self.reconnects += 1
            log.info("sampler_reconnected", reconnects=self.reconnects)
        self._conn = conn
        return conn

    async def _prepare(self, conn: asyncpg.Connection) -> None:
        caps = await probe(conn, create_pgss=self.create_pgss and not self._create_tried)
        self._create_tried = True
        if caps.database != self.database:
            log.warning("sampler_database_mismatch", expected=self.database, got=caps.database)
        self._stmt = await conn.prepare(build_sample_sql(caps, self.top_n, self.agent_role))
        self._caps = caps
        self._pgss_prev = None  # new baseline for statement deltas
        self._recheck_pgss_at = self.samples + 30
        log.info(
            "sampler_prepared",
            server_version_num=caps.version_num,
            pgss=caps.pgss,
            stat_file=caps.can_stat_file,
        )

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        self._caps = None
        self._stmt = None
        self._pgss_prev = None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        try:
            with anyio.fail_after(2):
                await conn.close()
        except Exception:
            conn.terminate()

    # -- sampling -----------------------------------------------------------------------------
    async def _sample(self, conn: asyncpg.Connection, t: float) -> None:
        caps = self._caps
        if caps is not None and not caps.pgss and self.samples >= self._recheck_pgss_at:
            await self._prepare(conn)  # pg_stat_statements may have been installed since
            caps = self._caps
        assert caps is not None and self._stmt is not None
        t0 = self._clock.mono()
        with anyio.fail_after(self.sample_timeout_s + 1):
            if caps.pgss:
                rows = await self._stmt.fetch(sorted(self._own_qids))
            else:
                rows = await self._stmt.fetch()
            pgss_json: str | None = None
            out: list[tuple[str, str, float]] = []
            for m, label, v in rows:
                if m == "_pgss":
                    pgss_json = label
                elif v is not None:
                    out.append((m, label, v))
            if pgss_json is not None:
                out.extend(await self._statements(conn, caps, pgss_json))
        duration_ms = (self._clock.mono() - t0) * 1000.0
        for m, label, v in out:
            self.rows.add(t, m, label, v)
        self.rows.add(t, "sampler.up", "", 1.0)
        self.rows.add(t, "sampler.duration_ms", "", duration_ms)
        self.durations_ms.append(duration_ms)
        self.samples += 1
        self.rows.end_sample()

    async def _statements(
        self, conn: asyncpg.Connection, caps: Capabilities, pgss_json: str
    ) -> list[tuple[str, str, float]]:
        cur: dict[int, _PgssRow] = {}
        for qid, *vals in json.loads(pgss_json):
            cur[int(qid)] = tuple(float(x or 0) for x in vals)  # type: ignore[assignment]
        prev, self._pgss_prev = self._pgss_prev, cur
        if prev is None:
            return []  # baseline
        deltas: list[tuple[int, _PgssRow]] = []
        for qid, c in cur.items():
            p = prev.get(qid)
            if p is None or c[0] < p[0]:  # new entry, or reset / evicted and re-added
                d = c
            else:
                d = tuple(a - b for a, b in zip(c, p, strict=True))  # type: ignore[assignment]
            if d[0] > 0:
                deltas.append((qid, d))
        top = heapq.nlargest(self.top_n, deltas, key=lambda x: (x[1][1], x[1][0]))
        missing = [qid for qid, _ in top if qid not in self._tags]
        if missing:
            await self._lookup_tags(conn, caps, missing)
        out: list[tuple[str, str, float]] = []
        for qid, d in top:
            tag = self._tags.get(qid)
            label = f"queryid={short_queryid(qid)}" + (f",tag={tag}" if tag else "")
            out.extend((m, label, v) for m, v in zip(_STATEMENT_METRICS, d, strict=True))
            out.append(("statements.mean_ms", label, d[1] / d[0]))
        return out

    async def _lookup_tags(
        self, conn: asyncpg.Connection, caps: Capabilities, qids: list[int]
    ) -> None:
        if len(self._tags) > 20000:
            self._tags.clear()
        row = await conn.fetchrow(build_tag_sql(caps), qids)
        assert row is not None
        if row["self_id"] is not None:
            self._own_qids.add(int(row["self_id"]))
        for qid in qids:
            self._tags[qid] = None
        for qid, tag in json.loads(row["tags"]):
            if tag:
                self._tags[int(qid)] = str(tag)

    # -- buffer -------------------------------------------------------------------------------
