"""The survey of the observation surface (difficulty's C_s over the environment, not over a
run's wording): hand-computed labels from a survey record, and the probes on a real server."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.dbms.postgres.survey import SURVEY_PROBES
from dbaops.evaluation.difficulty import label_difficulty
from dbaops.execution.survey import metric_series_counts, surface_queries, take_survey
from dbaops.record.kinds import MetricSeriesCount, SurveyProbe, SurveyRecord, ToolCallRecord
from dbaops.scenario.loader import ScenarioError, load_scenario, timelines_dir
from dbaops.scenario.specs import DifficultySpec

SESSIONS = ["1 | client backend | app | shop | active", "2 | client backend | price_sync | idle"]


def _survey() -> SurveyRecord:
    return SurveyRecord(
        sql={
            "sessions": SurveyProbe(query="q", rows=SESSIONS),
            "locks": SurveyProbe(query="q", rows=["transactionid | ShareLock | f | 1"]),
        },
        log_lines=["LOG: checkpoint", "ERROR: canceling statement due to lock timeout"],
        metric_series=[
            MetricSeriesCount(series="locks.waiting", incident_points=4, history_points=12),
            MetricSeriesCount(series="tps", incident_points=4, history_points=12),
        ],
    )


def test_complexity_is_counted_over_the_survey_not_the_runs_own_reads() -> None:
    spec = DifficultySpec(
        path=["alert", "waits", "blocker", "idle sync"],
        modalities={
            "sql": {"causal": "price_sync|ShareLock"},
            "log": {"causal": "lock timeout"},
            "metric": {"causal": "^locks"},
        },
    )
    # what the run itself read (one causal row) does not count once a survey is on record
    own = ToolCallRecord(call_id="c", tool="execute_sql", observation="app\nprice_sync\n(1 row)")
    result = label_difficulty(spec, [own, _survey()])
    assert result.basis == "surface"
    by = {m.modality: (m.causal_units, m.competing_units) for m in result.modalities}
    # sql: 2 causal of 3; log: 1 of 2; metric: the 4 incident points of locks.waiting are
    # causal, its 12 history points and all of tps are competing
    assert by == {"sql": (2, 1), "log": (1, 1), "metric": (4, 28)}
    expected = ((1 - 2 / 3) + (1 - 1 / 2) + (1 - 4 / 32)) / 3
    assert result.complexity == pytest.approx(expected)
    assert result.label == "hard"


def test_a_run_without_a_survey_is_measured_from_its_own_observations() -> None:
    spec = DifficultySpec(path=["a", "b"], modalities={"sql": {"causal": "price_sync"}})
    own = ToolCallRecord(
        call_id="c", tool="execute_sql", observation="app\nprice_sync\nother\n(2 rows)"
    )
    result = label_difficulty(spec, [own])
    assert result.basis == "observed"
    assert (result.modalities[0].causal_units, result.modalities[0].competing_units) == (1, 1)


def test_metric_series_split_history_from_incident_and_hide_judge_metrics() -> None:
    frame = pl.DataFrame(
        {
            "t_s": [-500.0, -100.0, -30.0, 0.0, -30.0, -20.0],
            "metric": ["tps", "tps", "tps", "tps", "locks.blocked_by_agent", "io.read"],
            "label": [None, None, None, None, None, "orders"],
            "value": [1.0] * 6,
        }
    )
    counts = metric_series_counts(frame, history_before_s=-60.0)
    assert counts == [
        MetricSeriesCount(series="io.read orders", incident_points=1, history_points=0),
        MetricSeriesCount(series="tps", incident_points=2, history_points=2),
    ]


def test_the_sql_surface_is_the_standard_probes_or_the_ones_named() -> None:
    every = DifficultySpec(path=["a", "b"], modalities={"sql": {"causal": "x"}})
    assert surface_queries("postgres", every) == SURVEY_PROBES
    named = DifficultySpec(
        path=["a", "b"],
        modalities={"sql": {"causal": "x", "surface": ["sessions", "EXPLAIN SELECT 1"]}},
    )
    assert surface_queries("postgres", named) == {
        "sessions": SURVEY_PROBES["sessions"],
        "query1": "EXPLAIN SELECT 1",
    }
    wider = DifficultySpec(
        path=["a", "b"],
        modalities={"sql": {"causal": "x", "surface": ["standard", "EXPLAIN SELECT 1"]}},
    )
    assert surface_queries("postgres", wider) == {**SURVEY_PROBES, "query1": "EXPLAIN SELECT 1"}
    standby = DifficultySpec(
        path=["a", "b"],
        modalities={"sql": {"causal": "x", "surface": ["sessions", "standby: settings"]}},
    )
    assert surface_queries("postgres", standby) == {
        "sessions": SURVEY_PROBES["sessions"],
        "standby:settings": SURVEY_PROBES["settings"],
    }


def test_a_standby_entry_needs_the_replica_profile(tmp_path: Path) -> None:
    raw = yaml.safe_load((timelines_dir() / "pg-sf-01.yaml").read_text())
    raw["evaluation"]["difficulty"]["modalities"]["sql"] = {
        "causal": "x",
        "surface": ["standby: settings"],
    }
    path = tmp_path / "pg-sf-01.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ScenarioError, match="needs database.replica"):
        load_scenario(path)


def test_an_unknown_probe_is_refused_with_the_field_and_the_choices(tmp_path: Path) -> None:
    raw = yaml.safe_load((timelines_dir() / "pg-sf-01.yaml").read_text())
    raw["evaluation"]["difficulty"]["modalities"]["sql"]["surface"] = ["sessions", "tea_leaves"]
    path = tmp_path / "pg-sf-01.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    assert "modalities.sql.surface" in text and "tea_leaves" in text and "locks" in text


@pytest.mark.anyio
async def test_every_postgres_probe_reads_a_live_server(
    pg_cluster: PostgresCluster, fresh_db: str
) -> None:
    setup = await pg_cluster.connect(database=fresh_db)
    holder = await pg_cluster.connect(database=fresh_db)
    try:
        await setup.execute(
            "CREATE EXTENSION IF NOT EXISTS pg_stat_statements;"
            "CREATE TABLE public.inventory (sku int PRIMARY KEY, stock int);"
            "INSERT INTO public.inventory SELECT g, 10 FROM generate_series(1, 100) g;"
        )
        await holder.execute("SET application_name = 'price_sync'")
        await holder.execute("BEGIN; UPDATE public.inventory SET stock = stock WHERE sku < 5")
        spec = DifficultySpec(
            path=["a", "b", "c"],
            modalities={
                "sql": {"causal": "price_sync|inventory"},
                "log": {"causal": "ERROR"},
                "metric": {"causal": "^tps"},
            },
        )
        survey = await take_survey(
            "postgres",
            spec,
            pg_cluster.endpoint(fresh_db),
            t_scn=0.0,
            history_before_s=-60.0,
            metrics=pl.DataFrame(),
            log_lines=["LOG: a", "", "ERROR: b"],
        )
        assert set(survey.sql) == set(SURVEY_PROBES)
        assert {n: p.error for n, p in survey.sql.items() if p.error} == {}
        assert any("price_sync" in row for row in survey.sql["sessions"].rows)
        assert any(row.startswith("inventory | public") for row in survey.sql["tables"].rows)
        assert survey.log_lines == ["LOG: a", "ERROR: b"] and survey.log_lines_total == 2
        label = label_difficulty(spec, [survey])
        sql = label.modalities[0]
        assert sql.causal_units >= 2 and sql.competing_units > sql.causal_units
    finally:
        await holder.close()
        await setup.close()


@pytest.mark.anyio
async def test_a_server_that_does_not_answer_leaves_a_survey_of_errors() -> None:
    from dbaops.dbms.postgres.endpoint import Endpoint

    spec = DifficultySpec(
        path=["a", "b"], modalities={"sql": {"causal": "x"}, "log": {"causal": "shut down"}}
    )
    survey = await take_survey(
        "postgres",
        spec,
        Endpoint(host="127.0.0.1", port=1, database="unused"),
        t_scn=0.0,
        history_before_s=-60.0,
        metrics=pl.DataFrame(),
        log_lines=["LOG: database system is shut down"],
    )
    assert set(survey.sql) == set(SURVEY_PROBES)
    assert all(p.error and p.error.startswith("no session") for p in survey.sql.values())
    label = label_difficulty(spec, [survey])
    assert [(m.causal_units, m.competing_units) for m in label.modalities] == [(0, 0), (1, 0)]
