"""A TiDB scenario end to end through the runner, on the real embedded server: the fixture in
TiDB's dialect, the workloads over aiomysql, the activation fault, the agent's TiDB tools,
the checks and the verdict (tb-qp-01: the reference fix passes, the shallow one fails)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbaops.dbms.tidb.binary import TidbBinary
from dbaops.evaluation.score import score_run
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.record.kinds import RunHeader, ToolCallRecord
from dbaops.record.trace import read_trace
from dbaops.testing import OpenAITestServer, ScriptedResponse

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _run(tmp_path: Path, agent: str, scenario: str = "tb-qp-01") -> Path:
    options = RunOptions(time_scale=0.1, runs_dir=tmp_path / "runs", agent=agent)
    result = await run_scenario(scenario, options)
    assert result.status == "completed", result.reason
    return result.run_dir


async def test_tb_qp_01_reference_passes_and_the_shallow_fix_fails(
    tidb_binary: TidbBinary, tmp_path: Path
) -> None:
    reference = await _run(tmp_path, "reference")
    header = next(r for r in read_trace(reference) if isinstance(r, RunHeader))
    assert header.backend["engine"] == "tidb" and "tidb" in header.versions
    assert (reference / "tidb.log").stat().st_size > 0  # TiDB's log, under its own name
    assert not (reference / "postgresql.log").exists()
    verdict = score_run(reference)
    assert verdict.outcome_pass, verdict.terminal_acceptance
    assert verdict.safety.safe, verdict.safety.violations
    kills = [v for v in verdict.safety.violations if "kill" in v.reason]
    assert kills == []  # the KILLs hit the application's (causal) sessions only
    shallow = score_run(await _run(tmp_path, "shallow"))
    assert not shallow.outcome_pass
    failed = {c.name for c in shallow.terminal_acceptance.checks if not c.passed}
    assert failed == {"dashboard_works"}  # new sessions are fine; the running pool is not


async def test_tb_sf_01_reference_kills_the_lock_holder_and_the_server_stays_up(
    tidb_binary: TidbBinary, tmp_path: Path
) -> None:
    """The KILL of an idle transaction's lock holder (which crashed the pinned TiDB under its
    default configuration) frees checkout; the protected ETL session survives."""
    verdict = score_run(await _run(tmp_path, "reference", "tb-sf-01"))
    assert verdict.outcome_pass, verdict.terminal_acceptance
    assert verdict.safety.safe, verdict.safety.violations


async def test_tb_sf_02_the_agent_starts_on_a_stopped_server_and_the_catalog_is_read(
    tidb_binary: TidbBinary, tmp_path: Path
) -> None:
    """The scenario leaves the server stopped when the agent starts (nothing to clear in its
    statements summary, no catalog to read then); the reference starts it, and the catalog
    read before the stop opens the agent's interval (no G12 for the unreadable start)."""
    run_dir = await _run(tmp_path, "reference", "tb-sf-02")
    verdict = score_run(run_dir)
    assert verdict.outcome_pass, verdict.terminal_acceptance
    assert verdict.safety.safe, verdict.safety.violations


async def test_the_react_agent_works_a_tidb_scenario_over_http(
    tidb_binary: TidbBinary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same ReAct agent as on PostgreSQL (``--model``), on a local scripted
    OpenAI-compatible server over real HTTP, works tb-rg-01 with the TiDB catalog."""
    script = [
        ScriptedResponse.tool_call("execute_sql", {"sql": "SELECT @@GLOBAL.max_execution_time"}),
        ScriptedResponse.tool_call("execute_sql", {"sql": "SET GLOBAL max_execution_time = 60000"}),
        ScriptedResponse.tool_call(
            "submit_report",
            {
                "summary": "Reports were cancelled by a 20 ms statement cap.",
                "root_cause": "The global max_execution_time was 20 ms.",
                "actions": "SET GLOBAL max_execution_time = 60000",
            },
        ),
    ]
    monkeypatch.setenv("DBAOPS_TEST_KEY", "sk-test-tidb")
    with OpenAITestServer(script) as server:
        models = tmp_path / "models.toml"
        models.write_text(
            f'[models.scripted]\nbase_url = "{server.base_url}"\nmodel = "test-model"\n'
            'api_key_env = "DBAOPS_TEST_KEY"\ncontext_window = 32000\n'
        )
        options = RunOptions(
            model="scripted", models_file=models, time_scale=0.1, runs_dir=tmp_path / "runs"
        )
        result = await run_scenario("tb-rg-01", options)
        tools = {t["function"]["name"] for t in server.chat_requests[0].body["tools"]}
    assert result.status == "completed", result.reason
    assert {"execute_sql", "manage_instance", "read_log", "query_knowledge_base"} <= tools
    verdict = score_run(result.run_dir)
    assert verdict.outcome_pass and verdict.safe_pass, verdict.terminal_acceptance
    calls = [r for r in read_trace(result.run_dir) if isinstance(r, ToolCallRecord)]
    assert [c.args.get("sql") for c in calls if c.tool == "execute_sql"][-1] == (
        "SET GLOBAL max_execution_time = 60000"
    )
