"""Evaluating scenario checks (SQL predicates and workload statistics) into trace records."""

from __future__ import annotations

import json
from typing import Any

from dbaops.backends.endpoint import HARNESS_APPLICATION, Endpoint
from dbaops.clock import ScenarioClock
from dbaops.records import CheckRecord
from dbaops.scenario.parts import CheckSpec, SqlCheck, compare
from dbaops.workloads.sink import SampleSink, workload_stat


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


async def _check_connection(check: SqlCheck, endpoint: Endpoint) -> Any:
    """A hidden harness probe evaluating as ``check.role`` (SET ROLE), or, with ``login``, a
    real session of that role (so its per-role settings apply)."""
    if check.login:
        return await endpoint.connect(check.role, HARNESS_APPLICATION, check.database)
    return await endpoint.harness_connect(check.database, probe=True, role=check.role)


async def evaluate_check(
    check: CheckSpec,
    purpose: str,
    endpoint: Endpoint,
    clock: ScenarioClock,
    sink: SampleSink | None,
) -> CheckRecord:
    """Evaluate one check now; failures to evaluate are recorded as passed=False with the error."""
    t = clock.now()
    if isinstance(check, SqlCheck):
        try:
            conn = await _check_connection(check, endpoint)
            try:
                observed = await conn.fetchval(check.sql, timeout=60)
            finally:
                await conn.close(timeout=5)
        except Exception as exc:  # any failure to evaluate is evidence, not a crash
            return CheckRecord(
                t_scn=t,
                purpose=purpose,
                name=check.name,
                passed=False,
                expected=f"{check.op} {check.expect!r}",
                error=f"{type(exc).__name__}: {exc}"[:500],
            )
        return CheckRecord(
            t_scn=t,
            purpose=purpose,
            name=check.name,
            passed=compare(observed, check.op, check.expect),
            observed=_jsonable(observed),
            expected=f"{check.op} {check.expect!r}",
        )
    if sink is None:
        return CheckRecord(
            t_scn=t,
            purpose=purpose,
            name=check.name,
            passed=False,
            error="no workload samples available",
        )
    frame = sink.recent(t - check.over_s, now=(t, clock.mono()))
    frame = frame.filter(frame["workload"] == check.workload)
    observed_stat = workload_stat(frame, check.stat)
    return CheckRecord(
        t_scn=t,
        purpose=purpose,
        name=check.name,
        passed=compare(observed_stat, check.op, check.value),
        observed={check.stat: observed_stat, "n": frame.height},
        expected=f"{check.stat} {check.op} {check.value}",
    )
