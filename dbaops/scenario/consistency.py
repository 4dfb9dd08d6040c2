"""What a scenario file can get wrong that its schema cannot see: names that refer to nothing,
SQL that does not parse, reference steps that can never run.

:func:`scenario_problems` returns one message per problem, each naming the field, so
``dbaops check`` (and every run) rejects at load time what would otherwise fail, or silently do
nothing, an hour into a run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, get_args

from pydantic import BaseModel

from dbaops.dbms.dialect import engine_dialect
from dbaops.scenario.checks import (
    CheckSpec,
    LedgerCheck,
    MetricCheck,
    check_placement_problems,
    metric_check_problems,
)
from dbaops.scenario.faults import FaultSpec
from dbaops.scenario.model import OlapWorkload, Scenario
from dbaops.tools.names import AGENT_TOOLS
from dbaops.workloads.spec import PreviousArg, WorkloadLibrary

#: Fields whose string value (or list of strings) is SQL the harness will run.
_SQL_FIELDS = ("sql", "statements", "query")


def sql_problem(sql: str, engine: str = "postgres") -> str | None:
    """The parse error of ``sql`` in ``engine``'s grammar (its dialect's check), or None."""
    return engine_dialect(engine).sql_problem(sql)


def _row_filled(sql: str, for_each: str | None) -> str:
    """A ``for_each`` step's SQL with its ``{column}`` fields filled with 0 (to parse it)."""
    return re.sub(r"\{\w+\}", "0", sql) if for_each is not None else sql


def _engine_problems(
    sc: Scenario, lib: WorkloadLibrary, parts: list[tuple[str, BaseModel]]
) -> list[str]:
    """A library written for another engine, and what the scenario's engine says it cannot
    run or must not be asked to (its dialect's scenario checks)."""
    problems = []
    if lib.engine != sc.engine:
        problems.append(
            f"database.library: {lib.id!r} is written for {lib.engine}, the scenario runs on "
            f"{sc.engine}"
        )
    return [
        *problems,
        *_capability_problems(sc, parts),
        *engine_dialect(sc.engine).scenario_problems(sc, lib, parts),
    ]


_FAULT_MODELS = get_args(get_args(FaultSpec)[0])
_CHECK_MODELS = get_args(get_args(CheckSpec)[0])


def _capability_problems(sc: Scenario, parts: list[tuple[str, BaseModel]]) -> list[str]:
    """What the scenario uses that its engine does not declare it can run
    (:class:`~dbaops.dbms.capabilities.EngineCapabilities`)."""
    can = engine_dialect(sc.engine).capabilities
    engine = sc.engine
    problems = []
    if sc.database.replica is not None and not can.replica:
        problems.append(f"database.replica: {engine} scenarios have no standby")
    if sc.backend is not None and sc.backend not in can.backends:
        problems.append(
            f"backend: {engine} runs on the {' or '.join(sorted(can.backends))} backend only"
        )
    if sc.topology not in can.topologies:
        problems.append(
            f"topology: {engine} has no {sc.topology!r} topology "
            f"(it has: {', '.join(sorted(can.topologies))})"
        )
    if sc.preparation.history is not None and not can.history:
        problems.append(f"preparation.history: {engine} records no workload history")
    replica = sc.database.replica
    if (sc.database.scaled_settings or (replica and replica.scaled_settings)) and not (
        can.scaled_settings
    ):
        problems.append(f"database.scaled_settings: {engine} has no scaled server timers")
    for where, model in parts:
        if isinstance(model, _FAULT_MODELS) and model.kind not in can.fault_kinds:
            problems.append(
                f"{where}: fault {model.kind!r} is not available on {engine} (available: "
                f"{', '.join(sorted(can.fault_kinds))})"
            )
        if isinstance(model, _CHECK_MODELS) and model.check not in can.check_kinds:
            problems.append(
                f"{where}: check {model.check!r} is not available on {engine} (available: "
                f"{', '.join(sorted(can.check_kinds))})"
            )
    return problems


def _walk(node: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every (path, model) pair under ``node``, depth first."""
    if isinstance(node, BaseModel):
        yield where, node
        for name in type(node).model_fields:
            yield from _walk(getattr(node, name), f"{where}.{name}" if where else name)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _walk(item, f"{where}[{i}]")
    elif isinstance(node, dict):
        for key, item in node.items():
            if isinstance(item, BaseModel | list):
                yield from _walk(item, f"{where}.{key}")


def scenario_parts(sc: Scenario) -> list[tuple[str, BaseModel]]:
    """Every model in the scenario's preparation, events, evaluation and workloads, with its
    path in the file (the part of a scenario that names roles, workloads, servers and SQL)."""
    sections = {
        "preparation": sc.preparation,
        "events": sc.events,
        "evaluation": sc.evaluation,
        "workloads": sc.workloads,
    }
    return [item for section, node in sections.items() for item in _walk(node, section)]


def _solution_label(name: str) -> str:
    """``reference``, ``shallow``, ``alternatives[<name>]`` or ``blunt[<name>]``: where a
    solution stands in the file."""
    if ":" not in name:
        return name
    kind, own = name.split(":", 1)
    return f"{'blunt' if kind == 'blunt' else 'alternatives'}[{own}]"


def sql_fields(model: BaseModel) -> Iterator[tuple[str, str]]:
    for name in _SQL_FIELDS:
        value = getattr(model, name, None)
        if isinstance(value, str):
            yield name, value
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, str):
                    yield f"{name}[{i}]", item


def construction_sql(sc: Scenario, lib: WorkloadLibrary, sql: str) -> str:
    """Construction SQL as it runs: ``{param}``, ``{seed}`` and ``{date}`` substituted as in
    the fixture's SQL, so a construction scales with ``database.params``."""
    return lib.render(sql, sc.database.params, sc.database.seed, sc.database.date.isoformat())


def sql_as_run(
    sc: Scenario, lib: WorkloadLibrary, parts: list[tuple[str, BaseModel]]
) -> Iterator[tuple[str, str, str]]:
    """(where, field, SQL as it runs) of every SQL field of ``parts`` (construction SQL with
    its parameters filled)."""
    for where, model in parts:
        built = where.startswith("preparation.construction")
        for field, sql in sql_fields(model):
            yield where, field, construction_sql(sc, lib, sql) if built else sql


def _sql_problems(
    sc: Scenario, lib: WorkloadLibrary, parts: list[tuple[str, BaseModel]]
) -> list[str]:
    problems = [
        f"{where}.{field}: {problem}"
        for where, field, sql in sql_as_run(sc, lib, parts)
        if (problem := sql_problem(sql, sc.engine)) is not None
    ]
    params = {**lib.params, **sc.database.params}
    date = sc.database.date.isoformat()
    for field in ("schema_sql", "data_sql", "post_sql"):
        script = lib.render(getattr(lib, field), params, sc.database.seed, date)
        if script.strip() and (problem := sql_problem(script, sc.engine)) is not None:
            problems.append(f"database.library {lib.id} (with extend).{field[:-4]}: {problem}")
    # The library's templates with the scenario's own (database.extend) among them.
    for tname, t in lib.transactions.items():
        for i, st in enumerate(t.statements):
            if (problem := sql_problem(st.sql, sc.engine)) is not None:
                problems.append(f"transactions.{tname}.statements[{i}].sql: {problem}")
    for jname, job in lib.jobs.items():
        if (problem := sql_problem(job.sql, sc.engine)) is not None:
            problems.append(f"jobs.{jname}.sql: {problem}")
    return problems


def _reference_problems(sc: Scenario) -> list[str]:
    actions = engine_dialect(sc.engine).instance_actions
    problems: list[str] = []
    events = {e.id: e for e in sc.events}
    for name, solution in sc.solutions().items():
        for i, step in enumerate(solution.steps):
            where = f"{_solution_label(name)}.steps[{i}]"
            if step.tool not in AGENT_TOOLS:
                problems.append(
                    f"{where}.tool: unknown tool {step.tool!r} (known: {', '.join(AGENT_TOOLS)})"
                )
            if step.for_each is not None:
                if (problem := sql_problem(step.for_each, sc.engine)) is not None:
                    problems.append(f"{where}.for_each: {problem}")
            if step.tool == "execute_sql":
                sql = step.args.get("sql")
                if not isinstance(sql, str):
                    problems.append(f"{where}.args.sql: execute_sql needs the SQL to run")
                elif problem := sql_problem(_row_filled(sql, step.for_each), sc.engine):
                    problems.append(f"{where}.args.sql: {problem}")
            if step.tool == "manage_instance" and step.args.get("action") not in actions:
                problems.append(
                    f"{where}.args.action: unknown action {step.args.get('action')!r} "
                    f"(known: {', '.join(actions)})"
                )
            event_id = step.event or sc.first_event_id
            if event_id is None:
                problems.append(f"{where}.event: the scenario has no events, so no task to act on")
                continue
            event = events.get(event_id)
            if event is None:
                problems.append(
                    f"{where}.event: unknown event {event_id!r} (events: {', '.join(events)})"
                )
            elif event.alert is None and event.inspection is None:
                problems.append(
                    f"{where}.event: event {event_id!r} posts no task (it has no alert or "
                    "inspection), so this step can never run"
                )
    return problems


def _check_problems(sc: Scenario, parts: list[tuple[str, BaseModel]]) -> list[str]:
    problems: list[str] = []
    workloads = [w.name for w in sc.workloads]
    groups = {
        "preparation.preconditions": [("preparation.preconditions", sc.preparation.preconditions)],
        "preparation.manifestation": [("preparation.manifestation", sc.preparation.manifestation)],
        "evaluation": [
            ("evaluation.terminal", sc.evaluation.terminal),
            ("evaluation.integrity", sc.evaluation.integrity),
        ],
    }
    for group, sections in groups.items():
        seen: dict[str, str] = {}
        for section, checks in sections:
            for i, check in enumerate(checks):
                where = f"{section}[{i}]"
                if check.name in seen:
                    problems.append(
                        f"{where}.name: duplicate check name {check.name!r} (also "
                        f"{seen[check.name]}; names in {group} must be unique: verdicts refer "
                        "to them)"
                    )
                seen.setdefault(check.name, where)
    mixed = {t for w in sc.workloads if not isinstance(w, OlapWorkload) for t in w.mix}
    for section, checks in groups["evaluation"]:
        for i, check in enumerate(checks):
            for unit in check.units if isinstance(check, LedgerCheck) else {}:
                if unit not in mixed:
                    problems.append(
                        f"{section}[{i}].units.{unit}: no workload runs transaction {unit!r}, so "
                        f"the ledger never counts it (run: {', '.join(sorted(mixed)) or 'none'})"
                    )
    for where, model in parts:
        wname = getattr(model, "workload", None)
        if isinstance(wname, str) and getattr(model, "check", None) is not None:
            if wname not in workloads:
                problems.append(
                    f"{where}.workload: unknown workload {wname!r} "
                    f"(workloads: {', '.join(workloads) or 'none'})"
                )
    return problems


def _metric_problems(sc: Scenario, parts: list[tuple[str, BaseModel]]) -> list[str]:
    """Metric checks against the metrics the scenario's engine records."""
    registry = engine_dialect(sc.engine).metrics
    return [
        problem
        for where, model in parts
        if isinstance(model, MetricCheck)
        for problem in metric_check_problems(model, where, registry, sc.engine)
    ]


def _library_problems(
    sc: Scenario, lib: WorkloadLibrary, parts: list[tuple[str, BaseModel]]
) -> list[str]:
    problems: list[str] = []
    roles = {r.name for r in lib.roles} | {"postgres"}
    for i, w in enumerate(sc.workloads):
        if isinstance(w, OlapWorkload):
            for j, job in enumerate(w.jobs):
                if job.template not in lib.jobs:
                    problems.append(
                        f"workloads[{i}].jobs[{j}].template: unknown job {job.template!r} "
                        f"(known in {lib.id}: {sorted(lib.jobs)})"
                    )
        else:
            for t in w.mix:
                if t not in lib.transactions:
                    problems.append(
                        f"workloads[{i}].mix: unknown transaction {t!r} "
                        f"(known in {lib.id}: {sorted(lib.transactions)})"
                    )
                elif w.protocol == "simple" and any(
                    isinstance(a, PreviousArg)
                    for st in lib.transactions[t].statements
                    for a in st.args
                ):
                    problems.append(
                        f"workloads[{i}].protocol: simple, but transaction {t!r} uses an "
                        "earlier statement's result (previous), which the simple protocol "
                        "does not return; use protocol: prepared"
                    )
    for p in sorted(set(sc.database.params) - set(lib.params)):
        problems.append(f"database.params.{p}: unknown parameter (known: {sorted(lib.params)})")
    for where, model in parts:
        role = getattr(model, "role", None)
        if isinstance(role, str) and role not in roles:
            problems.append(
                f"{where}.role: unknown role {role!r} (known: {', '.join(sorted(roles))})"
            )
    for kind, templates in (("transactions", lib.transactions), ("jobs", lib.jobs)):
        for tname, template in templates.items():
            if template.role not in roles:
                problems.append(
                    f"{kind}.{tname}.role: unknown role {template.role!r} "
                    f"(known: {', '.join(sorted(roles))})"
                )
    dba = {r.name for r in lib.roles if r.dba}
    if sc.agent.elevated is None and sc.agent.role not in dba:
        problems.append(
            f"agent.role: {sc.agent.role!r} is not a dba role of {lib.id} "
            f"(dba roles: {', '.join(sorted(dba)) or 'none'})"
        )
    return problems


def _replica_problems(sc: Scenario, parts: list[tuple[str, BaseModel]]) -> list[str]:
    """Parts on the standby need the replica profile, and the standby is made only after
    construction and preconditions (it is a copy of the prepared primary)."""
    problems: list[str] = []
    for where, model in parts:
        if getattr(model, "kind", None) == "tablespace_volume" and sc.database.replica:
            problems.append(
                f"{where}: a tablespace volume cannot be used with database.replica (on one "
                "host the standby would replay the tablespace into the same location)"
            )
        if getattr(model, "server", "primary") != "standby":
            continue
        if sc.database.replica is None:
            problems.append(f"{where}.server: 'standby' needs a replica (declare database.replica)")
        elif where.startswith(("preparation.construction", "preparation.preconditions")):
            problems.append(
                f"{where}.server: the standby is made after construction and preconditions; "
                "act on it from preparation.activation or an event"
            )
    return problems


def _container_problems(sc: Scenario, parts: list[tuple[str, BaseModel]]) -> list[str]:
    """Faults only a container can suffer need a scenario that runs in one."""
    problems = []
    for where, model in parts:
        if getattr(type(model), "needs_container", False) and sc.backend != "docker":
            kind = getattr(model, "kind", "?")
            problems.append(
                f"{where}: fault {kind!r} needs a server in a container: declare "
                "backend: docker (the scenario then runs only where a Docker daemon does)"
            )
    return problems


def _solution_problems(sc: Scenario) -> list[str]:
    """A Hard bounded scenario declares its reflex fix, so validation can show the verifier
    rejects it (paper §4.2; a persistent scenario is Hard at corpus level)."""
    if sc.mode == "bounded" and sc.difficulty == "hard" and sc.shallow is None:
        return ["shallow: a Hard scenario declares the shallow fix that must fail Outcome"]
    return []


def scenario_problems(sc: Scenario, lib: WorkloadLibrary) -> list[str]:
    """Every cross-reference and SQL problem of ``sc`` against its (extended) library."""
    parts = scenario_parts(sc)
    return [
        *_library_problems(sc, lib, parts),
        *_check_problems(sc, parts),
        *_metric_problems(sc, parts),
        *check_placement_problems(sc),
        *_reference_problems(sc),
        *_solution_problems(sc),
        *_replica_problems(sc, parts),
        *_container_problems(sc, parts),
        *_sql_problems(sc, lib, parts),
        *_engine_problems(sc, lib, parts),
    ]
