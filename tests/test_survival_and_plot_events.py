"""Missed windows and the event they follow (dbaops plot), and Service Compliance survival over
persistent runs (dbaops report, paper Fig. 9 left): synthetic run directories, no database."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from dbaops.analysis.plot import missed_summary, plot_run, run_figure
from dbaops.analysis.report import NO_SURVIVAL, build_report, load_summaries
from dbaops.analysis.series import (
    missed_by_event,
    missed_windows,
    occurred_events,
    preceding_events,
    run_series,
)
from dbaops.analysis.survival import (
    CaseExit,
    case_exit,
    survival_curve,
    survival_figure,
    survival_table,
)
from dbaops.analysis.synthetic import header, scenario_dict, write_run
from dbaops.evaluation.compliance import (
    ServiceComplianceVerdict,
    ServiceObjective,
    evaluate_service_compliance,
)
from dbaops.record.kinds import EventRecord, RunEnd

CHECKOUT = {
    "name": "checkout",
    "type": "oltp",
    "mix": {"checkout": 1},
    "rate_per_s": 1,
    "deadline_ms": 500,
}


def _samples(
    n_windows: int, late: dict[int, int], *, workload: str = "checkout", per_window: int = 10
) -> pl.DataFrame:
    """``per_window`` units evenly in each 10 s window; ``late[k]`` of window k are late."""
    t, outcome = [], []
    for k in range(n_windows):
        for i in range(per_window):
            t.append(k * 10.0 + i * 10.0 / per_window)
            outcome.append("late" if i < late.get(k, 0) else "on_time")
    n = len(t)
    return pl.DataFrame(
        {
            "workload": [workload] * n,
            "kind": ["oltp"] * n,
            "scheduled_s": t,
            "latency_ms": [900.0 if o == "late" else 20.0 for o in outcome],
            "outcome": outcome,
        }
    )


# --------------------------------------------------------------------------- preceding events


def test_window_follows_latest_event_at_or_before_its_start() -> None:
    events = [(20.0, "lock"), (0.0, "ticket"), (45.0, "review")]  # any order
    starts = [-10.0, 0.0, 10.0, 19.999, 20.0, 30.0, 45.0, 50.0]
    assert preceding_events(starts, events) == [
        None,
        "ticket",
        "ticket",
        "ticket",
        "lock",
        "lock",
        "review",
        "review",
    ]
    # of two events at one time the one listed last (the program's order) is the latest
    assert preceding_events([20.0], [(20.0, "fault"), (20.0, "alert")]) == ["alert"]
    assert preceding_events([0.0, 5.0], []) == [None, None]
    assert preceding_events([], events) == []


def _events(rows: list[tuple[str, float, str, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema=["event_id", "at_s", "type", "status"], orient="row"
    ).with_columns(pl.col("at_s").alias("t_s"))


def test_only_events_that_happened_are_followed() -> None:
    ev = _events(
        [
            ("ticket", 0.0, "alert", "fired"),
            ("quiet", 10.0, "alert", "skipped"),  # its condition did not hold
            ("blocker", 20.0, "fault", "fired"),
            ("blocker", 20.0, "fault", "failed"),  # the live actor could not start
            ("review", 40.0, "inspection", "fired"),
        ]
    )
    assert occurred_events(ev) == [(0.0, "ticket"), (40.0, "review")]
    assert occurred_events(ev.clear()) == []


def _windows(ratios: list[float | None], *, target: float = 0.9) -> pl.DataFrame:
    """One workload's windows of 10 s; None is an insufficient window."""
    return pl.DataFrame(
        {
            "workload": ["checkout"] * len(ratios),
            "index": list(range(len(ratios))),
            "start_s": [10.0 * k for k in range(len(ratios))],
            "end_s": [10.0 * k + 10 for k in range(len(ratios))],
            "n_units": [0 if r is None else 10 for r in ratios],
            "n_on_time": [0 if r is None else round(10 * r) for r in ratios],
            "ratio": ratios,
            "compliant": [None if r is None else r >= target for r in ratios],
            "has_objective": [True] * len(ratios),
        },
        schema_overrides={"ratio": pl.Float64, "compliant": pl.Boolean},
    )


def test_missed_windows_carry_the_event_they_follow() -> None:
    win = _windows([1.0, 0.5, None, 0.2, 0.3, 1.0, 0.0])
    ev = _events(
        [
            ("ticket", 0.0, "alert", "fired"),
            ("blocker", 25.0, "fault", "fired"),
            ("review", 60.0, "inspection", "fired"),
        ]
    )
    missed = missed_windows(win, ev)
    # the insufficient window (20-30) is not missed; 30-40 and 40-50 follow the fault at 25
    assert missed["index"].to_list() == [1, 3, 4, 6]
    assert missed["after_event"].to_list() == ["ticket", "blocker", "blocker", "review"]
    assert missed["after_type"].to_list() == ["alert", "fault", "fault", "inspection"]
    groups = missed_by_event(missed)
    assert groups.select("after_event", "n_missed", "first_start_s", "last_end_s").rows() == [
        ("ticket", 1, 10.0, 20.0),
        ("blocker", 2, 30.0, 50.0),
        ("review", 1, 60.0, 70.0),
    ]
    # workloads without an objective are never missed
    shown = win.with_columns(pl.lit(False).alias("has_objective"))
    assert missed_windows(shown, ev).height == 0


def test_missed_windows_without_events_or_misses() -> None:
    win = _windows([1.0, 0.5, 0.0])
    none = missed_windows(win, _events([("ticket", 0.0, "alert", "fired")]).clear())
    assert none["after_event"].to_list() == [None, None]
    assert missed_by_event(none)["n_missed"].to_list() == [2]
    clean = missed_windows(_windows([1.0, 1.0]), _events([("ticket", 0.0, "alert", "fired")]))
    assert clean.height == 0 and "after_event" in clean.columns
    assert missed_by_event(clean).height == 0


# --------------------------------------------------------------------------- per-run plot


def _plot_run(root: Path, *, records: list[Any] | None = None) -> Path:
    """60 s run, checkout in 10 s windows (target 0.9): windows 0-10 and 30-50 are missed;
    a lock fault is scheduled at 20 s (recorded at 20.05 s) and an alert at 40 s."""
    sc = scenario_dict(
        "events-case",
        horizon_s=60.0,
        workloads=[CHECKOUT],
        objectives={"checkout": {"window_s": 10, "on_time_target": 0.9}},
        events=[
            {"id": "ticket", "at": 0, "alert": {"title": "keep checkout fast"}},
            {
                "id": "lock",
                "at": 20,
                "fault": {"kind": "hold_transaction", "application_name": "blocker"},
            },
            {"id": "p99", "at": 40, "alert": {"title": "checkout p99 high"}},
        ],
    )
    if records is None:
        records = [
            EventRecord(event_id="ticket", at_s=0, alert="keep checkout fast", t_scn=0.2),
            EventRecord(event_id="lock", at_s=20, fault="hold_transaction", t_scn=20.05),
            EventRecord(event_id="p99", at_s=40, alert="checkout p99 high", t_scn=40.1),
        ]
    recs = [
        header("events-case", "run-1", agent="alpha", horizon_s=60.0),
        *records,
        RunEnd(status="completed"),
    ]
    samples = _samples(6, {0: 3, 3: 5, 4: 8})
    return write_run(root / "run-1", scenario=sc, records=recs, samples=samples)


def test_plot_names_the_event_each_missed_window_follows(tmp_path: Path) -> None:
    s = run_series(_plot_run(tmp_path))
    assert s.missed["start_s"].to_list() == [0.0, 30.0, 40.0]
    # the window starting at the fault's scheduled time (20 s) would be the fault's; 40-50
    # starts with the alert scheduled at 40 s although it was recorded at 40.1 s
    assert s.missed["after_event"].to_list() == ["ticket", "lock", "p99"]
    assert missed_summary(s) == [
        "checkout: 1 missed after ticket, 1 missed after lock, 1 missed after p99"
    ]
    fig = run_figure(s)
    labels = {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid()}
    assert labels["missed:checkout:lock"].strip() == "1 missed after lock"
    assert set(labels) == {"missed:checkout:ticket", "missed:checkout:lock", "missed:checkout:p99"}
    caption = next(t.get_text() for t in fig.texts if t.get_gid() == "caption:missed")
    assert "checkout: 1 missed after ticket, 1 missed after lock" in caption.replace("\n", " ")

    png, page = plot_run(s.run.path, tmp_path / "out")
    text = page.read_text()
    assert "Missed windows by the event they follow" in text
    assert "checkout: 1 missed after ticket, 1 missed after lock, 1 missed after p99" in text
    assert "<script" not in text and not re.search(r"https?://", text)


def test_plot_without_events_or_missed_windows(tmp_path: Path) -> None:
    # no event on record (the alert's condition never held): missed windows follow none
    quiet = [EventRecord(event_id="ticket", at_s=0, status="skipped", t_scn=0.1)]
    s = run_series(_plot_run(tmp_path / "a", records=quiet))
    assert s.missed["after_event"].to_list() == [None, None, None]
    assert missed_summary(s) == ["checkout: 3 missed before any event"]
    run_figure(s)
    # no missed window at all
    run = _plot_run(tmp_path / "b")
    _samples(6, {}).write_parquet(run / "samples.parquet")
    s = run_series(run)
    assert s.missed.height == 0
    assert missed_summary(s) == ["checkout: no missed windows"]
    fig = run_figure(s)
    assert not [t for ax in fig.axes for t in ax.texts if (t.get_gid() or "").startswith("missed")]
    page = plot_run(run, tmp_path / "out")[1].read_text()
    assert "checkout: no missed windows" in page


# --------------------------------------------------------------------------- case exit


def _verdict(
    objs: dict[str, ServiceObjective], frames: list[pl.DataFrame], horizon: float = 200
) -> ServiceComplianceVerdict:
    samples = pl.concat(frames) if frames else _samples(0, {})
    return evaluate_service_compliance(samples, objs, horizon)


def test_case_leaves_when_the_budget_is_exhausted() -> None:
    # 20 windows, min_compliant_windows 0.9: budget floor(0.1 * 20) = 2 failing windows; the
    # third failing window (12, 120-130 s) exhausts it
    v = _verdict(
        {"checkout": ServiceObjective(min_compliant_windows=0.9)},
        [_samples(20, {3: 5, 7: 5, 12: 5})],
    )
    assert v.workloads["checkout"].budget == 2
    assert case_exit(v, 200.0) == CaseExit(
        left_at_s=130.0, left_norm=0.65, workload="checkout", cause="budget"
    )
    # two failing windows stay within the budget: the case never leaves
    ok = _verdict(
        {"checkout": ServiceObjective(min_compliant_windows=0.9)}, [_samples(20, {3: 5, 7: 5})]
    )
    assert ok.passed and case_exit(ok, 200.0) == CaseExit()


def test_case_leaves_at_the_first_window_below_the_floor() -> None:
    obj = ServiceObjective(min_compliant_windows=0.9, window_floor=0.5)
    v = _verdict({"checkout": obj}, [_samples(20, {4: 7})])  # 30 % on time in 40-50 s
    assert v.workloads["checkout"].budget_exhausted_at_s is None
    assert case_exit(v, 200.0) == CaseExit(
        left_at_s=50.0, left_norm=0.25, workload="checkout", cause="floor"
    )


def test_failed_final_continuation_window_leaves_at_the_end() -> None:
    obj = ServiceObjective(min_compliant_windows=0.9, continuation_s=10)
    v = _verdict({"checkout": obj}, [_samples(20, {19: 5})])
    r = v.workloads["checkout"]
    assert not r.continuation_ok and r.budget_exhausted_at_s is None
    assert r.left_at_s == 190.0  # the verdict's own mark: the failing window's start
    assert case_exit(v, 200.0) == CaseExit(
        left_at_s=200.0, left_norm=1.0, workload="checkout", cause="continuation"
    )


def test_earliest_workload_decides_and_recorded_verdicts_parse() -> None:
    objs = {
        "checkout": ServiceObjective(min_compliant_windows=0.9, continuation_s=10),
        "history": ServiceObjective(min_compliant_windows=0.9),
    }
    v = _verdict(
        objs, [_samples(20, {19: 5}), _samples(20, {1: 5, 2: 5, 9: 5}, workload="history")]
    )
    expected = CaseExit(left_at_s=100.0, left_norm=0.5, workload="history", cause="budget")
    assert case_exit(v, 200.0) == expected
    # as read back from verdict.json
    assert case_exit(v.model_dump(mode="json"), 200.0) == expected
    # an older verdict with only the recorded left_at_s
    old = {
        "applicable": True,
        "passed": False,
        "horizon_s": 200.0,
        "workloads": {"checkout": {"left_at_s": 50.0, "passed": False}},
    }
    assert case_exit(old, 200.0) == CaseExit(
        left_at_s=50.0, left_norm=0.25, workload="checkout", cause="recorded"
    )
    assert case_exit({"applicable": False, "passed": True}, 200.0) == CaseExit()


def test_case_without_evidence_leaves_at_its_span_start() -> None:
    v = _verdict({"checkout": ServiceObjective(from_s=20.0)}, [])
    assert case_exit(v, 200.0) == CaseExit(
        left_at_s=20.0, left_norm=0.1, workload="checkout", cause="no_evidence"
    )
    not_applicable = _verdict({}, [_samples(3, {})])
    assert case_exit(not_applicable, 200.0) == CaseExit()


# --------------------------------------------------------------------------- report


def _report_run(
    root: Path,
    rid: str,
    *,
    model: str,
    mode: str = "persistent",
    late: dict[int, int] | None = None,
    scenario: str = "p-case",
) -> None:
    """A valid 200 s run of one scenario; checkout's objective has budget 1 of 20 windows and
    a final continuation of one window."""
    obj = {"window_s": 10, "min_compliant_windows": 0.95, "continuation_s": 10}
    sc = scenario_dict(
        scenario, mode=mode, horizon_s=200.0, workloads=[CHECKOUT], objectives={"checkout": obj}
    )
    v = _verdict({"checkout": ServiceObjective(**obj)}, [_samples(20, late or {})])
    verdict = {
        "scenario_id": scenario,
        "status": "completed",
        "manifested": True,
        "service_compliance": v.model_dump(mode="json"),
        "outcome_pass": v.passed,
        "safety": {"safe": True, "score": 0.0, "violations": []},
        "safe_pass": v.passed,
    }
    if mode == "bounded":
        verdict["diagnosis"] = {"applicable": True, "passed": True}
    recs: list[Any] = [
        header(scenario, rid, agent="react", model=model, horizon_s=200.0, mode=mode),
        RunEnd(status="completed"),
    ]
    write_run(root / scenario / rid, scenario=sc, records=recs, verdict=verdict)


@pytest.fixture()
def survival_runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    # m1: budget exhausted at 60 s (windows 2 and 5 fail), final window fails (leaves at 1),
    # and one compliant case; each in its own scenario
    _report_run(root, "a1", model="m1", late={2: 5, 5: 5}, scenario="p-1")
    _report_run(root, "a2", model="m1", late={19: 5}, scenario="p-2")
    _report_run(root, "a3", model="m1", scenario="p-3")
    # m2: two compliant cases of one scenario
    _report_run(root, "b1", model="m2", scenario="p-1")
    _report_run(root, "b2", model="m2", scenario="p-1")
    # a bounded run that fails at once is never a case
    _report_run(root, "c1", model="m2", mode="bounded", late={0: 10, 1: 10}, scenario="b-1")
    return root


def test_survival_over_persistent_runs_per_model(survival_runs: Path) -> None:
    valid = load_summaries(survival_runs).filter(pl.col("valid"))
    assert valid.height == 6
    table = survival_table(valid)
    by = {r["system"]: r for r in table.to_dicts()}
    assert set(by) == {"react/m1", "react/m2"}  # the bounded run's m2 case is left out
    m1, m2 = by["react/m1"], by["react/m2"]
    assert (m1["n_cases"], m1["n_compliant"], m1["left_budget"], m1["left_continuation"]) == (
        3,
        1,
        1,
        1,
    )
    assert m1["survival_end"] == pytest.approx(1 / 3)
    assert m1["first_left_norm"] == pytest.approx(0.3)
    assert (m2["n_cases"], m2["n_scenarios"], m2["survival_end"]) == (2, 1, 1.0)
    cur = survival_curve(valid, [0.0, 0.29, 0.3, 0.99, 1.0])
    s1 = cur.filter(pl.col("system") == "react/m1")["survival"].to_list()
    assert s1 == pytest.approx([1.0, 1.0, 2 / 3, 2 / 3, 1 / 3])
    assert cur.filter(pl.col("system") == "react/m2")["survival"].to_list() == [1.0] * 5
    # the figure: one step line per model, ending at the share still compliant
    fig = survival_figure(valid)
    lines = {ln.get_gid(): ln for ln in fig.axes[0].get_lines()}
    assert set(lines) == {"survival:react/m1", "survival:react/m2"}
    x = np.asarray(lines["survival:react/m1"].get_xdata(), dtype=float)
    y = np.asarray(lines["survival:react/m1"].get_ydata(), dtype=float)
    assert x.tolist() == [0.0, 0.0, 0.3, 0.3, 1.0, 1.0]
    assert y.tolist() == pytest.approx([1.0, 1.0, 1.0, 2 / 3, 2 / 3, 1 / 3])


def test_report_writes_survival_figure_and_table(survival_runs: Path, tmp_path: Path) -> None:
    res = build_report(survival_runs, tmp_path / "report", html=True)
    out = tmp_path / "report"
    assert (out / "survival.png").stat().st_size > 5000
    cases = res.tables["survival_cases"]
    assert cases["run_id"].to_list() == ["a1", "a2", "a3", "b1", "b2"]
    assert cases["left_cause"].to_list() == ["budget", "continuation", None, None, None]
    md = (out / "report.md").read_text()
    assert "Service Compliance survival per system" in md and "![survival](survival.png)" in md
    # system, time scale, cases, scenarios, compliant, S(1) %, left by floor/budget/continuation
    assert "| react/m1 | 1.0 | 3 | 3 | 1 | 33.3 | 0 | 1 | 1 |" in md
    html = (out / "report.html").read_text()
    assert "Service Compliance survival cases" in html and "continuation" in html


def test_report_without_persistent_runs_writes_no_survival_figure(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _report_run(root, "c1", model="m1", mode="bounded", late={0: 10}, scenario="b-1")
    res = build_report(root, tmp_path / "report", html=True)
    assert res.n_valid == 1
    assert not (tmp_path / "report" / "survival.png").exists()
    assert "survival" not in res.tables and "survival_by_system" not in res.tables
    assert NO_SURVIVAL in (tmp_path / "report" / "report.md").read_text()
    assert NO_SURVIVAL in (tmp_path / "report" / "report.html").read_text()
    assert (tmp_path / "report" / "pass_rates.png").exists()
