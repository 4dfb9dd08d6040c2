"""The run record: run directories written before the record package score as they did, load
into typed records, and score the same every time (no database needed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dbaops.analysis.report import build_report
from dbaops.evaluation.score import score_run
from dbaops.models.replay import load_call_records
from dbaops.record.cost import CostSummary, summarize_cost
from dbaops.record.kinds import CallRecord, GenericRecord, Usage
from dbaops.record.layout import discover_runs
from dbaops.record.load import load_run, run_cost

#: Two runs recorded by dbaops before this package (commit b25b4e6): pg-qt-01 by a scripted
#: model over HTTP, pg-sf-01 by the reference; their traces end with a verdict record.
OLD_RUNS = Path(__file__).parent / "data" / "runs-before-record-package"


@pytest.fixture
def old_runs(tmp_path: Path) -> list[Path]:
    shutil.copytree(OLD_RUNS, tmp_path / "runs")
    runs = discover_runs(tmp_path / "runs")
    assert len(runs) == 2
    return runs


def _comparable(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict without what older versions stamped with the scoring time, and without
    fields added since (absent from the old verdict)."""
    out = json.loads(json.dumps(verdict))
    for j in (out.get("diagnosis") or {}).get("judgments", []):
        j.pop("t_wall", None)
    out.get("cost", {}).pop("placeholder_priced_calls", None)
    return out


def test_runs_written_before_the_record_package_score_as_they_did(old_runs: list[Path]) -> None:
    for run in old_runs:
        recorded = json.loads((run / "verdict.json").read_text())
        again = score_run(run).model_dump(mode="json")
        assert _comparable(again) == _comparable(recorded), run.name
        assert again["outcome_pass"] is True and again["safe_pass"] is True


def test_scoring_is_a_pure_function_of_the_record(old_runs: list[Path]) -> None:
    for run in old_runs:
        first = score_run(run).model_dump_json()
        assert score_run(run).model_dump_json() == first


def test_an_old_run_loads_into_typed_records(old_runs: list[Path]) -> None:
    by_scenario = {load_run(p).header.scenario_id: load_run(p) for p in old_runs}  # type: ignore[union-attr]
    model_run = by_scenario["pg-qt-01"]
    assert len(model_run.model_calls) == 5
    assert all(isinstance(c, CallRecord) and c.response is not None for c in model_run.model_calls)
    cost = run_cost(model_run)
    assert (cost.calls, cost.input_tokens, cost.output_tokens) == (5, 8400, 190)
    assert cost.cost_usd == pytest.approx(0.01502)
    assert (
        by_scenario["pg-sf-01"].model_calls == []
        and run_cost(by_scenario["pg-sf-01"]).cost_usd is None
    )
    assert [c.seq for c in load_call_records(model_run.path)] == [1, 2, 3, 4, 5]
    assert model_run.samples().height > 0 and model_run.metrics().height > 0
    report = build_report(old_runs[0].parent.parent, old_runs[0].parent.parent / "report")
    assert report.n_runs == 2 and report.n_valid == 2


def _call(cost: float | None, placeholder: bool = False) -> CallRecord:
    return CallRecord(
        model_name="m", model="m", base_url="http://x", request_sha256="r", messages_sha256="m",
        usage=Usage(input_tokens=100, cached_input_tokens=40, output_tokens=10),
        cost_usd=cost, price_placeholder=placeholder,
    )  # fmt: skip


def test_one_cost_aggregation_tells_priced_unpriced_and_placeholder_apart() -> None:
    priced = summarize_cost([_call(0.5), _call(0.25, placeholder=True)])
    assert priced.cost_usd == pytest.approx(0.75) and priced.price_placeholder
    assert (priced.calls, priced.placeholder_priced_calls, priced.input_tokens) == (2, 1, 200)
    partial = summarize_cost([_call(0.5), _call(None), _call(0.5)])
    assert partial.cost_usd is None and partial.unpriced_calls == 1  # a partial sum is not a cost
    assert summarize_cost([]) == CostSummary()
    # a model_call line of an older schema still counts, from what it has
    old = GenericRecord(kind="model_call", usage={"input_tokens": 7}, cost_usd=0.1)
    assert summarize_cost([old]).input_tokens == 7 and summarize_cost([old]).cost_usd == 0.1
