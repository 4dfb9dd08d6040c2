"""The sampler's SQL: server capabilities probed once per connection, one statement per sample.

Every sample is a single ``UNION ALL`` statement returning rows ``(m text, l text, v float8)``:
metric name, label and value. ``pg_stat_statements`` comes back as one row ``_pgss`` whose
label holds a JSON array of cumulative per-query counters (the sampler differences them).

The statement never opens a user relation: table sizes are ``pg_stat_file`` of the relation
files (``pg_relation_filepath`` reads the catalog only), so the sampler cannot queue behind an
``ACCESS EXCLUSIVE`` lock held by a workload, a fault or an agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg
import structlog

from dbaops.dbms.postgres.endpoint import HARNESS_APPLICATION
from dbaops.dbms.postgres.metrics import ACTIVITY_STATES, LOCK_MODES, WAIT_EVENT_TYPES
from dbaops.dbms.postgres.sqltext import quote_ident, quote_literal

log = structlog.get_logger(__name__)

#: The sampler is one of the harness's sessions, which all call themselves one monitoring agent;
#: its metrics leave every harness session out (they are not the system under test).
SAMPLER_APPLICATION_NAME = HARNESS_APPLICATION

#: Regular expression (PostgreSQL syntax) extracting ``tag`` from a ``/*q:tag*/`` comment.
TAG_REGEX = r"/\*\s*q:\s*([^*[:space:]]+)\s*\*/"


@dataclass(frozen=True)
class Capabilities:
    """What the connected server offers; decides which SQL the sampler runs."""

    version_num: int
    database: str
    block_size: int = 8192
    seg_blocks: int = 131072
    can_stat_file: bool = False
    can_ls_archive: bool = False
    pgss_schema: str | None = None
    pgss_columns: frozenset[str] = field(default_factory=frozenset)

    @property
    def pgss(self) -> bool:
        return self.pgss_schema is not None

    @property
    def pgss_function(self) -> str:
        assert self.pgss_schema is not None
        return f"{quote_ident(self.pgss_schema)}.pg_stat_statements"


def _text_array(values: tuple[str, ...]) -> str:
    return "ARRAY[" + ", ".join(quote_literal(v) for v in values) + "]::text[]"


def _unpivot(pairs: list[tuple[str, str]]) -> str:
    """``CROSS JOIN LATERAL (VALUES ('name', (expr)::float8), ...) AS x(m, v)``."""
    values = ",\n      ".join(f"({quote_literal(m)}, ({expr})::float8)" for m, expr in pairs)
    return f"CROSS JOIN LATERAL (VALUES\n      {values}) AS x(m, v)"


async def probe(conn: asyncpg.Connection, *, create_pgss: bool) -> Capabilities:
    """Query the server version, privileges and pg_stat_statements availability."""
    row = await conn.fetchrow(
        """
        SELECT current_setting('server_version_num')::int AS version_num,
               current_database() AS database,
               current_setting('block_size')::int AS block_size,
               pg_size_bytes(current_setting('segment_size')) AS segment_bytes,
               has_function_privilege('pg_stat_file(text, boolean)', 'execute') AS stat_file,
               has_function_privilege('pg_ls_archive_statusdir()', 'execute') AS ls_archive
        """
    )
    assert row is not None
    if create_pgss:
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        except asyncpg.PostgresError as exc:
            log.warning("sampler_create_pgss_failed", error=str(exc))
    schema: str | None = await conn.fetchval(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'pg_stat_statements'"
    )
    columns: frozenset[str] = frozenset()
    if schema is not None:
        fn = f"{quote_ident(schema)}.pg_stat_statements"
        try:
            stmt = await conn.prepare(f"SELECT * FROM {fn}(false) LIMIT 0")
            columns = frozenset(a.name for a in stmt.get_attributes())
            await conn.fetchval(f"SELECT count(*) FROM {fn}(false)")
        except asyncpg.PostgresError as exc:  # e.g. not in shared_preload_libraries
            log.warning("sampler_pgss_unavailable", error=str(exc))
            schema = None
        else:
            if not {"queryid", "calls", "dbid"} <= columns or not (
                {"total_exec_time", "total_time"} & columns
            ):
                log.warning("sampler_pgss_unknown_columns", columns=sorted(columns))
                schema = None
    block_size = int(row["block_size"])
    return Capabilities(
        version_num=int(row["version_num"]),
        database=str(row["database"]),
        block_size=block_size,
        seg_blocks=max(1, int(row["segment_bytes"]) // block_size),
        can_stat_file=bool(row["stat_file"]),
        can_ls_archive=bool(row["ls_archive"]),
        pgss_schema=schema,
        pgss_columns=columns,
    )


# -- parts of the sample statement ---------------------------------------------------------


def _ctes(caps: Capabilities, top_n: int) -> str:
    sampler = quote_literal(SAMPLER_APPLICATION_NAME)
    return f"""
me AS (
  SELECT d.oid AS dboid,
         CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
              ELSE pg_current_wal_lsn() END AS lsn
  FROM pg_database d WHERE d.datname = current_database()
),
act AS MATERIALIZED (
  SELECT a.pid, a.backend_type, a.application_name, a.state, a.wait_event_type,
         a.xact_start, a.query_start, a.state_change, a.backend_xmin, a.usename
  FROM pg_stat_activity a WHERE a.pid <> pg_backend_pid()
),
cli AS MATERIALIZED (
  SELECT * FROM act
  WHERE backend_type = 'client backend' AND coalesce(application_name, '') <> {sampler}
),
lk AS MATERIALIZED (
  SELECT l.locktype, l.database, l.relation, l.mode, l.granted, l.waitstart
  FROM pg_locks l WHERE l.pid IS DISTINCT FROM pg_backend_pid()
),
tbl AS MATERIALIZED (
  SELECT s.*, c.reltoastrelid
  FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
  ORDER BY coalesce(s.n_live_tup, 0) + coalesce(s.n_dead_tup, 0) DESC,
           coalesce(s.seq_scan, 0) + coalesce(s.idx_scan, 0) DESC, s.relid
  LIMIT {int(top_n)}
)"""


def _db_part(caps: Capabilities) -> str:
    cols = [
        ("db.numbackends", "d.numbackends"),
        ("db.xact_commit", "d.xact_commit"),
        ("db.xact_rollback", "d.xact_rollback"),
        ("db.blks_read", "d.blks_read"),
        ("db.blks_hit", "d.blks_hit"),
        ("db.tup_returned", "d.tup_returned"),
        ("db.tup_fetched", "d.tup_fetched"),
        ("db.tup_inserted", "d.tup_inserted"),
        ("db.tup_updated", "d.tup_updated"),
        ("db.tup_deleted", "d.tup_deleted"),
        ("db.conflicts", "d.conflicts"),
        ("db.temp_files", "d.temp_files"),
        ("db.temp_bytes", "d.temp_bytes"),
        ("db.deadlocks", "d.deadlocks"),
        ("db.blk_read_time_ms", "d.blk_read_time"),
        ("db.blk_write_time_ms", "d.blk_write_time"),
        ("db.size_bytes", "pg_database_size(d.datid)"),
        ("db.xid_age", "age(pd.datfrozenxid)"),
        ("db.mxid_age", "mxid_age(pd.datminmxid)"),
    ]
    if caps.version_num >= 140000:
        cols += [
            ("db.session_time_ms", "d.session_time"),
            ("db.active_time_ms", "d.active_time"),
            ("db.idle_in_transaction_time_ms", "d.idle_in_transaction_time"),
            ("db.sessions", "d.sessions"),
            ("db.sessions_abandoned", "d.sessions_abandoned"),
            ("db.sessions_fatal", "d.sessions_fatal"),
            ("db.sessions_killed", "d.sessions_killed"),
        ]
    return f"""
SELECT x.m::text AS m, ''::text AS l, x.v::float8 AS v
FROM me JOIN pg_stat_database d ON d.datid = me.dboid JOIN pg_database pd ON pd.oid = d.datid
{_unpivot(cols)}"""


def _activity_part() -> str:
    return f"""
SELECT 'activity.count', 'state=' || s.state, count(c.pid)::float8
FROM unnest({_text_array(ACTIVITY_STATES)}) AS s(state) LEFT JOIN cli c ON c.state = s.state
GROUP BY s.state
UNION ALL
SELECT 'activity.waiting', 'wait_event_type=' || w.t, count(c.pid)::float8
FROM unnest({_text_array(WAIT_EVENT_TYPES)}) AS w(t)
LEFT JOIN cli c ON c.wait_event_type = w.t AND c.state = 'active'
GROUP BY w.t
UNION ALL
SELECT x.m, '', x.v
FROM (SELECT count(*) AS n,
             max(extract(epoch FROM now() - xact_start)) AS oldest_xact,
             max(extract(epoch FROM now() - query_start)) FILTER (WHERE state = 'active')
               AS oldest_query,
             max(extract(epoch FROM now() - state_change))
               FILTER (WHERE state LIKE 'idle in transaction%') AS oldest_idle_xact
      FROM cli) c,
     (SELECT max(age(backend_xmin)) AS xmin_age,
             count(*) FILTER (WHERE backend_type = 'autovacuum worker') AS av,
             count(*) FILTER (WHERE backend_type = 'parallel worker') AS pw
      FROM act) a,
     (SELECT count(*) AS n, max(extract(epoch FROM now() - prepared)) AS oldest
      FROM pg_prepared_xacts) p
{
        _unpivot(
            [
                ("activity.connections", "c.n"),
                ("activity.max_connections", "current_setting('max_connections')"),
                ("activity.oldest_xact_age_s", "coalesce(c.oldest_xact, 0)"),
                ("activity.oldest_query_age_s", "coalesce(c.oldest_query, 0)"),
                ("activity.oldest_idle_in_xact_s", "coalesce(c.oldest_idle_xact, 0)"),
                ("activity.oldest_xmin_age_xids", "coalesce(a.xmin_age, 0)"),
                ("activity.autovacuum_workers", "a.av"),
                ("activity.parallel_workers", "a.pw"),
                ("activity.prepared_xacts", "p.n"),
                ("activity.oldest_prepared_xact_age_s", "coalesce(p.oldest, 0)"),
            ]
        )
    }"""


def _locks_part(caps: Capabilities) -> str:
    oldest_wait = (
        "coalesce(max(extract(epoch FROM now() - waitstart)), 0)::float8"
        if caps.version_num >= 140000
        else "0::float8"
    )
    return f"""
SELECT x.m, 'mode=' || md.mode, x.v
FROM unnest({_text_array(LOCK_MODES)}) AS md(mode)
LEFT JOIN (SELECT mode, count(*) FILTER (WHERE granted) AS g,
                  count(*) FILTER (WHERE NOT granted) AS w
           FROM lk GROUP BY mode) c ON c.mode = md.mode
{_unpivot([("locks.granted", "coalesce(c.g, 0)"), ("locks.waiting", "coalesce(c.w, 0)")])}
UNION ALL
SELECT 'locks.waiting_by_type', 'locktype=' || locktype, count(*)::float8
FROM lk WHERE NOT granted GROUP BY locktype
UNION ALL
SELECT 'locks.waiting_relation', 'table=' || n.nspname || '.' || c.relname, count(*)::float8
FROM lk JOIN me ON lk.database = me.dboid
JOIN pg_class c ON c.oid = lk.relation JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE NOT lk.granted AND lk.locktype = 'relation'
GROUP BY n.nspname, c.relname
UNION ALL
SELECT 'locks.oldest_wait_s', '', {oldest_wait} FROM lk WHERE NOT granted"""


def _table_size_expr(caps: Capabilities) -> str:
    rels = (
        "SELECT r.oid, r.relpages FROM pg_class r "
        "WHERE r.oid IN (t.relid, t.reltoastrelid) OR r.oid IN "
        "(SELECT i.indexrelid FROM pg_index i WHERE i.indrelid IN (t.relid, t.reltoastrelid))"
    )
    if not caps.can_stat_file:
        return f"(SELECT sum(rr.relpages)::float8 * {caps.block_size} FROM ({rels}) rr)"
    return (
        f"(SELECT coalesce(sum(f.size), 0) FROM ({rels}) rr, "
        f"LATERAL generate_series(0, rr.relpages / {caps.seg_blocks} + 1) AS g(n), "
        "LATERAL pg_stat_file(pg_relation_filepath(rr.oid) "
        "|| CASE WHEN g.n = 0 THEN '' ELSE '.' || g.n END, true) AS f)"
    )


def _age(expr: str) -> str:
    return f"extract(epoch FROM now() - {expr})"


def _tables_part(caps: Capabilities) -> str:
    cols = [
        ("table.size_bytes", _table_size_expr(caps)),
        ("table.n_live_tup", "t.n_live_tup"),
        ("table.n_dead_tup", "t.n_dead_tup"),
        ("table.n_mod_since_analyze", "t.n_mod_since_analyze"),
        ("table.n_ins_since_vacuum", "t.n_ins_since_vacuum"),
        ("table.last_vacuum_age_s", _age("greatest(t.last_vacuum, t.last_autovacuum)")),
        ("table.last_autovacuum_age_s", _age("t.last_autovacuum")),
        ("table.last_analyze_age_s", _age("greatest(t.last_analyze, t.last_autoanalyze)")),
        ("table.last_autoanalyze_age_s", _age("t.last_autoanalyze")),
        ("table.seq_scan", "t.seq_scan"),
        ("table.seq_tup_read", "t.seq_tup_read"),
        ("table.idx_scan", "t.idx_scan"),
        ("table.idx_tup_fetch", "t.idx_tup_fetch"),
        ("table.n_tup_ins", "t.n_tup_ins"),
        ("table.n_tup_upd", "t.n_tup_upd"),
        ("table.n_tup_del", "t.n_tup_del"),
        ("table.n_tup_hot_upd", "t.n_tup_hot_upd"),
        ("table.vacuum_count", "t.vacuum_count"),
        ("table.autovacuum_count", "t.autovacuum_count"),
        ("table.analyze_count", "t.analyze_count"),
        ("table.autoanalyze_count", "t.autoanalyze_count"),
    ]
    return f"""
SELECT x.m, 'table=' || t.schemaname || '.' || t.relname, x.v
FROM tbl t
{_unpivot(cols)}
WHERE x.v IS NOT NULL
UNION ALL
SELECT 'vacuum.progress', 'table=' || n.nspname || '.' || c.relname,
       CASE WHEN p.heap_blks_total > 0
            THEN p.heap_blks_scanned::float8 / p.heap_blks_total ELSE 0 END
FROM pg_stat_progress_vacuum p JOIN me ON p.datid = me.dboid
JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace"""


def _wal_checkpoint_part(caps: Capabilities) -> str:
    v = caps.version_num
    parts = ["SELECT 'wal.bytes', '', pg_wal_lsn_diff(me.lsn, '0/0')::float8 FROM me"]
    if v >= 140000:
        parts.append(
            "SELECT x.m, '', x.v FROM pg_stat_wal w\n"
            + _unpivot(
                [
                    ("wal.records", "w.wal_records"),
                    ("wal.fpi", "w.wal_fpi"),
                    ("wal.buffers_full", "w.wal_buffers_full"),
                ]
            )
        )
    if v >= 170000:
        parts.append(
            "SELECT x.m, '', x.v FROM pg_stat_checkpointer c, pg_stat_bgwriter b\n"
            + _unpivot(
                [
                    ("checkpoint.timed", "c.num_timed"),
                    ("checkpoint.requested", "c.num_requested"),
                    ("checkpoint.write_ms", "c.write_time"),
                    ("checkpoint.sync_ms", "c.sync_time"),
                    ("checkpoint.buffers_written", "c.buffers_written"),
                    ("bgwriter.buffers_clean", "b.buffers_clean"),
                    ("bgwriter.maxwritten_clean", "b.maxwritten_clean"),
                    ("bgwriter.buffers_alloc", "b.buffers_alloc"),
                ]
            )
        )
    else:
        parts.append(
            "SELECT x.m, '', x.v FROM pg_stat_bgwriter b\n"
            + _unpivot(
                [
                    ("checkpoint.timed", "b.checkpoints_timed"),
                    ("checkpoint.requested", "b.checkpoints_req"),
                    ("checkpoint.write_ms", "b.checkpoint_write_time"),
                    ("checkpoint.sync_ms", "b.checkpoint_sync_time"),
                    ("checkpoint.buffers_written", "b.buffers_checkpoint"),
                    ("bgwriter.buffers_clean", "b.buffers_clean"),
                    ("bgwriter.maxwritten_clean", "b.maxwritten_clean"),
                    ("bgwriter.buffers_alloc", "b.buffers_alloc"),
                    ("bgwriter.buffers_backend", "b.buffers_backend"),
                    ("bgwriter.buffers_backend_fsync", "b.buffers_backend_fsync"),
                ]
            )
        )
    if v >= 160000:
        ops = ["reads", "writes", "extends", "hits", "evictions", "fsyncs"]
        sums = ", ".join(f"sum(coalesce({o}, 0)) AS {o}" for o in ops)
        parts.append(
            f"SELECT x.m, 'backend_type=' || i.backend_type, x.v\n"
            f"FROM (SELECT backend_type, {sums} FROM pg_stat_io GROUP BY backend_type) i\n"
            + _unpivot([(f"io.{o}", f"i.{o}") for o in ops])
            + "\nWHERE x.v > 0"
        )
    archive = [
        ("archiver.archived", "a.archived_count"),
        ("archiver.failed", "a.failed_count"),
    ]
    if caps.can_ls_archive:
        archive.append(
            (
                "archiver.ready_files",
                "(SELECT count(*) FROM pg_ls_archive_statusdir() s WHERE s.name LIKE '%.ready')",
            )
        )
    parts.append("SELECT x.m, '', x.v FROM pg_stat_archiver a\n" + _unpivot(archive))
    parts.append(
        "SELECT 'server.uptime_s', '', "
        "extract(epoch FROM now() - pg_postmaster_start_time())::float8"
    )
    return "\nUNION ALL\n".join(parts)


def _replication_part() -> str:
    lag = "extract(epoch FROM {})"
    return f"""
SELECT x.m, 'app=' || coalesce(r.application_name, ''), max(x.v)
FROM pg_stat_replication r, me
{
        _unpivot(
            [
                ("replication.lag_bytes", "pg_wal_lsn_diff(me.lsn, r.replay_lsn)"),
                ("replication.write_lag_s", lag.format("r.write_lag")),
                ("replication.flush_lag_s", lag.format("r.flush_lag")),
                ("replication.replay_lag_s", lag.format("r.replay_lag")),
            ]
        )
    }
WHERE x.v IS NOT NULL
GROUP BY x.m, r.application_name
UNION ALL
SELECT x.m, 'slot=' || s.slot_name, x.v
FROM pg_replication_slots s, me
{
        _unpivot(
            [
                ("replication.slot_retained_bytes", "pg_wal_lsn_diff(me.lsn, s.restart_lsn)"),
                ("replication.slot_active", "s.active::int"),
                ("replication.slot_xmin_age_xids", "greatest(age(s.xmin), age(s.catalog_xmin))"),
            ]
        )
    }
WHERE x.v IS NOT NULL
UNION ALL
SELECT 'replication.replay_delay_s', '',
       extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
WHERE pg_is_in_recovery() AND pg_last_xact_replay_timestamp() IS NOT NULL"""


def _pgss_part(caps: Capabilities) -> str:
    cols = caps.pgss_columns

    def col(*names: str) -> str:
        for n in names:
            if n in cols:
                return f"sum(s.{n})"
        return "0"

    fields = [
        col("calls"),
        col("total_exec_time", "total_time"),
        col("rows"),
        col("shared_blks_hit"),
        col("shared_blks_read"),
        col("shared_blk_read_time", "blk_read_time"),
    ]
    return f"""
SELECT '_pgss', (
  SELECT coalesce(json_agg(json_build_array(q.queryid, {", ".join(f"q.f{i}" for i in range(6))})),
                  '[]')::text
  FROM (SELECT s.queryid, {", ".join(f"{f} AS f{i}" for i, f in enumerate(fields))}
        FROM {caps.pgss_function}(false) s, me
        WHERE s.dbid = me.dboid AND s.queryid IS NOT NULL AND s.queryid <> ALL($1::bigint[])
          AND s.queryid IS DISTINCT FROM
              (SELECT a.query_id FROM pg_stat_activity a WHERE a.pid = pg_backend_pid())
        GROUP BY s.queryid) q
), NULL::float8"""


def _agent_blocking_part(agent_role: str) -> str:
    """How many other sessions wait on a lock that a session of ``agent_role`` holds or is
    queued ahead for (``pg_blocking_pids``: a DDL waiting behind a report blocks every
    checkout queued behind it). Counted at each sample, so a stall shows as a stretch of
    samples however soon each blocked client gives up and the next one queues."""
    role = quote_literal(agent_role)
    # pg_blocking_pids once per waiting session (it takes the lock manager's locks), and
    # only while one of the agent's sessions exists
    return f"""
SELECT 'locks.blocked_by_agent', '', count(*)::float8
FROM (SELECT w.pid, pg_blocking_pids(w.pid) AS blockers
      FROM cli w
      WHERE w.wait_event_type = 'Lock' AND w.usename IS DISTINCT FROM {role}
        AND EXISTS (SELECT 1 FROM cli a WHERE a.usename = {role})) x
WHERE EXISTS (SELECT 1 FROM cli b WHERE b.pid = ANY (x.blockers) AND b.usename = {role})"""


def build_sample_sql(caps: Capabilities, top_n: int, agent_role: str | None = None) -> str:
    """The per-sample statement; takes ``$1 bigint[]`` (own query ids) iff ``caps.pgss``.
    With ``agent_role``, also how many sessions wait on that role's sessions' locks."""
    parts = [
        _db_part(caps),
        _activity_part(),
        _locks_part(caps),
        *([_agent_blocking_part(agent_role)] if agent_role else []),
        _tables_part(caps),
        _wal_checkpoint_part(caps),
        _replication_part(),
    ]
    if caps.pgss:
        parts.append(_pgss_part(caps))
    body = "\nUNION ALL\n".join(f"({p.strip()})" for p in parts)
    return f"/* dbaops metric sampler */\nWITH {_ctes(caps, top_n).strip()}\n{body}"


def build_tag_sql(caps: Capabilities) -> str:
    """Look up ``/*q:tag*/`` tags of ``$1 bigint[]`` queries; also returns our own query id."""
    return f"""/* dbaops metric sampler: tags */
SELECT (SELECT a.query_id FROM pg_stat_activity a WHERE a.pid = pg_backend_pid()) AS self_id,
       (SELECT coalesce(json_agg(json_build_array(t.queryid, t.tag)), '[]')::text
        FROM (SELECT DISTINCT s.queryid, substring(s.query FROM {quote_literal(TAG_REGEX)}) AS tag
              FROM {caps.pgss_function}(true) s
              JOIN pg_database d ON d.oid = s.dbid AND d.datname = current_database()
              WHERE s.queryid = ANY($1::bigint[])) t) AS tags"""
