"""What the engine certification suite needs to know of TiDB
(:mod:`dbaops.testing.engine_contract`)."""

from __future__ import annotations

from dbaops.testing.engine_contract import EngineContract

CONTRACT = EngineContract(
    database="test",
    scratch_table="test.contract_marker",
    scenario="tb-qp-01",
    setting="tidb_ddl_reorg_worker_cnt",
    setting_values=(("5", "5"), ("6", "6")),
    read_setting_sql="SELECT CAST(@@GLOBAL.tidb_ddl_reorg_worker_cnt AS CHAR)",
    set_action="set_variable",
    terminate_sql="KILL {session}",
)
