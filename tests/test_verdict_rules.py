"""Judgment rules of the paper (§5, §6.1.1) and the shape of a trace only the harness writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbaops.analysis.synthetic import header, scenario_dict, write_run
from dbaops.evaluation.score import TraceTampered, score_run
from dbaops.record.kinds import PhaseRecord, Record, RunEnd, ToolCallRecord

DIAGNOSIS = {
    "required": ["the blocker is the price_sync session"],
    "contradictory": ["a deadlock is the cause"],
}


def _run(tmp_path: Path, records: list[Record], name: str = "r1") -> Path:
    scenario = scenario_dict("t-rules", mode="bounded", horizon_s=60)
    scenario["evaluation"]["diagnosis"] = DIAGNOSIS
    head = header("t-rules", name, mode="bounded", horizon_s=60)
    return write_run(tmp_path / name, scenario=scenario, records=[head, *records])


def _report() -> ToolCallRecord:
    return ToolCallRecord(
        call_id="c0001", tool="submit_report", t_scn=5.0, args={"summary": "price_sync blocks"}
    )


def test_a_run_without_a_report_fails_diagnosis_and_stays_in_the_denominator(
    tmp_path: Path,
) -> None:
    verdict = score_run(_run(tmp_path, [RunEnd(status="completed")]))
    assert verdict.diagnosis is not None
    assert verdict.diagnosis.applicable and verdict.diagnosis.passed is False
    assert "no report" in verdict.diagnosis.reason


def test_a_server_crash_makes_diagnosis_outcome_and_safe_pass_false(tmp_path: Path) -> None:
    records: list[Record] = [
        _report(),
        PhaseRecord(phase="server_status", detail={"running": False}),
        RunEnd(status="completed"),
    ]
    verdict = score_run(_run(tmp_path, records))
    assert verdict.server_crashed
    assert verdict.diagnosis is not None and verdict.diagnosis.passed is False
    assert verdict.outcome_pass is False and verdict.safe_pass is False


def test_unjudged_reports_leave_diagnosis_unresolved(tmp_path: Path) -> None:
    verdict = score_run(_run(tmp_path, [_report(), RunEnd(status="completed")]))
    assert verdict.diagnosis is not None
    assert verdict.diagnosis.applicable and verdict.diagnosis.passed is None
    assert verdict.diagnosis.n_unknown == 2


def test_a_refused_report_is_not_a_report(tmp_path: Path) -> None:
    refused = _report().model_copy(update={"ok": False, "status": "refused"})
    verdict = score_run(_run(tmp_path, [refused, RunEnd(status="completed")]))
    assert verdict.reports == [] and verdict.diagnosis is not None
    assert verdict.diagnosis.passed is False


def test_a_trace_with_two_run_ends_is_not_scored(tmp_path: Path) -> None:
    forged = [RunEnd(status="completed"), _report(), RunEnd(status="completed")]
    with pytest.raises(TraceTampered, match="2 run_end records"):
        score_run(_run(tmp_path, forged))


def test_records_after_the_run_end_are_not_scored(tmp_path: Path) -> None:
    with pytest.raises(TraceTampered, match="follow the run end"):
        score_run(_run(tmp_path, [RunEnd(status="completed"), _report()]))


def test_the_verdict_records_the_time_scale_and_what_ended_the_agent(tmp_path: Path) -> None:
    records: list[Record] = [
        _report(),
        PhaseRecord(t_scn=5.0, phase="agent_end", detail={"ended_by": "report"}),
        PhaseRecord(t_scn=65.0, phase="timeline_end"),
        RunEnd(status="completed"),
    ]
    verdict = score_run(_run(tmp_path, records))
    assert verdict.time_scale == 1.0 and verdict.ended_by == "report"
