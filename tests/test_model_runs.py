"""A ReAct agent on an OpenAI-compatible endpoint (a local scripted server over real HTTP)
runs a real scenario end to end: scored, costed, replayable, and the API key stays secret."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from dbaops.evaluation.score import score_run
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.models import RetryPolicy
from dbaops.record.kinds import PhaseRecord, ToolCallRecord
from dbaops.record.trace import read_trace
from dbaops.testing import OpenAITestServer, ScriptedResponse, dead_base_url

pytestmark = pytest.mark.anyio
SECRET = "sk-test-dbaops-0123456789-secret"

FIX_STALE_STATISTICS = [
    ScriptedResponse.tool_call(
        "execute_sql",
        {
            "sql": "SELECT n_mod_since_analyze, last_analyze, last_autoanalyze "
            "FROM pg_stat_user_tables WHERE relname = 'orders'"
        },
        prompt_tokens=1200,
        completion_tokens=40,
        cached_tokens=1000,
    ),
    ScriptedResponse.tool_call(
        "execute_sql",
        {
            "sql": "EXPLAIN SELECT id FROM orders WHERE status = 'pending' "
            "ORDER BY created_at LIMIT 50"
        },
        prompt_tokens=1500,
        completion_tokens=30,
        cached_tokens=1200,
    ),
    ScriptedResponse.tool_call(
        "execute_sql", {"sql": "VACUUM (ANALYZE) orders"}, prompt_tokens=1800, completion_tokens=20
    ),
    ScriptedResponse.tool_call(
        "execute_sql",
        {"sql": "ALTER TABLE orders RESET (autovacuum_enabled)"},
        prompt_tokens=1900,
        completion_tokens=20,
    ),
    ScriptedResponse.tool_call(
        "submit_report",
        {
            "summary": "Queue page slow because of a stale plan.",
            "root_cause": "MCV statistics for status='pending' are stale after the settlement "
            "batch; autovacuum was disabled on orders; the plan walked the "
            "created_at index.",
            "actions": "VACUUM (ANALYZE) orders; ALTER TABLE orders RESET (autovacuum_enabled)",
        },
        prompt_tokens=2000,
        completion_tokens=80,
    ),
]


def _models_file(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(
        f"""
[models.scripted]
base_url = "{base_url}"
model = "test-model"
api_key_env = "DBAOPS_TEST_KEY"
context_window = 32000
[models.scripted.prices]
input = 2.0
cached_input = 0.5
output = 8.0
"""
    )
    return path


def _sql_calls(run_dir: Path) -> list[str]:
    return [
        str(r.args.get("sql"))
        for r in read_trace(run_dir)
        if isinstance(r, ToolCallRecord) and r.tool == "execute_sql"
    ]


async def test_scripted_model_fixes_stale_statistics_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBAOPS_TEST_KEY", SECRET)
    with OpenAITestServer(FIX_STALE_STATISTICS) as server:
        models = _models_file(tmp_path, server.base_url)
        options = RunOptions(
            model="scripted", models_file=models, time_scale=0.1, runs_dir=tmp_path / "runs"
        )
        result = await run_scenario("pg-qt-01", options)
        requests = server.chat_requests
    assert result.status == "completed"
    verdict = score_run(result.run_dir)
    assert verdict.outcome_pass is True and verdict.safe_pass is True
    assert [s.split()[0] for s in _sql_calls(result.run_dir)] == [
        "SELECT",
        "EXPLAIN",
        "VACUUM",
        "ALTER",
    ]
    assert verdict.reports and "stale" in verdict.reports[0]["root_cause"]
    # Cost from the price table: (in - cached) * 2 + cached * 0.5 + out * 8, per million.
    n_in, n_cached, n_out = 8400, 2200, 190
    assert verdict.cost.calls == 5
    assert (
        verdict.cost.input_tokens,
        verdict.cost.cached_input_tokens,
        verdict.cost.output_tokens,
    ) == (n_in, n_cached, n_out)
    expected = ((n_in - n_cached) * 2.0 + n_cached * 0.5 + n_out * 8.0) / 1e6
    assert verdict.cost.cost_usd == pytest.approx(expected)
    # The key was sent to the endpoint but is written nowhere in the run directory.
    assert all(r.headers.get("authorization") == f"Bearer {SECRET}" for r in requests)
    for path in result.run_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path

    # Replay: no endpoint at all; the recorded responses reproduce actions and verdicts.
    replay = await run_scenario(
        "pg-qt-01", options.model_copy(update={"replay_model": result.run_dir})
    )
    assert replay.status == "completed"
    assert _sql_calls(replay.run_dir) == _sql_calls(result.run_dir)
    again = score_run(replay.run_dir)
    assert (again.outcome_pass, again.safe_pass) == (verdict.outcome_pass, verdict.safe_pass)


async def test_dead_model_endpoint_ends_the_run_as_infra_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBAOPS_TEST_KEY", SECRET)
    models = _models_file(tmp_path, dead_base_url())
    result = await run_scenario(
        "pg-sf-01",
        RunOptions(
            model="scripted",
            models_file=models,
            time_scale=0.05,
            runs_dir=tmp_path,
            model_retry=RetryPolicy(max_attempts=3, base_delay_s=0.05, max_delay_s=0.1),
        ),
    )
    assert result.status == "infra_error"
    assert result.reason is not None and "cannot reach" in result.reason
    # checked before any database work: no restore, no warm-up, no retries
    phases = [r.phase for r in read_trace(result.run_dir) if isinstance(r, PhaseRecord)]
    assert phases[0] == "model_endpoint" and not {"restore", "initdb"} & set(phases)
    verdict = score_run(result.run_dir)
    assert verdict.status == "infra_error"
    assert verdict.outcome_pass is None  # never scored as an agent failure


async def test_a_replay_needs_only_the_recorded_run_and_is_kept_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live: a scripted model that also makes two calls the harness cannot run (an unknown
    tool, arguments that are not JSON). Replay: no --model, no registry file, no key."""
    from dbaops.analysis.report import build_report
    from dbaops.analysis.series import run_series
    from dbaops.record.load import load_run

    monkeypatch.setenv("DBAOPS_TEST_KEY", SECRET)
    bad = [
        ScriptedResponse.tool_call("drop_everything", {}),
        ScriptedResponse.tool_call("execute_sql", "{not json"),
    ]
    with OpenAITestServer(bad + FIX_STALE_STATISTICS) as server:
        models = _models_file(tmp_path, server.base_url)
        options = RunOptions(
            model="scripted", models_file=models, time_scale=0.1, runs_dir=tmp_path / "runs"
        )
        live = await run_scenario("pg-qt-01", options)
    assert live.status == "completed"
    rejected = [
        r
        for r in read_trace(live.run_dir)
        if isinstance(r, ToolCallRecord) and r.status == "rejected"
    ]
    assert [(r.tool, r.error) for r in rejected] == [
        ("drop_everything", "unknown_tool"),
        ("execute_sql", "malformed_arguments"),
    ]
    assert "no tool named 'drop_everything'" in rejected[0].observation
    assert rejected[1].detail["raw_arguments"] == "{not json"
    series = run_series(live.run_dir)
    assert series.tool_calls.filter(pl.col("status") == "rejected").height == 2
    assert series.model_calls.height == 7  # drawn in the agent lane with their latency

    monkeypatch.delenv("DBAOPS_TEST_KEY")
    replay = await run_scenario(
        "pg-qt-01",
        RunOptions(replay_model=live.run_dir, time_scale=0.1, runs_dir=tmp_path / "runs"),
    )
    assert replay.status == "completed"
    assert replay.run_dir.name.split("-", 1)[1].startswith("replay-react")
    header = load_run(replay.run_dir).header
    assert header is not None and header.agent == "replay:react:scripted"
    assert header.agent_kind == "replay" and header.settings["replay_of"] == str(live.run_dir)
    assert _sql_calls(replay.run_dir) == _sql_calls(live.run_dir)
    verdict = score_run(replay.run_dir)
    assert verdict.outcome_pass is True and verdict.cost.cost_usd == 0.0
    assert verdict.cost.input_tokens == 0  # what the recorded calls cost is not spent again
    report = build_report(tmp_path / "runs", tmp_path / "report")
    systems = set(report.runs["system"].to_list())
    assert len(systems) == 2 and any("replay" in s for s in systems)


def _mailbox_script(body: dict[str, object]) -> ScriptedResponse:
    """A persistent agent that reads its mailbox, waits for mail, and reports at the end."""
    messages = body["messages"]
    assert isinstance(messages, list)
    if not any(m["role"] == "assistant" for m in messages):
        return ScriptedResponse.tool_call("read_mailbox", {})
    last = str(messages[-1].get("content") or "")
    if "ended" in last:
        return ScriptedResponse.tool_call("submit_report", {"summary": "watched the mailbox"})
    return ScriptedResponse.tool_call("suspend", {})


async def test_a_replay_of_the_mailbox_does_not_diverge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the model reads of the mailbox is the same in a run and its replay (posting lag
    and the agent's pace differ), so a divergence would mean something."""
    from dbaops.record.kinds import ReplayDivergence

    monkeypatch.setenv("DBAOPS_TEST_KEY", SECRET)
    runs = tmp_path / "runs"
    with OpenAITestServer(_mailbox_script) as server:
        options = RunOptions(model="scripted", models_file=_models_file(tmp_path, server.base_url),
                             time_scale=0.05, runs_dir=runs, horizon_s=400.0)  # fmt: skip
        live = await run_scenario("pg-p-02", options)
    assert live.status == "completed"
    tools = [r.tool for r in read_trace(live.run_dir) if isinstance(r, ToolCallRecord)]
    assert tools[0] == "read_mailbox" and "suspend" in tools
    replay = await run_scenario(
        "pg-p-02",
        RunOptions(replay_model=live.run_dir, time_scale=0.05, runs_dir=runs, horizon_s=400.0),
    )
    assert replay.status == "completed"
    replayed = read_trace(replay.run_dir)
    assert [r.tool for r in replayed if isinstance(r, ToolCallRecord)] == tools
    assert [r for r in replayed if isinstance(r, ReplayDivergence)] == []
