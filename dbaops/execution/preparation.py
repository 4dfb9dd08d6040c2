"""Preparation of a run's database: the dirty snapshot restored, or built and captured first.

Building runs the fixture, the workload history, the scenario's construction steps and its
preconditions, creates the standby of the replica profile and stores the OLAP jobs' reference
result hashes with the snapshot.
"""

from __future__ import annotations

import json
import shutil
import time
from typing import Any

import anyio

from dbaops.clock import ScenarioClock
from dbaops.dbms.interface import DatabaseEngine, DatabaseServer, SnapshotStore
from dbaops.dbms.registry import get_engine
from dbaops.dbms.sessions import RunEndpoint
from dbaops.execution.actors import ActorContext, run_fault
from dbaops.execution.checks import evaluate_check
from dbaops.execution.history import record_history
from dbaops.record.kinds import PhaseRecord
from dbaops.record.trace import RecordSink
from dbaops.scenario.consistency import construction_sql
from dbaops.scenario.faults import HoldTransaction, SqlFault
from dbaops.scenario.loader import preparation_key
from dbaops.scenario.model import History, OlapWorkload, ReplicaSpec, Scenario
from dbaops.workloads.drivers import result_hash
from dbaops.workloads.spec import WorkloadLibrary


class NotManifested(RuntimeError):
    """The scenario's preconditions or manifestation predicates did not hold: the run is not
    admitted."""


async def prepare_state(
    sc: Scenario,
    lib: WorkloadLibrary,
    backend: DatabaseServer,
    trace: RecordSink,
    clock: ScenarioClock,
    fresh: bool,
    history: History | None,
) -> dict[str, Any]:
    """Restore the dirty snapshot (building it first if needed); returns preparation metadata."""
    version = await backend.server_version()
    if history is not None and backend.cluster is None:
        trace.write(PhaseRecord(phase="history", detail={"skipped": "needs the embedded backend"}))
        history = None
    key = preparation_key(sc, lib, version, history)
    store = backend.snapshots
    if store is None:
        return await _build_state(sc, lib, backend, trace, clock, history, key, version)
    if not fresh:
        async with store.lock(exclusive=False):
            if store.has(key):
                return await _restore(store, key, trace)
    async with store.lock(exclusive=True):
        if store.has(key) and not fresh:  # another worker built it meanwhile
            return await _restore(store, key, trace)
        return await _build_state(sc, lib, backend, trace, clock, history, key, version)


async def _restore(store: SnapshotStore, key: str, trace: RecordSink) -> dict[str, Any]:
    """Restore snapshot ``key`` (under the group's lock); its preparation metadata."""
    meta: dict[str, Any] = json.loads((store.root / key / "prep.json").read_text())
    seconds = await store.restore(key)
    trace.write(PhaseRecord(phase="restore", duration_s=seconds, detail={"snapshot": key}))
    return meta


async def _build_state(
    sc: Scenario,
    lib: WorkloadLibrary,
    backend: DatabaseServer,
    trace: RecordSink,
    clock: ScenarioClock,
    history: History | None,
    key: str,
    version: str,
) -> dict[str, Any]:
    """Build the dirty state from initdb and (embedded: under the group's exclusive lock)
    capture it as snapshot ``key``, then restore it so every run starts from the copy."""
    engine = get_engine(sc.engine)
    cluster = backend.cluster
    endpoint = backend.for_database(lib.database)
    t0 = time.monotonic()
    if cluster is not None:
        await cluster.reinitialize()
        trace.write(PhaseRecord(phase="initdb", duration_s=time.monotonic() - t0))
    if sc.database.settings:
        await _apply_server_settings(engine, sc.database.settings, backend, trace)
    params = {**lib.params, **sc.database.params}
    day = sc.database.date.isoformat()
    build_s = await engine.build_fixture(backend, lib, params, sc.database.seed, day)
    trace.write(PhaseRecord(phase="build_fixture", duration_s=build_s, detail={"params": params}))
    history_summary: dict[str, Any] | None = None
    if history is not None and cluster is not None:  # (no history without the embedded server)
        t1 = time.monotonic()
        history_summary = await record_history(
            sc, lib, engine, backend, history, cluster.root / "history-staging"
        )
        trace.write(
            PhaseRecord(phase="history", duration_s=time.monotonic() - t1, detail=history_summary)
        )
    ctx = ActorContext(
        endpoint=endpoint,
        clock=clock,
        trace=trace,
        instance=cluster,
        host=backend.host,
        label="prep",
    )
    before = await engine.statement_marks(endpoint)
    # A held transaction stays in place for the steps after it and ends, its session gone,
    # when construction ends (the incident's bystander, not part of the state); every other
    # step runs to its end, a load until its sessions stop (pg-sf-12 fills a volume so).
    async with anyio.create_task_group() as bystanders:
        for i, op in enumerate(sc.preparation.construction):
            t1 = time.monotonic()
            if isinstance(op, SqlFault):  # {param}, {seed}, {date} as in the fixture's SQL
                op = op.model_copy(update={"sql": construction_sql(sc, lib, op.sql)})
            if isinstance(op, HoldTransaction):
                await bystanders.start(run_fault, op, ctx)
            else:
                await run_fault(op, ctx)
            trace.write(
                PhaseRecord(
                    phase="construction",
                    duration_s=time.monotonic() - t1,
                    detail={"index": i, "kind": op.kind},
                )
            )
        bystanders.cancel_scope.cancel()
    if before is not None:
        await engine.forget_statements(endpoint, before)
    failed = []
    for check in sc.preparation.preconditions:
        rec = await evaluate_check(check, "precondition", endpoint, clock, None)
        trace.write(rec)
        if not rec.passed:
            failed.append(rec.name)
    if failed:
        raise NotManifested(f"preconditions failed after preparation: {', '.join(failed)}")
    if sc.database.replica is not None:
        await _make_standby(engine, sc.database.replica, backend, trace)
    expected = await _expected_results(sc, lib, endpoint)
    meta = {
        "key": key,
        "expected_results": expected,
        "server_version": version,
        "prepare_s": time.monotonic() - t0,
        "history": history_summary,
    }
    store = backend.snapshots
    if store is not None and cluster is not None:
        for stale in store.root.glob("*"):  # snapshots of an older preparation
            if stale.is_dir() and stale.name != key:
                store.drop(stale.name)
        capture_s = await store.capture(key)
        (store.root / key / "prep.json").write_text(json.dumps(meta))
        if history_summary is not None:
            shutil.move(cluster.root / "history-staging", store.root / key / "history")
        trace.write(
            PhaseRecord(phase="snapshot_capture", duration_s=capture_s, detail={"snapshot": key})
        )
        return await _restore(store, key, trace)
    return meta


async def _make_standby(
    engine: DatabaseEngine, replica: ReplicaSpec, backend: DatabaseServer, trace: RecordSink
) -> None:
    """The replica profile's standby, made once the primary is prepared (it goes into the
    snapshot with it)."""
    t0 = time.monotonic()
    await engine.make_standby(backend, replica)
    trace.write(
        PhaseRecord(
            phase="standby",
            duration_s=time.monotonic() - t0,
            detail=replica.model_dump(mode="json"),
        )
    )


async def _apply_server_settings(
    engine: DatabaseEngine, settings: dict[str, str], backend: DatabaseServer, trace: RecordSink
) -> None:
    """Scenario server settings, captured in the snapshot (the engine's way: PostgreSQL's
    ALTER SYSTEM and a restart, TiDB's SET GLOBAL); a user's server is left as it is."""
    if backend.cluster is None:
        trace.write(
            PhaseRecord(
                phase="server_settings",
                detail={
                    "applied": False,
                    "reason": "external server: dbaops does not change its settings",
                    "settings": settings,
                },
            )
        )
        return
    await engine.apply_server_settings(backend, settings)
    trace.write(
        PhaseRecord(phase="server_settings", detail={"applied": True, "settings": settings})
    )


async def _expected_results(
    sc: Scenario, lib: WorkloadLibrary, endpoint: RunEndpoint
) -> dict[str, str]:
    """Reference result hashes of the OLAP jobs, computed on the prepared state (jobs with a
    ``reference_sql`` get theirs when they run)."""
    templates = {j.template for w in sc.workloads if isinstance(w, OlapWorkload) for j in w.jobs}
    checked = [
        name
        for name in sorted(templates)
        if lib.jobs[name].check_result and lib.jobs[name].reference_sql is None
    ]
    if not checked:
        return {}
    out = {}
    for name in checked:  # as the job's own role would read it (the library's own SQL)
        job = lib.jobs[name]
        conn = await endpoint.role_session(job.role, probe=True, pinned=False)
        try:
            out[name] = result_hash(await conn.fetch(job.sql))
        finally:
            await conn.close()
    return out
