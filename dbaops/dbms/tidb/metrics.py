"""TiDB's metrics: what its sampler (:mod:`dbaops.dbms.tidb.sampler`) records, by name, kind
and unit; free of any driver, so scenarios' metric checks are validated against it offline."""

from __future__ import annotations

from dbaops.dbms.metric_spec import SAMPLER_METRICS, MetricSpec

#: Gauges: Prometheus family -> (metric name, label key or None).
GAUGES: dict[str, tuple[str, str | None]] = {
    "tidb_server_connections": ("tidb.connections", None),
    "process_resident_memory_bytes": ("tidb.memory_rss_bytes", None),
    "go_memstats_heap_inuse_bytes": ("tidb.heap_inuse_bytes", None),
    "tidb_ddl_waiting_jobs": ("tidb.ddl_waiting_jobs", None),
}
#: Counters, recorded as rates per second: family -> (metric name, label key or None).
COUNTERS: dict[str, tuple[str, str | None]] = {
    "tidb_server_query_total": ("tidb.queries_per_s", "result"),
    "tidb_session_transaction_total": ("tidb.transactions_per_s", None),
    "tidb_server_execute_error_total": ("tidb.errors_per_s", None),
    "process_cpu_seconds_total": ("tidb.cpu_cores", None),
    "tidb_server_handle_query_duration_seconds_count": ("tidb.statements_per_s", "sql_type"),
    "tidb_server_handle_query_duration_seconds_sum": ("tidb.statement_seconds_per_s", "sql_type"),
}
#: What the harness counts in information_schema (its own sessions left out): column -> unit.
COUNTS: dict[str, str] = {
    "active_sessions": "sessions",
    "lock_waits": "locks",
    "transactions": "xacts",
    "oldest_transaction_s": "s",
    "ddl_jobs_pending": "jobs",
}

_UNITS = {
    "tidb.connections": "connections",
    "tidb.memory_rss_bytes": "bytes",
    "tidb.heap_inuse_bytes": "bytes",
    "tidb.ddl_waiting_jobs": "jobs",
    "tidb.queries_per_s": "queries/s",
    "tidb.transactions_per_s": "xacts/s",
    "tidb.errors_per_s": "errors/s",
    "tidb.cpu_cores": "cores",
    "tidb.statements_per_s": "statements/s",
    "tidb.statement_seconds_per_s": "s/s",
}


def _spec(name: str, label: str | None, what: str) -> MetricSpec:
    return MetricSpec(name, "gauge", _UNITS[name], what, label or "")


#: Every metric a TiDB run records (rates are gauges: the sampler computed them).
REGISTRY: dict[str, MetricSpec] = {
    s.name: s
    for s in [
        *(_spec(n, k, f"{f} (status port)") for f, (n, k) in GAUGES.items()),
        *(_spec(n, k, f"rate of {f} (status port)") for f, (n, k) in COUNTERS.items()),
        *(
            MetricSpec(f"tidb.{c}", "gauge", u, f"{c} (information_schema)")
            for c, u in COUNTS.items()
        ),
        *SAMPLER_METRICS,
    ]
}
