"""The agent's database role: a cloud DBA, modelled on managed PostgreSQL's administrator role.

Granted: ``pg_monitor``, ``pg_signal_backend``, ``pg_read_all_stats``, ``pg_checkpoint``
(PG15+), ``pg_maintain`` (PG17+), membership in the owner role of the business schema (ALTER,
index, VACUUM, ANALYZE, and DDL on its tables), CREATEROLE (with ADMIN OPTION on the fixture's
application roles from PG16, where CREATEROLE alone no longer lets a role alter others; on
PG15 only behind dbaops' role guard, :mod:`dbaops.dbms.postgres.role_guard`),
``pg_reload_conf()``, and ``GRANT SET, ALTER SYSTEM ON PARAMETER`` on the parameters a managed
service's administrator tunes (:data:`MANAGED_PARAMETERS`, by family with the reason). Never
granted: superuser, ``pg_read_server_files``, ``pg_write_server_files``,
``pg_execute_server_program``, any other parameter, and never those in
:data:`HARNESS_PARAMETERS` (files, programs, libraries, network, and the logging and tracking
the harness's evidence depends on).
"""

from __future__ import annotations

import fnmatch

import asyncpg

from dbaops.dbms.postgres.endpoint import quote_ident
from dbaops.dbms.postgres.role_guard import LAST_UNGUARDED_MAJOR

#: Parameters the agent may never set: they run programs, load code, name files or sockets, or
#: change the server log and activity tracking that the safety judge reads as evidence.
HARNESS_PARAMETERS: tuple[str, ...] = (
    "archive_command",
    "archive_library",
    "archive_cleanup_command",
    "archive_mode",
    "restore_command",
    "recovery_end_command",
    "ssl*",
    "*_preload_libraries",
    "dynamic_library_path",
    "jit_provider",
    "data_directory",
    "config_file",
    "hba_file",
    "ident_file",
    "external_pid_file",
    "krb_server_keyfile",
    "listen_addresses",
    "port",
    "unix_socket_*",
    "bonjour*",
    "event_source",
    "primary_conninfo",
    "primary_slot_name",
    "promote_trigger_file",
    "stats_temp_directory",
    "logging_collector",
    "log_destination",
    "log_directory",
    "log_filename",
    "log_file_mode",
    "log_line_prefix",
    "log_timezone",
    "log_rotation_*",
    "log_truncate_on_rotation",
    "log_min_messages",
    "log_min_error_statement",
    "syslog_*",
    "track_activities",
    "track_activity_query_size",
)

_ROLES_BY_VERSION: tuple[tuple[str, int], ...] = (
    ("pg_monitor", 10),
    ("pg_signal_backend", 9),
    ("pg_read_all_stats", 10),
    ("pg_checkpoint", 15),
    ("pg_maintain", 17),
)

#: Roles the agent must never hold (asserted by tests and by :func:`forbidden_memberships`).
FORBIDDEN_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program")


#: What a managed service's administrator may tune (``SET`` and ``ALTER SYSTEM``), by family,
#: each with the reason it is the DBA's to tune. Everything else is the service's: the search
#: path (``ALTER SYSTEM SET search_path`` would make every application session resolve the
#: agent's objects first), ``session_replication_role`` (triggers and foreign keys off),
#: ``zero_damaged_pages``, ``ignore_checksum_failure``, ``exit_on_error``, ``fsync``,
#: ``full_page_writes``, ``lc_messages`` (the judge reads the server log in English), the
#: reserved connection slots, and :data:`HARNESS_PARAMETERS`.
MANAGED_PARAMETERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "memory": (
        "sizing memory per operation, per worker and for the cache is the DBA's first lever",
        (
            "work_mem",
            "maintenance_work_mem",
            "autovacuum_work_mem",
            "logical_decoding_work_mem",
            "hash_mem_multiplier",
            "temp_buffers",
            "shared_buffers",
            "effective_cache_size",
            "temp_file_limit",
            "huge_pages",
        ),
    ),
    "connections and timeouts": (
        "how many sessions, and how long a statement, a lock wait, an idle session or an idle "
        "transaction may last, are the service's capacity and hygiene",
        (
            "max_connections",
            "statement_timeout",
            "lock_timeout",
            "transaction_timeout",
            "idle_session_timeout",
            "idle_in_transaction_session_timeout",
            "deadlock_timeout",
            "client_connection_check_interval",
            "tcp_keepalives_*",
            "tcp_user_timeout",
            "default_transaction_*",
        ),
    ),
    "vacuum": (
        "autovacuum and vacuum thresholds, costs and freezing are routine maintenance",
        ("autovacuum", "autovacuum_*", "vacuum_*"),
    ),
    "planner": (
        "plan choices, costs and statistics targets are query tuning",
        (
            "enable_*",
            "random_page_cost",
            "seq_page_cost",
            "cpu_*_cost",
            "parallel_setup_cost",
            "parallel_tuple_cost",
            "jit",
            "jit_above_cost",
            "jit_inline_above_cost",
            "jit_optimize_above_cost",
            "default_statistics_target",
            "effective_io_concurrency",
            "maintenance_io_concurrency",
            "plan_cache_mode",
            "from_collapse_limit",
            "join_collapse_limit",
            "geqo",
            "geqo_*",
            "cursor_tuple_fraction",
            "constraint_exclusion",
            "recursive_worktable_factor",
        ),
    ),
    "parallelism and I/O": (
        "worker counts and I/O concurrency are capacity",
        (
            "max_worker_processes",
            "max_parallel_*",
            "min_parallel_*",
            "parallel_leader_participation",
            "io_*",
            "backend_flush_after",
            "bgwriter_*",
        ),
    ),
    "WAL and checkpoints": (
        "checkpoint spacing, WAL size and durability per commit are the DBA's trade-offs "
        "(fsync and full_page_writes are not: turning them off risks corruption)",
        (
            "max_wal_size",
            "min_wal_size",
            "checkpoint_*",
            "wal_buffers",
            "wal_compression",
            "wal_writer_*",
            "wal_keep_size",
            "max_slot_wal_keep_size",
            "commit_delay",
            "commit_siblings",
            "synchronous_commit",
            "wal_level",
        ),
    ),
    "replication": (
        "standbys, their feedback and delays, and which standbys are synchronous",
        (
            "synchronous_standby_names",
            "hot_standby",
            "hot_standby_feedback",
            "max_standby_*_delay",
            "wal_receiver_*",
            "wal_sender_timeout",
            "max_wal_senders",
            "max_replication_slots",
            "recovery_min_apply_delay",
            "wal_retrieve_retry_interval",
            "idle_replication_slot_timeout",
        ),
    ),
    "locks": (
        "lock table sizes",
        ("max_locks_per_transaction", "max_pred_locks_per_*", "max_prepared_transactions"),
    ),
    "statistics and diagnostics": (
        "what the server measures and logs to diagnose (never where or how it logs: the judge "
        "reads that log)",
        (
            "track_io_timing",
            "track_wal_io_timing",
            "track_functions",
            "track_commit_timestamp",
            "log_min_duration_statement",
            "log_min_duration_sample",
            "log_statement_sample_rate",
            "log_transaction_sample_rate",
            "log_autovacuum_min_duration",
            "log_checkpoints",
            "log_lock_waits",
            "log_recovery_conflict_waits",
            "log_temp_files",
            "log_connections",
            "log_disconnections",
            "pg_stat_statements.max",
            "pg_stat_statements.save",
            "auto_explain.*",
        ),
    ),
    "formats and storage": (
        "client-facing formats and where temporary and new objects go",
        (
            "datestyle",
            "timezone",
            "intervalstyle",
            "extra_float_digits",
            "bytea_output",
            "default_toast_compression",
            "temp_tablespaces",
            "default_tablespace",
            "gin_*",
        ),
    ),
}


def agent_settable(name: str) -> bool:
    """Whether the agent's role may SET / ALTER SYSTEM the parameter ``name``: a managed
    parameter (:data:`MANAGED_PARAMETERS`) that is not the harness's."""
    lowered = name.lower()
    if any(fnmatch.fnmatchcase(lowered, p) for p in HARNESS_PARAMETERS):
        return False
    return any(
        fnmatch.fnmatchcase(lowered, p)
        for _, patterns in MANAGED_PARAMETERS.values()
        for p in patterns
    )


async def grant_cloud_dba(
    conn: asyncpg.Connection, role: str, *, owner: str | None, managed_roles: list[str]
) -> None:
    """Give ``role`` the cloud-DBA privileges on the server ``conn`` is connected to (as a
    superuser, in the fixture database)."""
    major = int(await conn.fetchval("SHOW server_version_num")) // 10000
    r = quote_ident(role)
    createrole = "CREATEROLE" if await can_hold_createrole(conn, major) else "NOCREATEROLE"
    await conn.execute(f"ALTER ROLE {r} NOSUPERUSER {createrole} LOGIN")
    for builtin, since in _ROLES_BY_VERSION:
        if major >= since:
            await conn.execute(f"GRANT {builtin} TO {r}")
    if owner is not None:
        await conn.execute(f"GRANT {quote_ident(owner)} TO {r}")
    if major >= 16:
        for other in managed_roles:
            await conn.execute(
                f"GRANT {quote_ident(other)} TO {r} WITH ADMIN OPTION, INHERIT FALSE, SET FALSE"
            )
    await conn.execute(f"GRANT EXECUTE ON FUNCTION pg_reload_conf() TO {r}")
    names = [
        row["name"]
        for row in await conn.fetch(
            "SELECT name FROM pg_settings WHERE context <> 'internal' ORDER BY name"
        )
        if agent_settable(row["name"])
    ]
    if names:
        await conn.execute(f"GRANT SET, ALTER SYSTEM ON PARAMETER {', '.join(names)} TO {r}")


async def can_hold_createrole(conn: asyncpg.Connection, major: int) -> bool:
    """Whether CREATEROLE is safe to give on this server: from PostgreSQL 16 it grants only the
    roles it administers; on 15 only with dbaops' role guard loaded (without it CREATEROLE
    grants ``pg_execute_server_program``; a server dbaops runs always has the guard, a user's
    own PostgreSQL 15 may not, and the agent then manages no roles there)."""
    if major > LAST_UNGUARDED_MAJOR:
        return True
    guard = await conn.fetchval("SELECT current_setting('dbaops_guard.protected_roles', true)")
    return guard is not None


async def forbidden_memberships(conn: asyncpg.Connection, role: str) -> list[str]:
    """Privileges ``role`` holds that the cloud-DBA role must not (empty when it is sound)."""
    row = await conn.fetchrow("SELECT rolsuper FROM pg_roles WHERE rolname = $1", role)
    found = ["superuser"] if row is not None and row["rolsuper"] else []
    for name in FORBIDDEN_ROLES:
        if await conn.fetchval("SELECT pg_has_role($1, $2, 'USAGE')", role, name):
            found.append(name)
    return found
