"""PostgreSQL's standard observation surface: what a DBA's first look at a server reads.

The harness runs these (read-only, as its own hidden session) once when the agent starts, so a
scenario's environmental complexity C_s is counted over what the environment shows, not over
how a reference run happened to word its queries (:mod:`dbaops.execution.survey`). Every name is
schema-qualified; rows are capped so one busy view cannot swamp the others.
"""

from __future__ import annotations

#: Probe name -> query. Each returns at most a few hundred rows.
SURVEY_PROBES: dict[str, str] = {
    "sessions": (
        "SELECT a.pid, a.backend_type, a.usename, a.application_name, a.state, "
        "a.wait_event_type, a.wait_event, a.backend_xmin, "
        "pg_catalog.date_trunc('second', pg_catalog.now() - a.xact_start) AS xact_age, "
        "pg_catalog.left(a.query, 120) AS query "
        "FROM pg_catalog.pg_stat_activity a WHERE a.pid <> pg_catalog.pg_backend_pid() "
        "ORDER BY a.pid LIMIT 300"
    ),
    "locks": (
        "SELECT l.locktype, l.relation::pg_catalog.regclass AS relation, l.mode, l.granted, "
        "l.pid, l.transactionid FROM pg_catalog.pg_locks l "
        "WHERE l.pid <> pg_catalog.pg_backend_pid() ORDER BY l.granted, l.pid LIMIT 300"
    ),
    "tables": (
        "SELECT t.relname, t.schemaname, t.seq_scan, t.idx_scan, t.n_live_tup, t.n_dead_tup, "
        "t.n_mod_since_analyze, t.last_autovacuum, t.last_autoanalyze, t.autovacuum_count, "
        "c.reloptions FROM pg_catalog.pg_stat_user_tables t "
        "JOIN pg_catalog.pg_class c ON c.oid = t.relid ORDER BY t.relname LIMIT 300"
    ),
    "indexes": (
        "SELECT s.relname, s.indexrelname, s.idx_scan, i.indisvalid, i.indisready, "
        "pg_catalog.pg_get_indexdef(i.indexrelid) AS definition "
        "FROM pg_catalog.pg_stat_user_indexes s "
        "JOIN pg_catalog.pg_index i ON i.indexrelid = s.indexrelid ORDER BY 1, 2 LIMIT 300"
    ),
    "statements": (
        "SELECT s.calls, pg_catalog.round(s.total_exec_time::pg_catalog.numeric, 1) AS total_ms, "
        "pg_catalog.round(s.mean_exec_time::pg_catalog.numeric, 2) AS mean_ms, s.rows, "
        "pg_catalog.left(pg_catalog.regexp_replace(s.query, '\\s+', ' ', 'g'), 160) AS query "
        "FROM public.pg_stat_statements s ORDER BY s.total_exec_time DESC LIMIT 25"
    ),
    "settings": (
        "SELECT s.name, s.setting, s.unit, s.source, s.sourcefile FROM pg_catalog.pg_settings s "
        "WHERE s.source NOT IN ('default', 'override', 'client') ORDER BY s.name LIMIT 300"
    ),
    "role_settings": (
        "SELECT r.rolname, d.datname, s.setconfig FROM pg_catalog.pg_db_role_setting s "
        "LEFT JOIN pg_catalog.pg_roles r ON r.oid = s.setrole "
        "LEFT JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase ORDER BY 1, 2 LIMIT 300"
    ),
    "roles": (
        "SELECT r.rolname, r.rolcanlogin, r.rolconnlimit, r.rolsuper FROM pg_catalog.pg_roles r "
        "WHERE r.rolname !~ '^pg_' ORDER BY r.rolname LIMIT 300"
    ),
    "replication": (
        "SELECT 'sender' AS kind, r.application_name AS name, r.state, r.sync_state AS detail, "
        "pg_catalog.pg_wal_lsn_diff(r.sent_lsn, r.replay_lsn)::pg_catalog.text AS lag_bytes "
        "FROM pg_catalog.pg_stat_replication r "
        "UNION ALL SELECT 'slot', s.slot_name, s.active::pg_catalog.text, s.slot_type, "
        "s.restart_lsn::pg_catalog.text FROM pg_catalog.pg_replication_slots s "
        "UNION ALL SELECT 'prepared', p.gid, p.owner::pg_catalog.text, "
        "p.database::pg_catalog.text, p.prepared::pg_catalog.text "
        "FROM pg_catalog.pg_prepared_xacts p LIMIT 300"
    ),
}
