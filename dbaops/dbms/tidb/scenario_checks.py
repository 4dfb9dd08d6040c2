"""TiDB's own checks of a scenario file, beyond what its capabilities declare
(:class:`~dbaops.dbms.capabilities.EngineCapabilities`: the standby, the docker backend and
the fault and check kinds it cannot run are refused from there). Reached through the dialect
(``EngineDialect.scenario_problems``)."""

from __future__ import annotations

from pydantic import BaseModel

from dbaops.scenario.model import Scenario
from dbaops.workloads.spec import WorkloadLibrary


def scenario_problems(
    sc: Scenario, lib: WorkloadLibrary, parts: list[tuple[str, BaseModel]]
) -> list[str]:
    """TiDB's own checks of a scenario: none beyond its capabilities yet."""
    del sc, lib, parts
    return []
