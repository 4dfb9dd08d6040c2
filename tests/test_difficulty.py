"""Difficulty labels (paper §4.2) from recorded observations, on hand-computed cases."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dbaops.evaluation.difficulty import label_difficulty, observation_units
from dbaops.record.kinds import ToolCallRecord
from dbaops.scenario.specs import DifficultySpec


def _sql(observation: str, call_id: str = "c1") -> ToolCallRecord:
    return ToolCallRecord(call_id=call_id, tool="execute_sql", observation=observation)


STATS = "relname | n_dead_tup\ncustomers | 0\norders | 280000\npayments | 0\n(3 rows)"
PLAN = (
    "QUERY PLAN\nLimit  (cost=0.42..9.1 rows=50)\n"
    "  ->  Index Scan using orders_created_idx on orders\n"
    "        Filter: (status = 'pending'::text)\n(3 rows)"
)


def test_sql_observation_units_are_result_rows() -> None:
    assert observation_units("execute_sql", STATS) == [
        "customers | 0",
        "orders | 280000",
        "payments | 0",
    ]
    assert observation_units("execute_sql", "VACUUM") == []
    assert len(observation_units("execute_sql", PLAN)) == 3


def test_deep_path_with_mostly_competing_observations_is_hard() -> None:
    spec = DifficultySpec(
        path=["alert", "plan walks created_at index", "stale MCV", "autovacuum off"],
        modalities={"sql": {"causal": r"orders_created_idx|Filter: \(status|^orders \|"}},
    )
    result = label_difficulty(spec, [_sql(STATS), _sql(PLAN, "c2")])
    # causal: "orders | 280000", the index scan and the filter row = 3; competing: 3
    assert (result.modalities[0].causal_units, result.modalities[0].competing_units) == (3, 3)
    assert result.depth == 3
    assert result.complexity == pytest.approx(0.5)
    assert result.label == "hard"  # D > 2 and C >= 0.5


def test_short_path_is_easy_whatever_the_noise() -> None:
    spec = DifficultySpec(
        path=["alert", "blocker idle in transaction"], modalities={"sql": {"causal": "price_sync"}}
    )
    noisy = "pid | app\n1 | a\n2 | b\n3 | c\n4 | price_sync\n(4 rows)"
    result = label_difficulty(spec, [_sql(noisy)])
    assert result.complexity == pytest.approx(0.75)
    assert result.depth == 1 and result.label == "easy"


def test_declared_and_measured_modalities_are_averaged() -> None:
    spec = DifficultySpec(
        path=["a", "b", "c", "d"],
        modalities={"sql": {"causal": "orders"}, "metric": {"declared": 0.2}},
    )
    only_causal = "relname\norders\n(1 row)"
    result = label_difficulty(spec, [_sql(only_causal)])
    assert [m.complexity for m in result.modalities] == [0.0, 0.2]  # no competing units: 0
    assert result.complexity == pytest.approx(0.1) and result.label == "easy"


def test_bad_difficulty_specs_are_rejected() -> None:
    with pytest.raises(ValidationError):
        DifficultySpec(path=["a", "b"], modalities={"tea_leaves": {"declared": 0.3}})
    with pytest.raises(ValidationError):
        DifficultySpec(path=["a", "b"], modalities={"sql": {"causal": "x", "declared": 0.3}})
