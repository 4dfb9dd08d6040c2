"""Campaigns: scenarios × agents × repeats from a manifest, interrupted and resumed, on two
workers (each on its own embedded cluster)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dbaops.analysis.report import build_report
from dbaops.campaign import Manifest, load_campaign_spec, plan, run_campaign
from dbaops.campaign.executor import CampaignError, open_manifest
from dbaops.record.kinds import PhaseRecord
from dbaops.record.load import load_run
from dbaops.scenario.loader import ScenarioError

pytestmark = pytest.mark.anyio
SCENARIOS = Path(__file__).parent / "scenarios"


def _spec_file(tmp_path: Path, **fields: object) -> Path:
    body = {
        "scenarios": [str(SCENARIOS / "t-snapshot.yaml"), str(SCENARIOS / "t-olap.yaml")],
        "agents": ["noop", "dbaops.agents.noop:NoopAgent"],
        "repeats": 2,
        "time_scale": 0.1,
        **fields,
    }
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_a_malformed_campaign_file_names_the_file_the_field_and_the_problem(
    tmp_path: Path,
) -> None:
    path = _spec_file(tmp_path, repeats=0, agents=["noop", "no_such_agent"], colour="red")
    with pytest.raises(ScenarioError) as caught:
        load_campaign_spec(path)
    text = str(caught.value)
    assert str(path) in text
    assert "repeats:" in text and "agents:" in text and "colour: unknown field" in text
    missing = _spec_file(tmp_path, scenarios=["pg-nope-99"])
    with pytest.raises(ScenarioError, match=r"scenarios\[0\]: 'pg-nope-99'"):
        load_campaign_spec(missing)


def test_the_plan_is_the_product_of_scenarios_agents_seeds_and_repeats(tmp_path: Path) -> None:
    spec = load_campaign_spec(_spec_file(tmp_path, seeds=[1, 2]))
    runs = plan(spec)
    assert len(runs) == 2 * 2 * 2 * 2 and len({r.key for r in runs}) == 16
    assert runs[0].key == "t-snapshot/noop/seed-1/r1"
    # another spec cannot be resumed into this directory
    out = tmp_path / "out"
    open_manifest(spec, out, resume=False)
    with pytest.raises(CampaignError, match="already holds a campaign"):
        open_manifest(spec, out, resume=False)
    other = spec.model_copy(update={"repeats": 3})
    with pytest.raises(CampaignError, match="another spec"):
        open_manifest(other, out, resume=True)


def _manifest(out: Path) -> dict[str, object] | None:
    try:
        return json.loads((out / "manifest.json").read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def _start_and_interrupt(spec_path: Path, out: Path) -> None:
    """Start the campaign as a user would and press Ctrl-C once a run has finished and another
    is in progress (awaited on the manifest, not on a clock)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dbaops.cli", "campaign", str(spec_path), "--out", str(out),
         "--workers", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ),
    )  # fmt: skip
    try:
        while True:
            m = _manifest(out)
            states = [r["state"] for r in m["runs"]] if m else []  # type: ignore[index]
            if "done" in states and "running" in states:
                break
            assert proc.poll() is None, "the campaign ended before it could be interrupted"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_validation_is_a_campaign_preset_of_each_scenarios_own_solutions() -> None:
    from dbaops.execution.runner import RunOptions
    from dbaops.execution.validate import validation_campaign

    spec = validation_campaign(
        ["pg-sf-01", "pg-qt-01"], RunOptions(time_scale=0.05), repeat=2, scales=[1.0, 0.05]
    )
    assert spec.preset == "validation" and spec.time_scales == [1.0, 0.05]
    runs = plan(spec)
    sf = {(r.agent, r.time_scale) for r in runs if r.scenario == "pg-sf-01"}
    solutions = ("noop", "reference", "shallow", "blunt:server-wide-idle-timeout")
    assert sf == {(a, x) for a in solutions for x in (1.0, 0.05)}
    assert len({r.key for r in runs}) == len(runs)
    assert "pg-sf-01/x0.05/shallow/seed-default/r2" in {r.key for r in runs}
    only = plan(validation_campaign(["pg-sf-01"], RunOptions(), only=["reference"]))
    assert [r.agent for r in only] == ["reference"]


async def test_an_interrupted_campaign_resumes_to_exactly_one_scored_run_per_planned_run(
    tmp_path: Path,
) -> None:
    spec_path = _spec_file(tmp_path)
    out = tmp_path / "campaign"
    _start_and_interrupt(spec_path, out)
    interrupted = Manifest.load(out)
    assert interrupted.counts()["done"] < 8
    spec = load_campaign_spec(spec_path)
    final = await run_campaign(spec, out, workers=2, resume=True)
    assert final.counts()["done"] == 8
    assert all(r.attempts >= 1 and r.run_dir for r in final.runs)
    # one run directory per planned run; the interrupted attempts are kept apart
    run_dirs = sorted(p.parent for p in (out / "runs").rglob("trace.jsonl"))
    assert len(run_dirs) == 8
    assert {str(p.relative_to(out)) for p in run_dirs} == {r.run_dir for r in final.runs}
    cut = [r for r in interrupted.runs if r.state == "running" and r.run_dir]
    kept = list((out / "superseded").iterdir()) if (out / "superseded").exists() else []
    assert len(kept) == len(cut)
    report = build_report(out / "runs", tmp_path / "report")
    assert report.n_runs == 8 and report.n_valid == 8
    # The workers of a scenario share its snapshot: built at most once per scenario, however
    # many workers restored it.
    runs = [load_run(p) for p in run_dirs]
    captures = [
        r.header.scenario_id
        for r in runs
        for rec in r.records
        if isinstance(rec, PhaseRecord) and rec.phase == "snapshot_capture" and r.header
    ]
    assert len(captures) == len(set(captures)) <= 2
    keys = {(r.header.scenario_id, r.header.settings["snapshot"]) for r in runs if r.header}
    assert len(keys) == 2


def test_the_same_campaign_runs_as_ray_tasks_on_a_local_ray_instance(tmp_path: Path) -> None:
    from dbaops.campaign.ray_executor import run_on_ray

    spec = load_campaign_spec(_spec_file(tmp_path, repeats=1))
    out = tmp_path / "on-ray"
    final = run_on_ray(spec, out, workers=2)
    assert final.counts()["done"] == 4
    # every run directory was made on a worker and collected back into the campaign
    run_dirs = sorted(p.parent for p in (out / "runs").rglob("trace.jsonl"))
    assert {str(p.relative_to(out)) for p in run_dirs} == {r.run_dir for r in final.runs}
    assert all((p / "verdict.json").exists() for p in run_dirs)
    report = build_report(out / "runs", tmp_path / "report")
    assert report.n_runs == 4 and report.n_valid == 4


def test_a_validation_runs_as_ray_tasks_and_is_judged_like_a_local_one(tmp_path: Path) -> None:
    """``dbaops validate --executor ray``: the validation's campaign on a local Ray instance,
    its runs judged against their expectations as a local validation's are."""
    from dbaops.campaign.ray_executor import run_on_ray
    from dbaops.execution.runner import RunOptions
    from dbaops.execution.validate import summarize_validation, validation_plan

    scenario = str(SCENARIOS / "t-replica.yaml")
    options = RunOptions(time_scale=0.25, runs_dir=tmp_path)
    spec, out = validation_plan([scenario], options, only=["reference"], out=tmp_path / "v")
    summary = summarize_validation(spec, out, run_on_ray(spec, out, workers=1))
    assert [(r.solution, r.ok) for r in summary.rows] == [("reference", True)], summary.rows
