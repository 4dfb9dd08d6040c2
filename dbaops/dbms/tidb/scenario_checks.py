"""What a TiDB scenario cannot use (yet): a standby, the docker backend, and the fault kinds
the runner applies only to PostgreSQL or its host. Reached through the dialect
(``EngineDialect.scenario_problems``)."""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel

from dbaops.scenario.faults import FaultSpec
from dbaops.scenario.model import Scenario
from dbaops.workloads.spec import WorkloadLibrary

_FAULT_KINDS = get_args(get_args(FaultSpec)[0])

#: Fault kinds the runner applies on TiDB (the rest act on PostgreSQL or its host).
TIDB_FAULTS = {"sql", "hold_transaction", "load", "idle_connections", "instance"}


def scenario_problems(
    sc: Scenario, lib: WorkloadLibrary, parts: list[tuple[str, BaseModel]]
) -> list[str]:
    """TiDB's own checks of a scenario (see the module docstring)."""
    problems = []
    if sc.database.replica is not None:
        problems.append("database.replica: TiDB scenarios have no standby")
    if sc.backend == "docker":
        problems.append("backend: TiDB runs on the embedded backend only")
    for where, model in parts:
        kind = getattr(model, "kind", None)
        if isinstance(model, _FAULT_KINDS) and kind not in TIDB_FAULTS:
            problems.append(
                f"{where}: fault {kind!r} is not available on TiDB (available: "
                f"{', '.join(sorted(TIDB_FAULTS))})"
            )
    return problems
