"""What only PostgreSQL checks in a scenario file: harness SQL that the search path could
redirect, and superuser faults that run while the agent works on objects it could have
planted code in (the adversary boundary). Reached through the dialect
(``EngineDialect.scenario_problems``)."""

from __future__ import annotations

from pydantic import BaseModel

from dbaops.dbms.postgres.search_path import created_routines, search_path_problems
from dbaops.dbms.postgres.superuser_reach import agent_reachable
from dbaops.scenario.consistency import construction_sql, sql_as_run, sql_fields
from dbaops.scenario.model import Scenario
from dbaops.workloads.spec import WorkloadLibrary


def scenario_problems(
    sc: Scenario, lib: WorkloadLibrary, parts: list[tuple[str, BaseModel]]
) -> list[str]:
    """PostgreSQL's own checks of a scenario (see the module docstring)."""
    return [*_search_path_problems(sc, lib, parts), *_live_superuser_problems(sc, lib)]


def _search_path_problems(
    sc: Scenario, lib: WorkloadLibrary, parts: list[tuple[str, BaseModel]]
) -> list[str]:
    """Harness SQL (preparation, events, evaluation: the checks and faults the harness runs
    with ``search_path = pg_catalog, pg_temp``) that would resolve a business object through
    the search path, or call code outside ``pg_catalog`` that the scenario did not make as the
    superuser in its construction. The workloads' SQL is the application's, and the solutions'
    the agent's: both keep their roles' own path."""
    own = frozenset(
        name
        for construction in sc.preparation.construction
        if getattr(construction, "role", None) == "postgres"
        for _, sql in sql_fields(construction)
        for name in created_routines(construction_sql(sc, lib, sql))
    )
    return [
        f"{where}.{field}: {problem.message()}"
        for where, field, sql in sql_as_run(sc, lib, parts)
        if not where.startswith("workloads")
        for problem in search_path_problems(sql, own)
    ]


def _live_superuser_problems(sc: Scenario, lib: WorkloadLibrary) -> list[str]:
    """A fault that runs SQL as a superuser after the agent has started (an event after
    t = 0, or a live actor's loop) must touch nothing the agent could have planted code in
    (:mod:`dbaops.dbms.postgres.superuser_reach`)."""
    superusers = {"postgres"} | {r.name for r in lib.roles if r.superuser}
    problems: list[str] = []
    for i, event in enumerate(sc.events):
        fault = event.fault
        role = getattr(fault, "role", None)
        if fault is None or role not in superusers or not (event.at > 0 or fault.live):
            continue
        sqls = [getattr(fault, "sql", None), *getattr(fault, "statements", [])]
        reach = [what for sql in sqls if isinstance(sql, str) for what in agent_reachable(sql)]
        if reach:
            problems.append(
                f"events[{i}].fault: runs as the superuser {role!r} while the agent works, and "
                f"{', '.join(reach[:4])} could run code the agent planted (a trigger, rule, "
                "default, view or policy) as a superuser: run it as a fixture role (role:), "
                "or before the agent starts"
            )
    return problems
