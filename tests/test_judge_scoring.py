"""`dbaops judge` stores judge decisions in the run; `dbaops score` then reads them offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from dbaops.analysis.synthetic import header, scenario_dict, write_run
from dbaops.evaluation.score import score_run
from dbaops.record.kinds import RunEnd, ToolCallRecord
from dbaops.testing import OpenAITestServer, ScriptedResponse


def _answer(verdict: str) -> ScriptedResponse:
    return ScriptedResponse.text(json.dumps({"verdict": verdict, "rationale": "as stated"}))


def _bounded_run(tmp_path: Path) -> Path:
    scenario = scenario_dict("t-judge", mode="bounded", horizon_s=60)
    scenario["evaluation"]["diagnosis"] = {
        "required": ["the blocker is the price_sync session"],
        "contradictory": ["a deadlock is the cause"],
    }
    report = ToolCallRecord(
        call_id="c0001", tool="submit_report", t_scn=20.0,
        args={"summary": "price_sync idles in a transaction holding row locks",
              "root_cause": "the price_sync session blocks checkout"},
    )  # fmt: skip
    records = [header("t-judge", "r1", mode="bounded", horizon_s=60), report,
               RunEnd(status="completed")]  # fmt: skip
    return write_run(tmp_path / "t-judge" / "r1", scenario=scenario, records=records)


def test_judge_command_then_offline_score(tmp_path: Path) -> None:
    run_dir = _bounded_run(tmp_path)
    pending = score_run(run_dir).diagnosis  # not judged yet: unresolved, out of the DP denominator
    assert pending is not None and pending.applicable and pending.passed is None

    def judge(request: dict[str, Any]) -> ScriptedResponse:
        # Conditions are judged concurrently: answer by content, not by arrival order.
        asked = json.dumps(request["messages"])
        return _answer("no" if "deadlock" in asked else "yes")

    with OpenAITestServer(judge) as server:
        models = tmp_path / "models.toml"
        models.write_text(
            f'[models.j]\nbase_url = "{server.base_url}"\nmodel = "test-model"\n'
            "context_window = 8000\n"
        )
        cmd = [sys.executable, "-m", "dbaops.cli", "judge", str(run_dir), "--models", str(models),
               "--judge", "j"]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert len(server.chat_requests) == 2  # one call per condition
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and len(server.chat_requests) == 2  # cached: no new calls
    verdict = score_run(run_dir)  # the endpoint is gone: scoring reads stored judgments only
    assert verdict.diagnosis is not None and verdict.diagnosis.passed is True
    assert json.loads((run_dir / "verdict.json").read_text())["diagnosis"]["passed"] is True
