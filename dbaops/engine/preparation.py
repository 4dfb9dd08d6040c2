"""Preparation of a run's database: the dirty snapshot restored, or built and captured first.

Building runs the fixture, the workload history, the scenario's construction steps and its
preconditions, creates the standby of the replica profile and stores the OLAP jobs' reference
result hashes with the snapshot.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from typing import Any

import anyio

from dbaops.clock import ScenarioClock
from dbaops.dbms.interface import SnapshotStore
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.server import PostgresBackend
from dbaops.dbms.postgres.statements import (
    StatementKey,
    forget_statements_since,
    statement_counts,
)
from dbaops.dbms.registry import get_engine
from dbaops.dbms.sessions import RunEndpoint
from dbaops.dbms.tidb.endpoint import quote_literal
from dbaops.dbms.tidb.engine import TidbBackend
from dbaops.engine.actors import ActorContext, run_fault
from dbaops.engine.checks import evaluate_check
from dbaops.engine.history import record_history
from dbaops.record.kinds import PhaseRecord
from dbaops.record.trace import RecordSink
from dbaops.scenario.consistency import construction_sql
from dbaops.scenario.faults import HoldTransaction, SqlFault
from dbaops.scenario.loader import preparation_key
from dbaops.scenario.model import History, OlapWorkload, ReplicaSpec, Scenario
from dbaops.workloads.drivers import result_hash
from dbaops.workloads.spec import WorkloadLibrary

#: The opened server of a run, whichever engine.
RunBackend = PostgresBackend | TidbBackend


class NotManifested(RuntimeError):
    """The scenario's preconditions or manifestation predicates did not hold: the run is not
    admitted."""


async def prepare_state(
    sc: Scenario,
    lib: WorkloadLibrary,
    backend: RunBackend,
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
    backend: RunBackend,
    trace: RecordSink,
    clock: ScenarioClock,
    history: History | None,
    key: str,
    version: str,
) -> dict[str, Any]:
    """Build the dirty state from initdb and (embedded: under the group's exclusive lock)
    capture it as snapshot ``key``, then restore it so every run starts from the copy."""
    cluster = backend.cluster
    endpoint = backend.for_database(lib.database)
    t0 = time.monotonic()
    if cluster is not None:
        await cluster.reinitialize()
        trace.write(PhaseRecord(phase="initdb", duration_s=time.monotonic() - t0))
    if sc.database.settings:
        await _apply_server_settings(sc.database.settings, backend, trace)
    params = {**lib.params, **sc.database.params}
    day = sc.database.date.isoformat()
    build_s = await get_engine(sc.engine).build_fixture(backend, lib, params, sc.database.seed, day)
    trace.write(PhaseRecord(phase="build_fixture", duration_s=build_s, detail={"params": params}))
    history_summary: dict[str, Any] | None = None
    if history is not None and cluster is not None:  # (no history without the embedded server)
        t1 = time.monotonic()
        history_summary = await record_history(
            sc, lib, get_engine(sc.engine), backend, history, cluster.root / "history-staging"
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
    before = await _statement_marks(endpoint)
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
    await _forget_construction(endpoint, before)
    failed = []
    for check in sc.preparation.preconditions:
        rec = await evaluate_check(check, "precondition", endpoint, clock, None)
        trace.write(rec)
        if not rec.passed:
            failed.append(rec.name)
    if failed:
        raise NotManifested(f"preconditions failed after preparation: {', '.join(failed)}")
    if sc.database.replica is not None:
        assert isinstance(backend, PostgresBackend)  # the scenario model allows no TiDB replica
        await _make_standby(sc.database.replica, backend, trace)
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


async def _statement_marks(endpoint: RunEndpoint) -> dict[StatementKey, int] | None:
    """PostgreSQL's statement statistics before construction (None on TiDB, whose summary is
    cleared when the agent starts)."""
    if not isinstance(endpoint, Endpoint):
        return None
    conn = await endpoint.harness_connect(admin=True)
    try:
        return await statement_counts(conn)
    finally:
        await conn.close()


async def _forget_construction(
    endpoint: RunEndpoint, before: dict[StatementKey, int] | None
) -> None:
    """Take construction's statements out of the statistics the snapshot keeps."""
    if before is None or not isinstance(endpoint, Endpoint):
        return
    conn = await endpoint.harness_connect(admin=True)
    try:
        await forget_statements_since(conn, before)
    finally:
        await conn.close()


async def _make_standby(replica: ReplicaSpec, backend: PostgresBackend, trace: RecordSink) -> None:
    """The replica profile's standby, made once the primary is prepared (it goes into the
    snapshot with it)."""
    if backend.cluster is None:
        raise ValueError("database.replica: a standby needs the embedded backend (not --dsn)")
    t0 = time.monotonic()
    await backend.cluster.create_standby(replica.application_name, replica.settings, replica.slot)
    if replica.synchronous:
        conn = await backend.admin.harness_connect(admin=True)
        try:
            sql = await conn.fetchval(
                "SELECT format('ALTER SYSTEM SET synchronous_standby_names = %L', $1::text)",
                replica.application_name,
            )
            await conn.execute(sql)
            await conn.execute("SELECT pg_reload_conf()")
        finally:
            await conn.close()
    await await_standby(backend, replica)
    trace.write(
        PhaseRecord(
            phase="standby",
            duration_s=time.monotonic() - t0,
            detail=replica.model_dump(mode="json"),
        )
    )


async def await_standby(
    backend: PostgresBackend, replica: ReplicaSpec, timeout_s: float = 120.0
) -> None:
    """Wait until the standby streams from the primary and has replayed what it has written."""
    conn = await backend.admin.harness_connect(admin=True)
    try:
        with anyio.fail_after(timeout_s):
            while True:
                caught_up = await conn.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name = $1"
                    " AND state = 'streaming' AND replay_lsn >= pg_current_wal_lsn())",
                    replica.application_name,
                )
                if caught_up:
                    break
                await anyio.sleep(0.2)  # a condition on the server: polled, like a probe
    except TimeoutError:
        raise ValueError(
            f"the standby {replica.application_name!r} did not catch up in {timeout_s:.0f} s"
        ) from None
    finally:
        await conn.close()


async def _apply_server_settings(
    settings: dict[str, str], backend: RunBackend, trace: RecordSink
) -> None:
    """Scenario server settings, captured in the snapshot: PostgreSQL's via ALTER SYSTEM and a
    restart, TiDB's global variables via SET GLOBAL (TiDB persists them in its store)."""
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
    conn = await backend.admin.harness_connect(admin=True)
    tidb = isinstance(backend, TidbBackend)
    try:
        for name, value in settings.items():
            if tidb:
                await conn.execute(f"SET GLOBAL {name} = {_tidb_value(value)}")
            else:
                quoted = value.replace("'", "''")
                await conn.execute(f"ALTER SYSTEM SET {name} = '{quoted}'")
    finally:
        await conn.close()
    if not tidb:
        await backend.cluster.restart()
    trace.write(
        PhaseRecord(phase="server_settings", detail={"applied": True, "settings": settings})
    )


def _tidb_value(value: str) -> str:
    """A setting's value in SET GLOBAL: numbers and ON/OFF bare, anything else quoted."""
    if re.fullmatch(r"-?\d+(\.\d+)?|(?i:on|off|true|false)", value):
        return value
    return quote_literal(value)


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
