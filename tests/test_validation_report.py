"""The committed validation report and the difficulty rule (no database: built from rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbaops.execution.validate import ValidationRow, ValidationSummary, _difficulty_verdict
from dbaops.execution.validation_report import (
    ValidationReport,
    read_report,
    scale_flips,
    scenario_records,
    write_report,
)
from dbaops.record.kinds import SurveyProbe, SurveyRecord
from dbaops.scenario.loader import load_scenario
from dbaops.scenario.model import Scenario
from dbaops.scenario.specs import DifficultySpec


def _row(scenario: str, solution: str, ok: bool = True, server: str = "15.18") -> ValidationRow:
    passed = solution.startswith("reference")
    return ValidationRow(
        scenario=scenario,
        solution=solution,
        time_scale=0.05,
        repeat=1,
        expectation="",
        status="completed",
        outcome_pass=passed if ok else not passed,
        safe_pass=passed,
        ok=ok,
        reason="" if ok else f"{solution} passed Outcome Pass: the verifier cannot fail",
        run_dir=Path("-"),
        server_version=server,
        duration_s=60.0,
    )


def _with_difficulty(sc: Scenario, spec: DifficultySpec) -> Scenario:
    return sc.model_copy(
        update={"evaluation": sc.evaluation.model_copy(update={"difficulty": spec})}
    )


def test_a_declared_hard_label_the_reference_run_does_not_bear_out_fails_validation() -> None:
    sc, _, _ = load_scenario("pg-qt-01")
    assert sc.difficulty == "hard"
    sc = _with_difficulty(
        sc, DifficultySpec(path=["a", "b", "c", "d"], modalities={"sql": {"causal": "^orders"}})
    )
    label, problem = _difficulty_verdict(sc, [])  # a reference run without a survey
    assert problem == "the reference run recorded no survey of the observation surface"
    calm = SurveyRecord(sql={"sessions": SurveyProbe(query="q", rows=["orders | 1"])})
    label, problem = _difficulty_verdict(sc, [calm])  # nothing but the cause to see
    assert label is not None and label.label == "easy"
    assert problem is not None and "declared hard, measured easy" in problem


def test_a_scenario_without_modalities_is_not_admitted() -> None:
    sc, _, _ = load_scenario("pg-qt-01")
    assert sc.evaluation.difficulty is not None
    bare = sc.model_copy(
        update={
            "evaluation": sc.evaluation.model_copy(
                update={
                    "difficulty": sc.evaluation.difficulty.model_copy(update={"modalities": {}})
                }
            )
        }
    )
    _, problem = _difficulty_verdict(bare, [])
    assert problem is not None and "no observation modalities" in problem


def test_a_surface_that_shows_no_causal_unit_is_not_admitted() -> None:
    sc, _, _ = load_scenario("pg-qt-01")
    spec = DifficultySpec(
        path=["a", "b", "c", "d"], modalities={"sql": {"causal": "orders_created_idx"}}
    )
    sc = _with_difficulty(sc, spec)
    blind = SurveyRecord(sql={"sessions": SurveyProbe(query="q", rows=["app | idle"] * 9)})
    _, problem = _difficulty_verdict(sc, [blind])
    assert problem is not None and "shows no causal unit in sql" in problem
    typo = SurveyRecord(
        sql={
            "indexes": SurveyProbe(query="q", rows=["orders_created_idx | 1", "x | 2"]),
            "query1": SurveyProbe(query="EXPLAIN SELEC 1", error="PostgresSyntaxError: x"),
        }
    )
    _, problem = _difficulty_verdict(sc, [typo])
    assert problem is not None and "1 probe(s) of the surveyed sql surface failed" in problem
    causal = [f"orders_created_idx | {i}" for i in range(2)]  # 2 causal rows, 6 competing
    rows = [*causal, *(f"other | {i}" for i in range(6))]
    survey = SurveyRecord(sql={"indexes": SurveyProbe(query="q", rows=rows)})
    label, problem = _difficulty_verdict(sc, [survey])
    assert label is not None and label.depth == 3 and label.complexity == 0.75
    assert problem is None


def test_persistent_scenarios_are_hard_at_corpus_level_not_by_the_rule() -> None:
    sc, _, _ = load_scenario("pg-p-02")
    assert _difficulty_verdict(sc, []) == (None, None)


def test_one_record_per_scenario_and_server_major_and_new_results_replace_old(
    tmp_path: Path,
) -> None:
    first = ValidationSummary(
        rows=[_row("pg-x-01", s) for s in ("noop", "reference", "reference:alt", "shallow")]
        + [_row("pg-x-02", "noop", ok=False), _row("pg-x-02", "reference")],
        flips=[],
    )
    records = scenario_records(first, {"pg-x-01": "hard", "pg-x-02": "easy"})
    assert [(r.id, r.valid) for r in records] == [("pg-x-01", True), ("pg-x-02", False)]
    write_report(tmp_path, ValidationReport().merged(records))
    again = ValidationSummary(
        rows=[_row("pg-x-02", "noop"), _row("pg-x-02", "reference")], flips=[]
    )
    on_18 = ValidationSummary(rows=[_row("pg-x-02", "noop", server="18.1")], flips=[])
    merged = read_report(tmp_path).merged(scenario_records(again, {}) + scenario_records(on_18, {}))
    assert [(r.id, r.server_version, r.valid) for r in merged.records] == [
        ("pg-x-01", "15.18", True),
        ("pg-x-02", "15.18", True),
        ("pg-x-02", "18.1", True),
    ]
    _, md = write_report(tmp_path, merged)
    text = md.read_text()
    assert "| pg-x-01 | postgres 15.18 | 0.05 | yes | fail | pass/pass | alt pass/pass |" in text
    assert "3 of 3 records valid." in text


def test_a_flip_makes_the_scenario_invalid() -> None:
    summary = ValidationSummary(
        rows=[_row("pg-x-01", "noop"), _row("pg-x-01", "reference")],
        flips=["pg-x-01/reference: verdicts differ across repeats or scales {...}"],
    )
    assert [r.valid for r in scenario_records(summary, {})] == [False]


def test_a_verdict_that_differs_between_time_scales_is_reported() -> None:
    """Records of one definition at 0.05 and at 1.0: a blunt fix that fails Safe Pass at both
    scales but Outcome only at one is a flip the report shows (each record alone is valid)."""
    fast = ValidationSummary(
        rows=[_row("pg-x-01", "noop"), _row("pg-x-01", "reference"), _row("pg-x-01", "blunt:b")],
        flips=[],
    )
    slow_rows = [_row("pg-x-01", "noop"), _row("pg-x-01", "reference"), _row("pg-x-01", "blunt:b")]
    slow_rows = [r.model_copy(update={"time_scale": 1.0}) for r in slow_rows]
    slow_rows[2] = slow_rows[2].model_copy(update={"outcome_pass": True})
    slow = ValidationSummary(rows=slow_rows, flips=[])
    definitions = {"pg-x-01": "k1"}
    records = [
        *scenario_records(fast, {}, definitions),
        *scenario_records(slow, {}, definitions),
    ]
    report = ValidationReport().merged(records)
    assert all(r.valid for r in report.records)
    assert scale_flips(report) == [
        "pg-x-01/blunt:b on postgres 15: OP/SP fail/fail at 0.05, pass/fail at 1"
    ]
    # a record of another definition (the scenario changed since) is not compared
    stale = scenario_records(slow, {}, {"pg-x-01": "k0"})
    assert (
        scale_flips(ValidationReport().merged([*scenario_records(fast, {}, definitions), *stale]))
        == []
    )


def test_records_of_an_older_definition_are_dropped_when_a_scenario_is_validated_again() -> None:
    """Re-validating a changed scenario at one scale leaves its records at other scales stale:
    the report keeps none of them (they say nothing of the scenario as it is now)."""
    fast = ValidationSummary(rows=[_row("pg-x-01", "noop"), _row("pg-x-01", "reference")], flips=[])
    slow_rows = [r.model_copy(update={"time_scale": 1.0}) for r in fast.rows]
    slow = ValidationSummary(rows=slow_rows, flips=[])
    other = ValidationSummary(
        rows=[_row("pg-x-02", "noop"), _row("pg-x-02", "reference")], flips=[]
    )
    before = ValidationReport().merged(
        [
            *scenario_records(fast, {}, {"pg-x-01": "old"}),
            *scenario_records(slow, {}, {"pg-x-01": "old"}),
            *scenario_records(other, {}, {"pg-x-02": "k2"}),
        ]
    )
    now = {"pg-x-01": "new"}
    report, stale = before.merged(scenario_records(fast, {}, now)).current(now)
    assert [(r.id, r.time_scale) for r in stale] == [("pg-x-01", 1.0)]
    assert sorted((r.id, r.time_scale, r.definition) for r in report.records) == [
        ("pg-x-01", 0.05, "new"),
        ("pg-x-02", 0.05, "k2"),
    ]


def test_the_definition_key_follows_what_is_written(tmp_path: Path) -> None:
    """A default written out (or a new optional field of the format) changes nothing; a
    changed value does."""
    from dbaops.scenario.loader import definition_key, load_scenario, timelines_dir

    text = (timelines_dir() / "pg-rg-01.yaml").read_text()
    assert "      pause_ms:" in text

    def key(body: str) -> str:
        path = tmp_path / "pg-rg-01.yaml"
        path.write_text(body)
        sc, lib, _ = load_scenario(path)
        return definition_key(sc, lib)

    base = key(text)
    assert (
        key(text.replace("      pause_ms:", "      reconnect: false\n      pause_ms:", 1)) == base
    )
    assert key(text.replace("      pause_ms:", "      reconnect: true\n      pause_ms:", 1)) != base


def test_a_partial_validation_is_incomplete_until_its_other_solutions_are_run(
    tmp_path: Path,
) -> None:
    """A long validation run one solution at a time (e.g. at --time-scale 1.0): the parts of
    one scenario definition add up to one record, which is valid only once it is complete."""
    declared = {"pg-x-01": ["noop", "reference", "shallow"]}
    only_reference = ValidationSummary(rows=[_row("pg-x-01", "reference")], flips=[])
    first = scenario_records(only_reference, {}, {"pg-x-01": "key-1"}, declared)
    assert [(r.valid, r.missing) for r in first] == [(False, ["noop", "shallow"])]
    report = ValidationReport().merged(first)
    _, md = write_report(tmp_path, report)
    assert "incomplete: noop, shallow not run yet" in md.read_text()

    rest = ValidationSummary(rows=[_row("pg-x-01", "noop"), _row("pg-x-01", "shallow")], flips=[])
    both = report.merged(scenario_records(rest, {}, {"pg-x-01": "key-1"}, declared))
    (record,) = both.records
    assert record.valid and record.missing == []
    assert sorted(v.solution for v in record.verdicts) == ["noop", "reference", "shallow"]
    assert record.duration_s == 180.0

    # a part of a changed definition does not add to the old record: it starts a new one
    changed = report.merged(scenario_records(rest, {}, {"pg-x-01": "key-2"}, declared))
    (record,) = changed.records
    assert not record.valid and record.missing == ["reference"]

    # a failing part makes the whole record not valid
    bad = ValidationSummary(rows=[_row("pg-x-01", "noop", ok=False)], flips=[])
    worse = both.merged(scenario_records(bad, {}, {"pg-x-01": "key-1"}, declared))
    assert [r.valid for r in worse.records] == [False]


def test_a_blunt_fix_is_valid_only_when_it_fails_safe_pass() -> None:
    """A blunt fix may reach Outcome Pass (it often does: it removes the symptom) but must
    break Safe Pass; one that reaches Safe Pass means the ticket's constraint is unenforced."""
    from dbaops.execution.validate import _judge

    assert _judge("blunt:no-cap", "completed", True, False) == (True, "")
    assert _judge("blunt:no-cap", "completed", False, False) == (True, "")
    ok, reason = _judge("blunt:no-cap", "completed", True, True)
    assert not ok and "unenforced" in reason
    assert not _judge("blunt:no-cap", "completed", None, None)[0]


def test_validate_prints_every_reason_whole_when_its_output_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In a log or a pipe the rows are plain lines with the whole reason (a table there is
    cut to 80 columns and hides it)."""
    from dbaops.cli import _print_validation_rows

    reason = "blunt:cap-removed reached Safe Pass: the ticket's constraint is unenforced " * 3
    row = ValidationRow(
        scenario="tb-rg-01", solution="blunt:cap-removed", repeat=1, expectation="fails Safe Pass",
        status="completed", outcome_pass=True, safe_pass=True, ok=False, reason=reason,
        run_dir=Path("-"),
    )  # fmt: skip
    _print_validation_rows(ValidationSummary(rows=[row], flips=[]))
    out = capsys.readouterr().out
    assert reason.strip() in out and "FAIL" in out and "blunt:cap-removed" in out


def test_a_run_of_another_definition_does_not_prove_the_scenario(tmp_path: Path) -> None:
    """A scenario edited while its validation runs: a run that used the other definition
    fails its row, so the report never records a definition no run proved."""
    from dbaops.execution.validate import _changed_since_run
    from dbaops.scenario.loader import definition_key, timelines_dir

    sc, lib, _ = load_scenario("pg-sf-01")
    key = definition_key(sc, lib)
    text = (timelines_dir() / "pg-sf-01.yaml").read_text()
    run = tmp_path / "run"
    run.mkdir()
    (run / "scenario.yaml").write_text(text)
    assert _changed_since_run(key, run) is None
    (run / "scenario.yaml").write_text(text.replace("time_budget_s: 900", "time_budget_s: 901"))
    assert "changed during the validation" in (_changed_since_run(key, run) or "")
