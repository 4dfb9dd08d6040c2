"""Loading scenario and workload-library files with one clear error per problem."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dbaops.dbms.dialect import engine_dialect
from dbaops.scenario.consistency import scenario_problems
from dbaops.scenario.model import (
    DEFAULT_SCENARIO_DATE,
    FORMAT_VERSION,
    History,
    Scenario,
)
from dbaops.workloads.spec import LibraryExtension, WorkloadLibrary

#: Bump when the fixture's roles, grants, harness settings or preparation procedure change: old
#: snapshots rebuild (3: a preparation starts from initdb; the replica profile; history; 4: the
#: harness's monitoring role, and extension objects left to the superuser; 5: no trust: every
#: role logs in with a password).
FIXTURE_VERSION = 5

M = TypeVar("M", bound=BaseModel)


class ScenarioError(ValueError):
    """A scenario or library file is malformed; the message names file, field and problem."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(
            f"{path}: " + ("\n  " if len(problems) > 1 else "") + "\n  ".join(problems)
        )


def _repo_dir(name: str) -> Path:
    env = os.environ.get(f"DBAOPS_{name.upper()}")
    if env:
        return Path(env)
    cwd = Path.cwd() / name
    if cwd.is_dir():
        return cwd
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent / name
    if checkout.is_dir():
        return checkout
    return package / "_library" / name  # a non-editable install (see setup.py)


def timelines_dir() -> Path:
    """Directory of the scenario library ($DBAOPS_TIMELINES, ./timelines, the checkout's, or
    the copy installed with the package)."""
    return _repo_dir("timelines")


def workloads_dir() -> Path:
    """Directory of the workload library ($DBAOPS_WORKLOADS, ./workloads, the checkout's, or
    the copy installed with the package)."""
    return _repo_dir("workloads")


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _format_error(err: Any) -> str:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p and "]" in p))
    where = _loc(loc)
    etype = err["type"]
    if etype == "union_tag_invalid":
        ctx = err.get("ctx", {})
        return (
            f"{where}.{ctx.get('discriminator', '').strip(chr(39))}: unknown "
            f"{ctx.get('tag')!r} (known: {ctx.get('expected_tags')})"
        )
    if etype == "union_tag_not_found":
        ctx = err.get("ctx", {})
        return f"{where}: missing discriminator field {ctx.get('discriminator')}"
    if etype == "extra_forbidden":
        return f"{where}: unknown field"
    if etype == "missing":
        return f"{where}: required field is missing"
    return f"{where}: {err['msg']}"


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(path, ["file not found"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ScenarioError(
            path, [f"{where}invalid YAML: {getattr(exc, 'problem', exc)}"]
        ) from None
    if not isinstance(data, dict):
        raise ScenarioError(path, ["expected a mapping at the top level"])
    return data


def _validate(model: type[M], data: Any, path: Path) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(path, [_format_error(e) for e in exc.errors()]) from None


def load_yaml_model(model: type[M], path: Path) -> M:
    """Read ``path`` as YAML into ``model``; a malformed file raises :class:`ScenarioError`
    naming the file and, for each problem, the field."""
    return _validate(model, _read_yaml(path), path)


def load_library(library_id: str, directory: Path | None = None) -> WorkloadLibrary:
    """Load ``workloads/<library_id>.yaml``."""
    d = directory or workloads_dir()
    path = d / f"{library_id}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in d.glob("*.yaml"))
        raise ScenarioError(path, [f"unknown workload library {library_id!r} (known: {known})"])
    lib = _validate(WorkloadLibrary, _read_yaml(path), path)
    if lib.id != library_id:
        raise ScenarioError(path, [f"id: {lib.id!r} does not match the file name {library_id!r}"])
    return lib


def migrate(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Bring a scenario file's data to the current format; returns it with notes on what
    changed. A file without ``format`` is format 1 (dbaops 0.1): it reads as format 2 as is."""
    notes: list[str] = []
    version = data.get("format", 1)
    if version == 1:
        data = {"format": 2, **data}
        notes.append("format: 1 (no 'format' field); read as format 2, add 'format: 2'")
    return data, notes


def _substitute_date(data: Any, date: str) -> Any:
    """``{date}`` in every string of the file becomes the scenario date (ISO)."""
    if isinstance(data, str):
        return data.replace("{date}", date)
    if isinstance(data, list):
        return [_substitute_date(x, date) for x in data]
    if isinstance(data, dict):
        return {k: _substitute_date(v, date) for k, v in data.items()}
    return data


def _scenario_date(data: dict[str, Any]) -> str:
    db = data.get("database")
    raw = db.get("date") if isinstance(db, dict) else None
    if raw is None:
        return DEFAULT_SCENARIO_DATE.isoformat()
    try:
        return dt.date.fromisoformat(str(raw)).isoformat()
    except ValueError:
        return str(raw)  # the schema reports it


def read_scenario(path: Path) -> tuple[Scenario, list[str]]:
    """Parse and validate one scenario file (no library cross-checks); returns notes too."""
    data, notes = migrate(_read_yaml(path))
    if data.get("format") != FORMAT_VERSION:
        raise ScenarioError(
            path,
            [f"format: unsupported version {data.get('format')!r} (this dbaops reads "
             f"format {FORMAT_VERSION}; 1 is migrated on load)"],
        )  # fmt: skip
    data = _substitute_date(data, _scenario_date(data))
    return _validate(Scenario, data, path), notes


def scenario_library(sc: Scenario, path: Path) -> WorkloadLibrary:
    """The scenario's workload library with its local parts (``database.extend``) added."""
    known = sorted(p.stem for p in workloads_dir().glob("*.yaml"))
    if sc.database.library not in known:
        problem = f"database.library: unknown workload library {sc.database.library!r}"
        raise ScenarioError(path, [f"{problem} (known: {known})"])
    lib = load_library(sc.database.library)
    ext = sc.database.extend
    if ext == LibraryExtension():
        return lib
    try:
        merged = lib.extended(ext)
    except ValueError as exc:
        raise ScenarioError(path, [f"database.extend: {exc}"]) from None
    try:  # the library's own rules (argument bounds name parameters, ...) over the union
        return WorkloadLibrary.model_validate(merged.model_dump(by_alias=True))
    except ValidationError as exc:
        raise ScenarioError(
            path, [f"database.extend: {_format_error(e)}" for e in exc.errors()]
        ) from None


def load_scenario(ref: str | Path) -> tuple[Scenario, WorkloadLibrary, Path]:
    """Load a scenario by id (from the timelines library) or by path; validate it fully."""
    sc, lib, path, _ = check_scenario(ref)
    return sc, lib, path


def check_scenario(ref: str | Path) -> tuple[Scenario, WorkloadLibrary, Path, list[str]]:
    """:func:`load_scenario`, with the notes on what loading it changed (a migrated format)."""
    path = Path(ref)
    if not path.suffix:
        path = timelines_dir() / f"{ref}.yaml"
        if not path.exists():
            known = [p.stem for p in sorted(timelines_dir().glob("*.yaml"))]
            raise ScenarioError(path, [f"unknown scenario {str(ref)!r} (known: {known})"])
    sc, notes = read_scenario(path)
    lib = scenario_library(sc, path)
    problems = scenario_problems(sc, lib)
    if problems:
        raise ScenarioError(path, problems)
    return sc, lib, path, notes


def list_scenarios(directory: Path | None = None) -> list[tuple[Path, Scenario | ScenarioError]]:
    """All scenario files with their parsed model or the error that stops them."""
    out: list[tuple[Path, Scenario | ScenarioError]] = []
    for path in sorted((directory or timelines_dir()).glob("*.yaml")):
        try:
            out.append((path, load_scenario(path)[0]))
        except ScenarioError as exc:
            out.append((path, exc))
    return out


def _transactions_used(workloads: list[Any], lib: WorkloadLibrary, **dump: Any) -> dict[str, Any]:
    """The transaction templates ``workloads`` run, dumped, by name."""
    used = sorted({t for w in workloads for t in getattr(w, "mix", {})})
    return {t: lib.transactions[t].model_dump(mode="json", **dump) for t in used}


def _jobs_used(workloads: list[Any], lib: WorkloadLibrary, **dump: Any) -> dict[str, Any]:
    """The job templates ``workloads`` run, dumped, by name."""
    used = sorted({j.template for w in workloads for j in getattr(w, "jobs", [])})
    return {j: lib.jobs[j].model_dump(mode="json", **dump) for j in used}


def preparation_key(
    sc: Scenario, lib: WorkloadLibrary, server_version: str, history: History | None = None
) -> str:
    """Hash of everything that determines the dirty snapshot (re-prepare when it changes): the
    fixture (the library's schema, data, roles and parameters, with the scenario's own parts),
    the jobs whose expected results it stores, construction and preconditions. Templates the
    scenario does not use, and transactions (they run only at run time), do not count."""
    payload = {
        "fixture": lib.fixture_part(),
        "jobs": _jobs_used(sc.workloads, lib),
        "database": sc.database.model_dump(mode="json"),
        "construction": [c.model_dump(mode="json") for c in sc.preparation.construction],
        "preconditions": [c.model_dump(mode="json") for c in sc.preparation.preconditions],
        "server": server_version,
        "fixture_version": FIXTURE_VERSION,
    }
    if history is not None:  # the history's workloads and their templates shape it too
        runs = sc.history_workloads()
        payload["history"] = history.model_dump(mode="json")
        payload["history_workloads"] = [w.model_dump(mode="json") for w in runs]
        payload["history_templates"] = _transactions_used(runs, lib)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def definition_key(sc: Scenario, lib: WorkloadLibrary) -> str:
    """Hash of everything a scenario's validation depends on in its files: the scenario as
    written, and the shared parts it uses (the fixture, and the transaction and job templates
    its workloads run; a history runs the same ones). A committed validation record with
    another key is stale."""
    # As written (defaults left out), so that a new optional field of the format, which
    # changes no existing scenario, does not make every record stale.
    scenario = sc.model_dump(mode="json", exclude_defaults=True)
    canonical = engine_dialect(sc.engine).canonical_sql
    payload = {
        "scenario": _canonical(scenario, canonical) if canonical else scenario,
        "fixture": lib.fixture_part(),
        "transactions": _transactions_used(sc.workloads, lib, exclude_defaults=True),
        "jobs": _jobs_used(sc.workloads, lib, exclude_defaults=True),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


#: Keys whose values (a string, or a list of strings) are SQL in a dumped scenario.
_SQL_KEYS = frozenset({"sql", "statements", "query", "for_each"})


def _canonical(node: Any, canonical: Callable[[str], str], sql: bool = False) -> Any:
    """A dumped scenario with its SQL in the engine's ``canonical`` form (PostgreSQL's: the
    business schema implicit), so a record stays current when a scenario's SQL only gains the
    schema of the names it already meant."""
    if isinstance(node, dict):
        return {k: _canonical(v, canonical, k in _SQL_KEYS) for k, v in node.items()}
    if isinstance(node, list):
        return [_canonical(v, canonical, sql) for v in node]
    if sql and isinstance(node, str):
        return canonical(node)
    return node


def scenario_json_schema() -> dict[str, Any]:
    """JSON Schema of scenario files (for editors and validation outside dbaops)."""
    return Scenario.model_json_schema()
