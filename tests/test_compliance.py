"""Service Compliance: hand-made SLO sample frames with hand-computed expectations."""

from __future__ import annotations

import polars as pl
import pytest
import yaml
from pydantic import ValidationError

from dbaops.evaluation.compliance import (
    ServiceObjective,
    compliance_windows_frame,
    evaluate_service_compliance,
    format_compliance,
)
from dbaops.record.tables import SAMPLE_SCHEMA
from dbaops.workloads.samples import Outcome, SLOSample, samples_frame


def _units(
    workload: str,
    per_window: list[tuple[int, int]],
    *,
    window_s: float = 10.0,
    t0: float = 0.0,
    bad: str = "late",
    kind: str = "oltp",
) -> list[dict[str, object]]:
    """Rows for consecutive windows: (n_on_time, n_bad) units spread evenly in each."""
    rows: list[dict[str, object]] = []
    for k, (n_good, n_bad) in enumerate(per_window):
        n = n_good + n_bad
        for i in range(n):
            s = t0 + k * window_s + window_s * i / max(n, 1)
            outcome = "on_time" if i >= n_bad else bad
            rows.append(
                {
                    "workload": workload,
                    "kind": kind,
                    "unit": "tx",
                    "scheduled_s": s,
                    "start_s": s,
                    "end_s": s + 0.05,
                    "latency_ms": 50.0,
                    "retries": 0,
                    "outcome": outcome,
                    "sqlstate": None,
                    "error": None,
                    "correct": None,
                }
            )
    return rows


def _frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row" if rows else None)


def _full(
    n_windows: int, failing: dict[int, tuple[int, int]] | None = None
) -> list[tuple[int, int]]:
    failing = failing or {}
    return [failing.get(k, (100, 0)) for k in range(n_windows)]


# --------------------------------------------------------------------------- objective


def test_objective_defaults_and_yaml() -> None:
    obj = ServiceObjective()
    assert obj.mode == "windows"
    assert obj.window_s == 10.0
    assert obj.on_time_target == 0.99
    assert obj.min_compliant_windows == 0.95
    assert obj.window_floor is None
    assert obj.from_s == 0.0 and obj.until_s is None and obj.grace_s == 0.0
    assert obj.continuation_s is None
    assert obj.min_units == 1

    doc = yaml.safe_load(
        """
        checkout: {window_s: 10, on_time_target: 0.99, min_compliant_windows: 0.95,
                   window_floor: 0.9, from_s: 150, grace_s: 60, continuation_s: 60}
        finance: {mode: every_unit}
        """
    )
    objs = {k: ServiceObjective.model_validate(v) for k, v in doc.items()}
    assert objs["checkout"].window_floor == 0.9
    assert objs["checkout"].continuation_s == 60
    assert objs["finance"].mode == "every_unit"

    with pytest.raises(ValidationError):
        ServiceObjective.model_validate({"window": 10})  # typo: extra fields forbidden
    with pytest.raises(ValidationError):
        ServiceObjective(from_s=100, until_s=50)
    with pytest.raises(ValidationError):
        ServiceObjective(on_time_target=1.5)


# --------------------------------------------------------------------------- windows mode


def test_pass_case() -> None:
    # 20 windows x 100 units; window 5 has exactly 99 % on time -> still compliant.
    df = _frame(_units("checkout", _full(20, {5: (99, 1)})))
    v = evaluate_service_compliance(df, {"checkout": ServiceObjective()}, horizon_s=200)
    assert v.applicable and v.passed
    r = v.workloads["checkout"]
    assert r.kind == "oltp"
    assert len(r.windows) == 20
    assert (r.n_units, r.n_on_time) == (2000, 1999)
    assert (r.n_evaluated, r.n_compliant, r.n_insufficient) == (20, 20, 0)
    assert (r.budget, r.budget_used) == (1, 0)  # floor(0.05 * 20) = 1
    assert r.budget_exhausted_at_s is None and r.left_at_s is None
    assert r.floor_ok and r.continuation_ok and r.passed
    w5 = r.windows[5]
    assert (w5.start_s, w5.end_s, w5.n_units, w5.n_on_time, w5.n_late) == (50.0, 60.0, 100, 99, 1)
    assert w5.ratio == pytest.approx(0.99) and w5.compliant is True
    assert r.reason == "20/20 windows compliant (budget 1, used 0)"


def test_fail_by_budget_one_window_over() -> None:
    # budget floor(0.05 * 20) = 1; two failing windows (3 and 7) -> exhausted at end of 7.
    df = _frame(_units("checkout", _full(20, {3: (98, 2), 7: (50, 50)})))
    v = evaluate_service_compliance(df, {"checkout": ServiceObjective()}, horizon_s=200)
    r = v.workloads["checkout"]
    assert not v.passed and not r.passed
    assert (r.n_evaluated, r.n_compliant, r.budget, r.budget_used) == (20, 18, 1, 2)
    assert r.windows[3].compliant is False and r.windows[3].ratio == pytest.approx(0.98)
    assert r.budget_exhausted_at_s == 80.0
    assert r.left_at_s == 80.0
    assert r.floor_ok and r.continuation_ok
    assert r.reason.startswith(
        "budget exhausted at 80 s: window 70–80 s 50.0 % on time < target 99 % "
        "(50/100 good, 50 late) is failing window 2, budget 1 of 20 evaluated windows"
    )


def test_exactly_at_budget_edge_passes() -> None:
    # 40 windows, 0.95 -> budget 2; exactly 2 failing windows pass.
    df = _frame(_units("checkout", _full(40, {10: (90, 10), 30: (0, 100)})))
    r = evaluate_service_compliance(df, {"checkout": ServiceObjective()}, 400).workloads["checkout"]
    assert (r.n_evaluated, r.n_compliant, r.budget, r.budget_used) == (40, 38, 2, 2)
    assert r.passed and r.budget_exhausted_at_s is None and r.left_at_s is None

    # (1 - 0.9) * 30 is 2.9999999999999996 in floating point; the budget is still 3.
    df = _frame(_units("checkout", _full(30, {1: (0, 100), 2: (0, 100), 3: (0, 100)})))
    obj = ServiceObjective(min_compliant_windows=0.9)
    r = evaluate_service_compliance(df, {"checkout": obj}, 300).workloads["checkout"]
    assert (r.budget, r.budget_used, r.passed) == (3, 3, True)

    # ... and one more failing window exhausts it at the end of that window (190 s).
    df = _frame(
        _units("checkout", _full(30, {1: (0, 100), 2: (0, 100), 3: (0, 100), 18: (10, 90)}))
    )
    r = evaluate_service_compliance(df, {"checkout": obj}, 300).workloads["checkout"]
    assert (r.budget, r.budget_used, r.passed) == (3, 4, False)
    assert r.budget_exhausted_at_s == 190.0 and r.left_at_s == 190.0


def test_floor_violated_while_budget_fine() -> None:
    df = _frame(_units("checkout", _full(20, {8: (85, 15)})))
    obj = ServiceObjective(window_floor=0.90)
    r = evaluate_service_compliance(df, {"checkout": obj}, 200).workloads["checkout"]
    assert (r.budget, r.budget_used) == (1, 1)
    assert r.budget_exhausted_at_s is None
    assert r.floor_ok is False and r.continuation_ok is True and r.passed is False
    assert r.left_at_s == 90.0  # end of the window below the floor
    assert r.reason == "window 80–90 s: 85.0 % on time < floor 90 % (85/100 good, 15 late)"

    # 95 % is below the 99 % target but above the floor: passes on the budget.
    df = _frame(_units("checkout", _full(20, {8: (95, 5)})))
    r = evaluate_service_compliance(df, {"checkout": obj}, 200).workloads["checkout"]
    assert r.floor_ok and r.passed and r.budget_used == 1


def test_continuation_failure_at_end_while_budget_fine() -> None:
    df = _frame(_units("checkout", _full(20, {18: (90, 10)})))
    obj = ServiceObjective(continuation_s=30)
    r = evaluate_service_compliance(df, {"checkout": obj}, 200).workloads["checkout"]
    assert [w.index for w in r.windows if w.in_continuation] == [17, 18, 19]
    assert (r.budget, r.budget_used) == (1, 1)
    assert r.budget_exhausted_at_s is None and r.floor_ok
    assert r.continuation_ok is False and r.passed is False
    assert r.left_at_s == 180.0  # start of the failing continuation window
    assert r.reason == (
        "continuation window 180–190 s: 90.0 % on time < target 99 % (90/100 good, 10 late)"
    )

    # A continuation start inside a window pulls in the whole overlapping window (175 s).
    r = evaluate_service_compliance(
        df, {"checkout": ServiceObjective(continuation_s=25)}, 200
    ).workloads["checkout"]
    assert [w.index for w in r.windows if w.in_continuation] == [17, 18, 19]

    # The same failing window earlier in the run is covered by the budget.
    df = _frame(_units("checkout", _full(20, {10: (90, 10)})))
    r = evaluate_service_compliance(df, {"checkout": obj}, 200).workloads["checkout"]
    assert r.continuation_ok and r.passed and r.left_at_s is None


def test_insufficient_windows_excluded() -> None:
    # window 4 is empty, window 9 has only 3 (late) units; min_units = 5.
    df = _frame(_units("checkout", _full(20, {4: (0, 0), 9: (0, 3)})))
    obj = ServiceObjective(min_units=5)
    r = evaluate_service_compliance(df, {"checkout": obj}, 200).workloads["checkout"]
    assert len(r.windows) == 20
    assert (r.n_insufficient, r.n_evaluated, r.n_compliant) == (2, 18, 18)
    assert (r.budget, r.budget_used) == (0, 0)  # floor(0.05 * 18) = 0
    w4, w9 = r.windows[4], r.windows[9]
    assert (w4.n_units, w4.ratio, w4.compliant, w4.insufficient) == (0, None, None, True)
    assert (w9.n_units, w9.n_late, w9.ratio, w9.compliant, w9.insufficient) == (
        3,
        3,
        0.0,
        None,
        True,
    )
    assert r.passed and r.left_at_s is None
    assert r.notes == [
        "2 of 20 windows had fewer than 5 unit(s) and were excluded from the denominator"
    ]

    # With the default min_units = 1, window 9 is evaluated and fails (budget 0 of 19).
    r = evaluate_service_compliance(df, {"checkout": ServiceObjective()}, 200).workloads["checkout"]
    assert (r.n_insufficient, r.n_evaluated, r.budget, r.budget_used) == (1, 19, 0, 1)
    assert r.passed is False and r.left_at_s == 100.0


def test_dropped_error_late_and_incorrect_count_as_bad() -> None:
    rows = _units("checkout", _full(10))
    # window 2: replace 4 on-time units with late, error, dropped and on-time-but-incorrect
    idx = [i for i, row in enumerate(rows) if 20.0 <= row["scheduled_s"] < 30.0][:4]  # type: ignore[operator]
    for i, (outcome, correct) in zip(
        idx, [("late", None), ("error", None), ("dropped", None), ("on_time", False)], strict=True
    ):
        rows[i]["outcome"] = outcome
        rows[i]["correct"] = correct
        if outcome == "error":
            rows[i]["sqlstate"] = "40P01"
    df = _frame(rows)
    obj = ServiceObjective(min_compliant_windows=1.0)
    r = evaluate_service_compliance(df, {"checkout": obj}, 100).workloads["checkout"]
    w = r.windows[2]
    assert (w.n_units, w.n_on_time, w.n_late, w.n_error, w.n_dropped, w.n_incorrect) == (
        100,
        96,
        1,
        1,
        1,
        1,
    )
    assert w.ratio == pytest.approx(0.96) and w.compliant is False
    assert (r.n_units, r.n_on_time, r.budget, r.budget_used) == (1000, 996, 0, 1)
    assert r.passed is False and r.budget_exhausted_at_s == 30.0 and r.left_at_s == 30.0
    assert "(96/100 good, 1 late, 1 error, 1 dropped, 1 incorrect)" in r.reason


def test_grace_from_and_until_span() -> None:
    # Bad units before from_s + grace_s and after until_s are ignored.
    df = _frame(_units("checkout", _full(30, {2: (0, 100), 25: (0, 100)})))
    obj = ServiceObjective(from_s=40, grace_s=20, until_s=250, min_compliant_windows=1.0)
    r = evaluate_service_compliance(df, {"checkout": obj}, 300).workloads["checkout"]
    assert (r.eval_start_s, r.eval_end_s) == (60.0, 250.0)
    assert len(r.windows) == 19
    assert (r.windows[0].start_s, r.windows[-1].end_s) == (60.0, 250.0)
    assert (r.n_units, r.n_evaluated, r.budget_used, r.passed) == (1900, 19, 0, True)

    # Windows are anchored at the span start; the last one is truncated at the horizon.
    df = _frame(_units("checkout", _full(21)))
    r = evaluate_service_compliance(df, {"checkout": ServiceObjective(from_s=5)}, 205).workloads[
        "checkout"
    ]
    assert len(r.windows) == 20
    assert (r.windows[0].start_s, r.windows[0].end_s) == (5.0, 15.0)
    assert (r.windows[-1].start_s, r.windows[-1].end_s) == (195.0, 205.0)
    assert r.n_units == 2000  # units scheduled in [5, 205)


# --------------------------------------------------------------------------- OLAP


def _jobs(bad_at: dict[float, dict[str, object]]) -> pl.DataFrame:
    samples = []
    for t in (0.0, 60.0, 120.0, 180.0, 240.0):
        fields: dict[str, object] = {"outcome": Outcome.ON_TIME, "correct": True}
        fields.update(bad_at.get(t, {}))
        samples.append(
            SLOSample(
                workload="finance",
                kind="olap",
                unit="daily_finance",
                scheduled_s=t,
                start_s=t,
                end_s=t + 20,
                latency_ms=20_000.0,
                **fields,  # type: ignore[arg-type]
            )
        )
    return samples_frame(samples)


def test_olap_every_unit_wrong_result_fails() -> None:
    df = _jobs({120.0: {"correct": False}})
    obj = ServiceObjective(mode="every_unit")
    v = evaluate_service_compliance(df, {"finance": obj}, 300)
    r = v.workloads["finance"]
    assert not v.passed
    assert r.kind == "olap"
    assert len(r.windows) == 30
    assert (r.n_units, r.n_on_time, r.n_insufficient, r.n_evaluated) == (5, 4, 25, 5)
    assert (r.budget, r.budget_used) == (0, 1)
    assert r.windows[12].n_incorrect == 1 and r.windows[12].compliant is False
    assert r.budget_exhausted_at_s == 130.0 and r.left_at_s == 130.0
    assert r.reason == (
        "window 120–130 s: required unit 'daily_finance' scheduled 120 s: result incorrect "
        "(0/1 good, 1 incorrect); every unit must be on time and correct"
    )

    # The same jobs under window logic with an 80 % window target: budget floor(0.2*5) = 1.
    r = evaluate_service_compliance(
        df, {"finance": ServiceObjective(min_compliant_windows=0.8)}, 300
    ).workloads["finance"]
    assert (r.budget, r.budget_used, r.passed) == (1, 1, True)


def test_olap_every_unit_error_and_all_good() -> None:
    df = _jobs({180.0: {"outcome": Outcome.ERROR, "sqlstate": "57014", "correct": None}})
    r = evaluate_service_compliance(
        df, {"finance": ServiceObjective(mode="every_unit", min_units=5)}, 300
    ).workloads["finance"]
    assert r.passed is False and r.left_at_s == 190.0
    assert "'daily_finance' scheduled 180 s: error (SQLSTATE 57014)" in r.reason
    assert r.n_evaluated == 5  # min_units is ignored in every_unit mode

    r = evaluate_service_compliance(
        _jobs({}), {"finance": ServiceObjective(mode="every_unit")}, 300
    ).workloads["finance"]
    assert r.passed and r.left_at_s is None
    assert r.reason == "all 5 units on time and correct in 5 windows"


# --------------------------------------------------------------------------- no samples


def test_no_samples_fails_with_reason() -> None:
    df = _frame(_units("other", _full(20)))
    obj = ServiceObjective(grace_s=60, continuation_s=30)
    v = evaluate_service_compliance(df, {"checkout": obj}, 200)
    r = v.workloads["checkout"]
    assert v.applicable and not v.passed and not r.passed
    assert r.reason == "no samples for workload 'checkout' in the evaluation span [60, 200) s"
    assert (r.n_units, r.n_evaluated, r.n_insufficient, len(r.windows)) == (0, 0, 14, 14)
    assert r.left_at_s == 60.0 and r.continuation_ok is False
    assert v.unscored_workloads == ["other"]

    v = evaluate_service_compliance(samples_frame([]), {"checkout": ServiceObjective()}, 200)
    assert not v.passed
    assert v.workloads["checkout"].reason.startswith("no samples for workload 'checkout'")

    # Span emptied by grace beyond the horizon.
    v = evaluate_service_compliance(df, {"other": ServiceObjective(grace_s=300)}, 200)
    assert not v.passed
    assert v.workloads["other"].reason == "empty evaluation span [300, 200) s (horizon 200 s)"

    # All windows insufficient.
    v = evaluate_service_compliance(df, {"other": ServiceObjective(min_units=101)}, 200)
    r = v.workloads["other"]
    assert not v.passed and r.n_evaluated == 0 and r.left_at_s == 0.0
    assert r.reason == "no evaluated window in [0, 200) s: all 20 windows had fewer than 101 units"


def test_no_objectives_not_applicable() -> None:
    v = evaluate_service_compliance(_frame(_units("checkout", _full(2))), {}, 20)
    assert (v.applicable, v.passed, v.workloads, v.unscored_workloads) == (
        False,
        True,
        {},
        ["checkout"],
    )
    assert format_compliance(v) == (
        "Service Compliance: not applicable (no service objectives declared)"
    )


def test_missing_columns_and_bad_horizon_raise() -> None:
    with pytest.raises(ValueError, match="outcome"):
        evaluate_service_compliance(
            pl.DataFrame({"workload": ["a"], "scheduled_s": [1.0]}), {"a": ServiceObjective()}, 10
        )
    with pytest.raises(ValueError, match="horizon_s"):
        evaluate_service_compliance(samples_frame([]), {"a": ServiceObjective()}, 0)


# --------------------------------------------------------------------------- survival


def test_survival_left_at_s() -> None:
    rows = (
        # budget 1 of 20: windows 2 and 5 fail -> leaves at 60 s (end of window 5)
        _units("a", _full(20, {2: (0, 10), 5: (0, 10)}))
        # floor at 50 s end (window 4, 80 %) precedes the budget exhaustion (window 11 -> 120 s)
        + _units("b", _full(20, {4: (80, 20), 11: (0, 100)}))
        # continuation [150, 200): window 16 fails at its start, 160 s
        + _units("c", _full(20, {16: (98, 2)}))
        # passes: one failing window within budget
        + _units("d", _full(20, {16: (98, 2)}))
    )
    df = _frame(rows)
    objs = {
        "a": ServiceObjective(),
        "b": ServiceObjective(window_floor=0.9),
        "c": ServiceObjective(continuation_s=50),
        "d": ServiceObjective(),
    }
    v = evaluate_service_compliance(df, objs, 200)
    left = {k: r.left_at_s for k, r in v.workloads.items()}
    assert left == {"a": 60.0, "b": 50.0, "c": 160.0, "d": None}
    assert {k: r.budget_exhausted_at_s for k, r in v.workloads.items()} == {
        "a": 60.0,
        "b": 120.0,
        "c": None,
        "d": None,
    }
    assert v.workloads["b"].reason.startswith("window 40–50 s: 80.0 % on time < floor 90 %")
    assert len(v.workloads["b"].failures) == 2  # floor first, then budget
    assert v.workloads["b"].failures[1].startswith("budget exhausted at 120 s")
    assert all(r.passed == (r.left_at_s is None) for r in v.workloads.values())
    assert v.passed is False

    frame = compliance_windows_frame(v)
    assert frame.shape == (80, 16)
    assert frame.filter(pl.col("compliant").not_()).height == 6
    c_cont = frame.filter((pl.col("workload") == "c") & pl.col("in_continuation"))
    assert c_cont["start_s"].to_list() == [150.0, 160.0, 170.0, 180.0, 190.0]

    text = format_compliance(v)
    assert text.splitlines()[0] == ("Service Compliance: FAIL (1/4 workloads pass, horizon 200 s)")
    assert "  d [oltp, windows]: PASS - 19/20 windows compliant (budget 1, used 1)" in text
    assert "left at 160 s" in text


def test_large_frame_completes() -> None:
    # ~1.5 M rows over two workloads; 600 s horizon, 1250 units/s each.
    n = 750_000
    base = pl.DataFrame({"i": pl.int_range(0, n, eager=True)})
    parts = []
    for name in ("checkout", "reads"):
        parts.append(
            base.select(
                pl.lit(name).alias("workload"),
                pl.lit("oltp").alias("kind"),
                pl.lit("tx").alias("unit"),
                (pl.col("i") * (600.0 / n)).alias("scheduled_s"),
                (pl.col("i") * (600.0 / n)).alias("start_s"),
                (pl.col("i") * (600.0 / n) + 0.01).alias("end_s"),
                pl.lit(10.0).alias("latency_ms"),
                pl.lit(0, pl.Int32).alias("retries"),
                pl.when(pl.col("i") % 50 == 0)
                .then(pl.lit("late"))
                .otherwise(pl.lit("on_time"))
                .alias("outcome"),
                pl.lit(None, pl.String).alias("sqlstate"),
                pl.lit(None, pl.String).alias("error"),
                pl.lit(None, pl.Boolean).alias("correct"),
            )
        )
    df = pl.concat(parts)
    objs = {
        "checkout": ServiceObjective(on_time_target=0.98),
        "reads": ServiceObjective(on_time_target=0.99),
    }
    v = evaluate_service_compliance(df, objs, 600)
    ck, rd = v.workloads["checkout"], v.workloads["reads"]
    assert (ck.n_units, ck.n_on_time, ck.n_evaluated, ck.n_compliant) == (750_000, 735_000, 60, 60)
    assert ck.passed
    assert (rd.n_evaluated, rd.n_compliant, rd.budget) == (60, 0, 3)
    assert rd.budget_exhausted_at_s == 40.0 and not rd.passed
