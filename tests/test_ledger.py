"""The driver ledger: State Integrity against what the workload clients committed."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbaops.evaluation.score import score_run
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.record.kinds import CheckRecord, PhaseRecord
from dbaops.record.tables import read_samples
from dbaops.record.trace import read_trace
from dbaops.scenario.checks import LedgerCheck
from dbaops.scenario.loader import ScenarioError, load_scenario
from dbaops.workloads.ledger import DriverLedger, LedgerSnapshot, ledger_bounds

SCENARIOS = Path(__file__).parent / "scenarios"


def test_bounds_run_from_the_commits_before_to_everything_possible_after() -> None:
    ledger = DriverLedger()
    for _ in range(3):
        ledger.begin("ins")
        ledger.end("ins", committed=True)
    before = ledger.snapshot()
    ledger.begin("ins")
    ledger.end("ins", committed=False, in_doubt=2)  # two abandoned attempts, then a failure
    ledger.begin("ins")  # still running
    ledger.begin("other")
    ledger.end("other", committed=True)
    after = ledger.snapshot()
    assert after.entry("ins").model_dump() == {"committed": 3, "in_doubt": 2, "in_flight": 1}
    assert ledger_bounds(before, after, {"ins": 1}) == (3, 6)
    assert ledger_bounds(before, after, {"ins": 2, "other": 1}) == (6, 13)
    assert ledger_bounds(LedgerSnapshot(), after, {}) == (0, 0)


@pytest.mark.anyio
async def test_ledger_checks_pass_while_the_state_follows_the_clients_and_fail_after_tampering(
    tmp_path: Path,
) -> None:
    result = await run_scenario(
        SCENARIOS / "t-ledger.yaml", RunOptions(time_scale=0.25, runs_dir=tmp_path)
    )
    assert result.status == "completed"
    records = read_trace(result.run_dir)
    phases = [r for r in records if isinstance(r, PhaseRecord)]
    (baseline,) = [r for r in phases if r.phase == "ledger_baseline"]
    assert set(baseline.detail["baselines"]) == {
        "notes_conserved",
        "notes_counted",
        "customers_unchanged",
    }
    assert (
        baseline.detail["baselines"]["notes_counted"]
        == (baseline.detail["baselines"]["notes_conserved"])
    )
    # a measure that fails on the prepared state is recorded; its check fails, the run goes on
    assert "no_such_table" in baseline.detail["errors"]["unmeasurable"]
    checks = [r for r in records if isinstance(r, CheckRecord) and r.purpose == "integrity"]
    probe = {r.name: r for r in checks if r.t_scn < 14}
    final = {r.name: r for r in checks if r.t_scn >= 14}
    # mid-run, with the clients inserting: the change lies within the ledger's bounds
    assert probe["notes_conserved"].passed, probe["notes_conserved"]
    assert probe["notes_counted"].passed, probe["notes_counted"]
    assert probe["customers_unchanged"].passed
    # at the end the clients have stopped, so the bounds are exact; one note was deleted
    samples = read_samples(result.run_dir)
    committed = samples.filter(samples["outcome"].is_in(["on_time", "late"])).height
    observed = final["notes_conserved"].observed
    assert committed > 0
    assert observed["ledger"]["log_note"]["committed"] == committed
    # exact unless a unit timed out on a busy machine (then in doubt: the upper bound widens)
    in_doubt = observed["ledger"]["log_note"]["in_doubt"]
    assert observed["allowed"] == [committed, committed + in_doubt]
    assert observed["change"] == committed - 1 < observed["allowed"][0]
    assert not final["notes_conserved"].passed
    counted = final["notes_counted"].observed
    assert counted["change"] == committed - 1 < counted["allowed"][0]
    assert not final["notes_counted"].passed
    assert not final["customers_unchanged"].passed
    assert not final["unmeasurable"].passed
    assert "no baseline" in (final["unmeasurable"].error or "")
    verdict = score_run(result.run_dir)
    assert verdict.state_integrity.passed is False


def test_ledger_checks_belong_in_the_evaluation_and_count_templates_a_workload_runs(
    tmp_path: Path,
) -> None:
    text = (SCENARIOS / "t-ledger.yaml").read_text()
    path = tmp_path / "t-ledger.yaml"
    moved = text.replace(
        "preparation:\n  warmup_s: 1\n",
        "preparation:\n  warmup_s: 1\n  manifestation:\n"
        "    - {check: ledger, name: early, sql: SELECT 1}\n",
    )
    path.write_text(moved)
    with pytest.raises(ScenarioError, match=r"preparation.manifestation\[0\].*only evaluation"):
        load_scenario(path)
    unknown = text.replace("units: {log_note: 1}", "units: {log_nte: 1}")
    path.write_text(unknown)
    with pytest.raises(ScenarioError, match=r"units.log_nte: no workload runs transaction"):
        load_scenario(path)

    for measures in ("", "      count_rows_of: SELECT 'public', 'audit_log'\n"):
        both = text.replace(
            "      sql: SELECT count(*) FROM public.audit_log\n",
            "      sql: SELECT count(*) FROM public.audit_log\n" + measures,
        )
        if not measures:
            both = both.replace("      sql: SELECT count(*) FROM public.audit_log\n", "")
        path.write_text(both)
        with pytest.raises(ScenarioError, match=r"either sql .* or count_rows_of"):
            load_scenario(path)


@pytest.mark.anyio
async def test_a_view_swapped_in_under_a_counted_name_is_refused_before_its_code_runs() -> None:
    """``count_rows_of`` reads table names: a view the agent puts under one (whose function
    would run in the harness's session) is refused by the count itself, never read."""
    from dbaops.execution.checks import ledger_baselines
    from dbaops.testing.shop import small_shop

    async with small_shop("t-ledger-view") as endpoint:
        agent = await endpoint.connect("dba_agent", "dba_agent")
        try:
            await agent.execute(
                "CREATE FUNCTION public.planted() RETURNS bigint LANGUAGE plpgsql AS "
                "$$BEGIN RAISE EXCEPTION 'planted code ran'; END$$; "
                "CREATE VIEW public.audit_view AS SELECT public.planted() AS n"
            )
        finally:
            await agent.close()
        check = LedgerCheck(name="rows", count_rows_of="SELECT 'public', 'audit_view'")
        measures, errors = await ledger_baselines([check], endpoint)
    assert measures == {}
    assert "TABLESAMPLE" in errors["rows"] and "planted" not in errors["rows"]
