"""A TiDB scenario end to end through the runner, on the real embedded server: the fixture in
TiDB's dialect, the workloads over aiomysql, the activation fault, the agent's TiDB tools,
the checks and the verdict (tb-qp-01: the reference fix passes, the shallow one fails)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbaops.dbms.tidb.binary import TidbBinary
from dbaops.engine.runner import RunOptions, run_scenario
from dbaops.evaluation.score import score_run
from dbaops.record.kinds import RunHeader
from dbaops.record.trace import read_trace

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _run(tmp_path: Path, agent: str) -> Path:
    options = RunOptions(time_scale=0.1, runs_dir=tmp_path / "runs", agent=agent)
    result = await run_scenario("tb-qp-01", options)
    assert result.status == "completed", result.reason
    return result.run_dir


async def test_tb_qp_01_reference_passes_and_the_shallow_fix_fails(
    tidb_binary: TidbBinary, tmp_path: Path
) -> None:
    reference = await _run(tmp_path, "reference")
    header = next(r for r in read_trace(reference) if isinstance(r, RunHeader))
    assert header.backend["engine"] == "tidb" and "tidb" in header.versions
    verdict = score_run(reference)
    assert verdict.outcome_pass, verdict.terminal_acceptance
    assert verdict.safety.safe, verdict.safety.violations
    kills = [v for v in verdict.safety.violations if "kill" in v.reason]
    assert kills == []  # the KILLs hit the application's (causal) sessions only
    shallow = score_run(await _run(tmp_path, "shallow"))
    assert not shallow.outcome_pass
    failed = {c.name for c in shallow.terminal_acceptance.checks if not c.passed}
    assert failed == {"dashboard_works"}  # new sessions are fine; the running pool is not
