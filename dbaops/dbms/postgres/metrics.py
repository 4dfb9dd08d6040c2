"""PostgreSQL's metrics: names, kinds and units of what its sampler
(:mod:`dbaops.dbms.postgres.sampler`) records, and the state, wait-event and lock-mode values it
labels them with; free of any driver and of polars (scenario metric checks validate on it)."""

from __future__ import annotations

from dbaops.dbms.metric_spec import SAMPLER_METRICS, MetricKind, MetricSpec


def _specs(
    prefix: str, kind: MetricKind, label: str, rows: list[tuple[str, str, str]]
) -> list[MetricSpec]:
    return [MetricSpec(f"{prefix}.{n}", kind, u, d, label) for n, u, d in rows]


_DB_COUNTERS = [
    ("xact_commit", "xacts", "Transactions committed (the sampler adds ~1 per sample)"),
    ("xact_rollback", "xacts", "Transactions rolled back"),
    ("blks_read", "blocks", "Blocks read outside shared buffers (OS cache or disk)"),
    ("blks_hit", "blocks", "Blocks found in shared buffers"),
    ("tup_returned", "rows", "Rows returned by scans (seq scans count every live row)"),
    ("tup_fetched", "rows", "Rows fetched by index scans"),
    ("tup_inserted", "rows", "Rows inserted"),
    ("tup_updated", "rows", "Rows updated"),
    ("tup_deleted", "rows", "Rows deleted"),
    ("conflicts", "queries", "Queries cancelled by recovery conflicts (standby)"),
    ("temp_files", "files", "Temporary files created (sorts/hashes spilling to disk)"),
    ("temp_bytes", "bytes", "Bytes written to temporary files"),
    ("deadlocks", "deadlocks", "Deadlocks detected"),
    ("blk_read_time_ms", "ms", "Time reading blocks (needs track_io_timing)"),
    ("blk_write_time_ms", "ms", "Time writing blocks (needs track_io_timing)"),
    ("session_time_ms", "ms", "Time spent by sessions"),
    ("active_time_ms", "ms", "Time sessions spent executing statements"),
    ("idle_in_transaction_time_ms", "ms", "Time sessions spent idle in transaction"),
    ("sessions", "sessions", "Sessions established"),
    ("sessions_abandoned", "sessions", "Sessions ended by the client disconnecting"),
    ("sessions_fatal", "sessions", "Sessions ended by fatal errors"),
    ("sessions_killed", "sessions", "Sessions terminated by operator intervention"),
]
_DB_GAUGES = [
    ("numbackends", "sessions", "Backends connected to the sampled database (incl. sampler)"),
    ("size_bytes", "bytes", "pg_database_size of the sampled database"),
    ("xid_age", "xids", "age(datfrozenxid): distance to transaction ID wraparound"),
    ("mxid_age", "mxids", "mxid_age(datminmxid)"),
]
_ACTIVITY = [
    ("connections", "sessions", "Client backends in the cluster (sampler excluded)"),
    ("max_connections", "sessions", "max_connections setting"),
    ("oldest_xact_age_s", "s", "Age of the oldest open transaction (0 when none)"),
    ("oldest_query_age_s", "s", "Runtime of the longest running active statement"),
    ("oldest_idle_in_xact_s", "s", "Longest time a session has sat idle in transaction"),
    ("oldest_xmin_age_xids", "xids", "Largest age(backend_xmin): what holds back vacuum"),
    ("autovacuum_workers", "workers", "Autovacuum workers running"),
    ("parallel_workers", "workers", "Parallel query workers running (all databases)"),
    ("prepared_xacts", "xacts", "Prepared (two-phase) transactions"),
    ("oldest_prepared_xact_age_s", "s", "Age of the oldest prepared transaction"),
]
_TABLE_GAUGES = [
    ("size_bytes", "bytes", "Files of heap, TOAST and indexes (main forks; lock-free stat)"),
    ("n_live_tup", "rows", "Estimated live rows"),
    ("n_dead_tup", "rows", "Estimated dead rows (bloat awaiting vacuum)"),
    ("n_mod_since_analyze", "rows", "Rows modified since the last analyze"),
    ("n_ins_since_vacuum", "rows", "Rows inserted since the last vacuum"),
    ("last_vacuum_age_s", "s", "Seconds since the last vacuum (manual or auto)"),
    ("last_autovacuum_age_s", "s", "Seconds since the last autovacuum"),
    ("last_analyze_age_s", "s", "Seconds since the last analyze (manual or auto)"),
    ("last_autoanalyze_age_s", "s", "Seconds since the last autoanalyze"),
]
_TABLE_COUNTERS = [
    ("seq_scan", "scans", "Sequential scans started"),
    ("seq_tup_read", "rows", "Rows read by sequential scans"),
    ("idx_scan", "scans", "Index scans started"),
    ("idx_tup_fetch", "rows", "Rows fetched by index scans"),
    ("n_tup_ins", "rows", "Rows inserted"),
    ("n_tup_upd", "rows", "Rows updated"),
    ("n_tup_del", "rows", "Rows deleted"),
    ("n_tup_hot_upd", "rows", "Rows HOT-updated"),
    ("vacuum_count", "vacuums", "Manual vacuums"),
    ("autovacuum_count", "vacuums", "Autovacuums"),
    ("analyze_count", "analyzes", "Manual analyzes"),
    ("autoanalyze_count", "analyzes", "Autoanalyzes"),
]
_STATEMENTS = [
    ("calls", "calls", "Executions since the previous sample"),
    ("total_exec_ms", "ms", "Execution time since the previous sample"),
    ("rows", "rows", "Rows returned or affected since the previous sample"),
    ("shared_blks_hit", "blocks", "Shared buffer hits since the previous sample"),
    ("shared_blks_read", "blocks", "Shared blocks read since the previous sample"),
    ("io_read_ms", "ms", "Block read time since the previous sample (track_io_timing)"),
]
_WAL = [
    ("bytes", "bytes", "WAL position (pg_current_wal_lsn, replay LSN on a standby)"),
    ("records", "records", "WAL records generated (pg_stat_wal)"),
    ("fpi", "records", "Full page images generated (pg_stat_wal)"),
    ("buffers_full", "events", "WAL writes because WAL buffers were full (pg_stat_wal)"),
]
_CHECKPOINT = [
    ("timed", "checkpoints", "Scheduled checkpoints (checkpoint_timeout)"),
    ("requested", "checkpoints", "Requested checkpoints (max_wal_size, CHECKPOINT, ...)"),
    ("write_ms", "ms", "Time writing checkpoint files"),
    ("sync_ms", "ms", "Time syncing checkpoint files"),
    ("buffers_written", "buffers", "Buffers written by checkpoints"),
]
_BGWRITER = [
    ("buffers_clean", "buffers", "Buffers written by the background writer"),
    ("maxwritten_clean", "events", "Background writer stops for writing too many buffers"),
    ("buffers_alloc", "buffers", "Buffers allocated"),
    ("buffers_backend", "buffers", "Buffers written by backends themselves (PG <= 16)"),
    ("buffers_backend_fsync", "events", "Backends doing their own fsync (PG <= 16)"),
]
_IO = [
    ("reads", "ops", "Read operations (pg_stat_io, PG 16+)"),
    ("writes", "ops", "Write operations (pg_stat_io, PG 16+)"),
    ("extends", "ops", "Relation extend operations (pg_stat_io, PG 16+)"),
    ("hits", "ops", "Shared buffer hits (pg_stat_io, PG 16+)"),
    ("evictions", "ops", "Buffers evicted (pg_stat_io, PG 16+)"),
    ("fsyncs", "ops", "fsync calls (pg_stat_io, PG 16+)"),
]

REGISTRY: dict[str, MetricSpec] = {
    s.name: s
    for s in [
        *_specs("db", "counter", "", _DB_COUNTERS),
        *_specs("db", "gauge", "", _DB_GAUGES),
        MetricSpec("activity.count", "gauge", "sessions", "Client backends by state", "state"),
        MetricSpec(
            "activity.waiting",
            "gauge",
            "sessions",
            "Active client backends waiting, by wait event type",
            "wait_event_type",
        ),
        *_specs("activity", "gauge", "", _ACTIVITY),
        MetricSpec("locks.granted", "gauge", "locks", "Granted locks by mode", "mode"),
        MetricSpec("locks.waiting", "gauge", "locks", "Lock requests waiting, by mode", "mode"),
        MetricSpec(
            "locks.blocked_by_agent",
            "gauge",
            "sessions",
            "Sessions waiting on a lock the agent's sessions hold or queue ahead for",
        ),
        MetricSpec(
            "locks.waiting_by_type",
            "gauge",
            "locks",
            "Lock requests waiting, by lock type (relation, transactionid, tuple, ...)",
            "locktype",
        ),
        MetricSpec(
            "locks.waiting_relation",
            "gauge",
            "locks",
            "Relation lock requests waiting, by table (sampled database)",
            "table",
        ),
        MetricSpec("locks.oldest_wait_s", "gauge", "s", "Longest current lock wait", ""),
        *_specs("table", "gauge", "table", _TABLE_GAUGES),
        *_specs("table", "counter", "table", _TABLE_COUNTERS),
        MetricSpec(
            "vacuum.progress",
            "gauge",
            "ratio",
            "Running vacuum: heap blocks scanned / total",
            "table",
        ),
        *_specs("statements", "delta", "queryid,tag", _STATEMENTS),
        MetricSpec(
            "statements.mean_ms",
            "gauge",
            "ms",
            "Mean execution time of the calls since the previous sample",
            "queryid,tag",
        ),
        *_specs("wal", "counter", "", _WAL),
        *_specs("checkpoint", "counter", "", _CHECKPOINT),
        *_specs("bgwriter", "counter", "", _BGWRITER),
        *_specs("io", "counter", "backend_type", _IO),
        MetricSpec("archiver.archived", "counter", "files", "WAL files archived", ""),
        MetricSpec("archiver.failed", "counter", "files", "Failed archive attempts", ""),
        MetricSpec(
            "archiver.ready_files", "gauge", "files", "WAL files waiting to be archived", ""
        ),
        MetricSpec(
            "replication.lag_bytes", "gauge", "bytes", "WAL not yet replayed by standby", "app"
        ),
        MetricSpec("replication.write_lag_s", "gauge", "s", "Standby write lag", "app"),
        MetricSpec("replication.flush_lag_s", "gauge", "s", "Standby flush lag", "app"),
        MetricSpec("replication.replay_lag_s", "gauge", "s", "Standby replay lag", "app"),
        MetricSpec(
            "replication.slot_retained_bytes",
            "gauge",
            "bytes",
            "WAL retained by a replication slot (current LSN - restart_lsn)",
            "slot",
        ),
        MetricSpec("replication.slot_active", "gauge", "bool", "Slot in use (1/0)", "slot"),
        MetricSpec(
            "replication.slot_xmin_age_xids",
            "gauge",
            "xids",
            "Largest age of the slot's xmin/catalog_xmin (holds back vacuum)",
            "slot",
        ),
        MetricSpec(
            "replication.replay_delay_s",
            "gauge",
            "s",
            "On a standby: now() - last replayed transaction timestamp",
            "",
        ),
        MetricSpec("server.uptime_s", "gauge", "s", "Seconds since postmaster start", ""),
        *SAMPLER_METRICS,
    ]
}

#: Fixed label domains: these series are written on every sample, zero included.
ACTIVITY_STATES = (
    "active",
    "idle",
    "idle in transaction",
    "idle in transaction (aborted)",
    "fastpath function call",
    "disabled",
)
WAIT_EVENT_TYPES = (
    "Activity",
    "BufferPin",
    "Client",
    "Extension",
    "InjectionPoint",
    "IO",
    "IPC",
    "Lock",
    "LWLock",
    "Timeout",
)
LOCK_MODES = (
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
    "SIReadLock",
)
