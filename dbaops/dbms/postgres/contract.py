"""What the engine certification suite needs to know of PostgreSQL
(:mod:`dbaops.testing.engine_contract`)."""

from __future__ import annotations

from dbaops.testing.engine_contract import EngineContract

CONTRACT = EngineContract(
    database="postgres",
    scratch_table="public.contract_marker",
    scenario="pg-qt-01",
    setting="log_autovacuum_min_duration",
    setting_values=(("4321", "4321ms"), ("4322", "4322ms")),
    read_setting_sql="SELECT pg_catalog.current_setting('log_autovacuum_min_duration')",
    set_action="set_parameter",
    terminate_sql="SELECT pg_catalog.pg_terminate_backend({session})",
)
