"""Malformed scenario files fail at load time with one clear error naming file, field, problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbaops.scenario.loader import ScenarioError, list_scenarios, load_scenario

VALID = """\
id: t-valid
title: valid
mode: bounded
agent: {time_budget_s: 30}
database: {library: shop}
workloads:
  - {name: checkout, type: oltp, mix: {checkout: 1}, rate_per_s: 5, deadline_ms: 200}
events:
  - id: task
    at: 0
    alert: {title: something}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return path


def test_the_valid_base_file_loads(tmp_path: Path) -> None:
    sc, lib, _ = load_scenario(_write(tmp_path, VALID))
    assert sc.id == "t-valid" and lib.id == "shop"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            ("alert: {title: something}", "fault: {kind: drop_everything, sql: x}"),
            ["events[0].fault.kind", "unknown 'drop_everything'", "hold_transaction"],
        ),
        (
            ("agent: {time_budget_s: 30}", "agent: {time_budget_s: 30}\nhorizn: 3"),
            ["horizn: unknown field"],
        ),
        (("agent: {time_budget_s: 30}", "horizon_s: 30"), ["bounded run has no horizon"]),
        (
            ("mix: {checkout: 1}", "mix: {chekout: 1}"),
            ["workloads[0].mix", "unknown transaction 'chekout'", "checkout"],
        ),
        (("{library: shop}", "{library: shopp}"), ["unknown workload library 'shopp'"]),
        (("mode: bounded", "mode: sometimes"), ["mode:", "'bounded' or 'persistent'"]),
        (("rate_per_s: 5", "rate_per_s: -5"), ["workloads[0].oltp.rate_per_s", "greater than 0"]),
        (("title: valid\n", ""), ["title: required field is missing"]),
        (("    at: 0", "    at: 5"), ["exactly one event, at t = 0"]),
        (("type: oltp", "type: olpt"), ["workloads[0].type", "unknown 'olpt'", "oltp"]),
        (
            (
                "  - id: task",
                "  - id: task\n    fault: {kind: hold_transaction, role: nobody, "
                "application_name: x}",
            ),
            ["events[0].fault.role", "unknown role 'nobody'"],
        ),
    ],
)
def test_bad_scenario_file_names_file_field_and_problem(
    tmp_path: Path, edit: tuple[str, str], expected: list[str]
) -> None:
    old, new = edit
    assert old in VALID
    path = _write(tmp_path, VALID.replace(old, new, 1))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(str(path))
    for fragment in expected:
        assert fragment in message, message


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, VALID.replace("mode: bounded", "mode: [bounded"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert "line 4" in str(info.value) and "invalid YAML" in str(info.value)


def test_unknown_scenario_id_lists_the_library() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario("pg-nope-99")
    assert "pg-qt-01" in str(info.value) and "pg-p-02" in str(info.value)


def test_every_scenario_in_the_library_loads() -> None:
    loaded = list_scenarios()
    assert {p.stem for p, _ in loaded} >= {"pg-p-02", "pg-qt-01"}
    problems = [str(item) for _, item in loaded if isinstance(item, ScenarioError)]
    assert problems == []
