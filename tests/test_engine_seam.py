"""The engine seam: engines by name, a scenario's engine, and agent tools that observe through
the engine rather than the run directory (no database needed)."""

from __future__ import annotations

import ast
import os
from datetime import UTC, datetime
from pathlib import Path

import anyio
import polars as pl
import pytest

from dbaops.clock import ScenarioClock
from dbaops.dbms.interface import DatabaseEngine
from dbaops.dbms.postgres.engine import PostgresEngine
from dbaops.dbms.registry import UnknownEngine, engine_names, get_engine
from dbaops.record.tables import SAMPLE_SCHEMA
from dbaops.scenario.loader import ScenarioError, load_scenario
from dbaops.tools.logs import ServerLogSource, log_tool

SCENARIO = """\
format: 2
id: t-engine
title: engine
mode: bounded
{engine}agent: {{time_budget_s: 30}}
database: {{library: shop}}
events:
  - id: task
    at: 0
    alert: {{title: something}}
"""


def test_engines_are_registered_by_name() -> None:
    assert engine_names() == ["postgres", "tidb"]
    engine = get_engine("postgres")
    assert isinstance(engine, PostgresEngine) and isinstance(engine, DatabaseEngine)
    assert engine.dialect == "postgres"
    with pytest.raises(UnknownEngine, match="unknown database engine 'oracle'.*postgres"):
        get_engine("oracle")


def test_a_scenario_names_its_engine_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO.format(engine=""))
    assert load_scenario(path)[0].engine == "postgres"
    path.write_text(SCENARIO.format(engine="engine: postgres\n"))
    assert load_scenario(path)[0].engine == "postgres"
    path.write_text(SCENARIO.format(engine="engine: mysql\n"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).startswith(str(path))
    assert "engine" in str(info.value) and "postgres" in str(info.value)
    path.write_text(SCENARIO.format(engine="engine: tidb\n"))  # on a PostgreSQL library
    with pytest.raises(ScenarioError, match="is written for postgres, the scenario runs on tidb"):
        load_scenario(path)


def test_the_postgres_log_format_is_the_engines() -> None:
    stamp = get_engine("postgres").log_line_stamp("2026-12-02 01:02:03.500 UTC [4242] LOG:  x")
    assert stamp == (datetime(2026, 12, 2, 1, 2, 3, 500000, tzinfo=UTC).timestamp(), 4242)
    assert get_engine("postgres").log_line_stamp("\tcontinuation") is None


def test_read_log_reads_what_the_engine_and_the_harness_expose() -> None:
    clock = ScenarioClock(1.0)
    start = clock.wall_start
    early = datetime.fromtimestamp(start - 100, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    late = datetime.fromtimestamp(start + 60, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    lines = [f"{early} UTC [1] LOG:  before", f"{late} UTC [2] ERROR:  deadlock detected"]
    samples = pl.DataFrame(
        [("checkout", "oltp", "u1", 5.0, 5.0, 5.2, 200.0, 0, "late", None, None, None, 0.1)],
        schema=SAMPLE_SCHEMA,
        orient="row",
    )
    source = ServerLogSource(lambda: lines, get_engine("postgres").log_line_stamp, "the log")
    tool = log_tool({"postgresql": source}, lambda: samples, clock)

    async def call(args: dict[str, object]) -> str:
        return (await tool.handler(args)).observation

    server = anyio.run(call, {"source": "postgresql", "since": 30})
    assert "deadlock detected" in server and "before" not in server
    workload = anyio.run(call, {"source": "workload"})
    assert "checkout/u1 late" in workload


def test_no_agent_tool_opens_the_run_directory() -> None:
    """The tools get observations from the engine and the harness, not from run files."""
    tools = Path(__file__).parent.parent / "dbaops" / "tools"
    for path in sorted(tools.glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {
            f"{node.module}.{a.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for a in node.names
        }
        banned = {
            m
            for m in imported
            if m.startswith(("dbaops.record.layout", "dbaops.record.tables.read"))
        }
        assert not banned, f"{path.name} reads the run directory: {sorted(banned)}"


def test_every_engine_has_a_driver_free_dialect() -> None:
    """Scoring, plots and tool descriptions ask an engine's dialect, which loads no database
    driver and no SQL parser (a recorded run is scored where none is installed)."""

    from dbaops.dbms.dialect import UnknownDialect, engine_dialect, engine_packages

    assert list(engine_packages()) == engine_names()
    for name in engine_names():
        assert engine_dialect(name).sql_dialect == get_engine(name).dialect
        assert engine_dialect(name).server_panel
    with pytest.raises(UnknownDialect, match="cockroach"):
        engine_dialect("cockroach")
    loaded = _loaded_after(
        "from dbaops.dbms.dialect import engine_dialect, engine_packages; "
        "[engine_dialect(n) for n in engine_packages()]",
        {"asyncpg", "aiomysql", "pymysql", "pglast", "sqlglot"},
    )
    assert loaded == []


def test_scoring_and_both_judge_front_ends_load_no_database_driver() -> None:
    """The judge reads each engine's log stamp, quoting and statement splitting through its
    dialect: scoring a recorded run of either engine needs neither asyncpg nor aiomysql."""

    loaded = _loaded_after(
        "import dbaops.evaluation.score; "
        "import dbaops.evaluation.safety.postgres.front_end, dbaops.evaluation.safety.mysql",
        {"asyncpg", "aiomysql", "pymysql"},
    )
    assert loaded == []


def test_a_tidb_run_plot_has_a_server_panel(tmp_path: Path) -> None:
    """The plot's server panel draws the engine's own metrics: TiDB's lock waits and oldest
    transaction, where PostgreSQL's names would leave it empty."""
    from dbaops.analysis.series import _server_frame
    from dbaops.record.layout import RunDir
    from dbaops.record.tables import METRIC_SCHEMA

    frame = pl.DataFrame(
        {"t_s": [1.0, 1.0, 2.0, 2.0],
         "metric": ["tidb.lock_waits", "tidb.oldest_transaction_s"] * 2,
         "label": [""] * 4, "value": [0.0, 3.0, 2.0, 4.0]},
        schema=METRIC_SCHEMA,
    )  # fmt: skip
    frame.write_parquet(RunDir(tmp_path).metrics)
    panel = _server_frame(tmp_path, "tidb")
    assert set(panel["series"]) == {"lock requests waiting", "oldest transaction age (s)"}
    assert panel.filter(pl.col("series") == "lock requests waiting")["value"].to_list() == [0, 2]
    assert _server_frame(tmp_path, "postgres").height == 0


def test_a_crash_is_read_in_the_engines_own_log_format() -> None:
    """PostgreSQL's crash lines mean nothing in tidb.log and TiDB's fatal entry nothing in
    PostgreSQL's log: each run is read with its engine's markers."""
    from dbaops.dbms.dialect import engine_dialect
    from dbaops.evaluation.score import server_crashed

    tidb, pg = engine_dialect("tidb").crash_markers, engine_dialect("postgres").crash_markers
    fatal = '[2026/12/07 10:00:00.000 +00:00] [FATAL] [main.go:42] ["out of memory"]'
    killed = (
        "2026-12-07 10:00:00.000 UTC [1] @  LOG:  server process (PID 42) was terminated by "
        "signal 9: Killed"
    )
    assert server_crashed([], [fatal], tidb)[0] is True
    assert server_crashed([], [killed], tidb) == (False, None)
    assert server_crashed([], [killed], pg)[0] is True
    assert server_crashed([], [fatal], pg) == (False, None)


def test_metric_checks_are_validated_against_the_scenarios_engine(tmp_path: Path) -> None:
    """A TiDB scenario may check what TiDB's sampler records (tidb.*), and not PostgreSQL's
    metrics, which its runs never have."""
    import yaml

    from dbaops.scenario.loader import ScenarioError, load_scenario, timelines_dir

    def with_check(metric: str, stat: str) -> Path:
        doc = yaml.safe_load((timelines_dir() / "tb-rg-01.yaml").read_text())
        doc["evaluation"]["terminal"].append(
            {"check": "metric", "name": "m", "metric": metric, "stat": stat, "op": ">=",
             "value": 0, "over_s": 30}
        )  # fmt: skip
        path = tmp_path / f"{metric}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    sc = load_scenario(with_check("tidb.lock_waits", "max"))[0]
    assert sc.evaluation.terminal[-1].name == "m"
    with pytest.raises(ScenarioError, match=r"unknown metric 'db.temp_bytes' on tidb"):
        load_scenario(with_check("db.temp_bytes", "increase"))


@pytest.mark.anyio
async def test_query_metrics_describes_the_engines_own_metrics() -> None:
    """A TiDB agent's metric list describes tidb.* from TiDB's registry (not as unknown)."""
    import polars as pl

    from dbaops.clock import ScenarioClock
    from dbaops.dbms.dialect import engine_dialect
    from dbaops.record.tables import METRIC_SCHEMA
    from dbaops.tools.metrics_tool import metrics_tool

    frame = pl.DataFrame(
        {"t_s": [1.0, 2.0], "metric": ["tidb.lock_waits"] * 2, "label": ["", ""],
         "value": [0.0, 4.0]},
        schema=METRIC_SCHEMA,
    )  # fmt: skip
    clock = ScenarioClock()
    clock.restart(10.0)
    tool = metrics_tool(lambda: frame, pl.DataFrame, clock, dialect=engine_dialect("tidb"))
    listing = (await tool.handler({})).observation
    assert "tidb.lock_waits [gauge, locks] lock_waits (information_schema)" in listing
    assert "not in registry" not in listing and "pg_stat_statements" not in tool.spec.description
    served = await tool.handler({"names": ["tidb.lock_waits"], "window": [0, 10]})
    assert served.ok and "4" in served.observation


def test_server_log_checks_read_the_engines_log_stamp() -> None:
    """A TiDB run's server-log check places tidb.log lines in scenario time with TiDB's stamp
    (PostgreSQL's reads none of them)."""
    from dbaops.dbms.dialect import engine_dialect
    from dbaops.execution.checks import server_log_matches

    lines = [
        '[2026/01/01 00:00:10.000 +00:00] [WARN] [session.go:1] ["lock wait timeout"]',
        '[2026/01/01 00:00:40.500 +00:00] [WARN] [session.go:1] ["lock wait timeout"]',
    ]
    wall_start = 1767225600.0  # 2026-01-01 00:00:00 UTC is scenario time 0
    tidb = engine_dialect("tidb").log_line_stamp
    found = server_log_matches(lines, "lock wait", 0, 30, wall_start, 0.5, tidb)
    assert [t for t, _ in found] == [20.0]
    pg = engine_dialect("postgres").log_line_stamp
    assert server_log_matches(lines, "lock wait", 0, 30, wall_start, 0.5, pg) == []


def test_loading_a_scenario_loads_no_driver_and_no_run_machinery() -> None:
    """Loading and checking a scenario of either engine imports no database driver and no
    polars: engine-dependent checks go through the engine's driver-free dialect."""

    loaded = _loaded_after(
        "from dbaops.scenario.loader import load_scenario; "
        "load_scenario('pg-sf-01'); load_scenario('tb-rg-01')",
        {"asyncpg", "aiomysql", "pymysql", "polars", "dbaops.execution.runner"},
    )
    assert loaded == []


def test_clean_asks_every_engine_to_release_what_it_left_in_a_cluster_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dbaops clean`` stops a killed run's PostgreSQL postmaster and tidb-server through
    their engines (neither named by the CLI), then removes the directories."""
    import subprocess
    import sys

    from typer.testing import CliRunner

    from dbaops.cli import app

    monkeypatch.setenv("DBAOPS_HOME", str(tmp_path))
    left = {}
    for name, pidfile in (("db-aaaa-pg15", "data/postmaster.pid"), ("db-bbbb-tidb", "tidb.pid")):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        path = tmp_path / "clusters" / name / pidfile
        path.parent.mkdir(parents=True)
        path.write_text(f"{proc.pid}\n")
        left[name] = proc
    result = CliRunner().invoke(app, ["clean"])
    assert result.exit_code == 0, result.output
    for name, proc in left.items():
        assert proc.wait(timeout=30) != 0, name  # ended by its engine's signal
        assert not (tmp_path / "clusters" / name).exists()
    assert "stopped the postmaster" in result.output and "stopped the tidb-server" in result.output


def _loaded_after(code: str, modules: set[str]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``."""
    import ast
    import subprocess
    import sys

    probe = f"import sys; {code}; print(sorted(set({sorted(modules)!r}) & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(ast.literal_eval(out.stdout.strip().splitlines()[-1]))


def test_an_engine_outside_dbaops_registers_by_entry_point(tmp_path: Path) -> None:
    """A distribution that declares ``dbaops.engines = {name} = package`` adds an engine:
    its driver-free dialect is found by name, and the scenario validator asks its
    capabilities (nothing in dbaops names it)."""
    import subprocess
    import sys
    import textwrap

    package = tmp_path / "fakedb"
    package.mkdir()
    (package / "__init__.py").write_text("")
    postgres = "from dbaops.dbms.postgres.dialect import DIALECT as PG\n"
    (package / "dialect.py").write_text(
        postgres
        + textwrap.dedent(
            """
            import dataclasses
            from dbaops.dbms.capabilities import EngineCapabilities
            DIALECT = dataclasses.replace(
                PG, name="fakedb", release=lambda v: v.split(" ")[-1],
                capabilities=EngineCapabilities(
                    fault_kinds=frozenset({"sql"}), check_kinds=frozenset({"sql"})),
            )
            """
        )
    )
    dist = tmp_path / "fakedb-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedb\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[dbaops.engines]\nfakedb = fakedb\n")
    probe = textwrap.dedent(
        """
        from dbaops.dbms.dialect import engine_dialect, engine_packages
        print(sorted(engine_packages()))
        d = engine_dialect("fakedb")
        print(d.release("FakeDB 3.1"), sorted(d.capabilities.fault_kinds))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["['fakedb', 'postgres', 'tidb']", "3.1 ['sql']"]


def test_a_server_version_is_listed_as_the_engines_release() -> None:
    from dbaops.dbms.dialect import engine_dialect
    from dbaops.record.layout import RunDir

    assert engine_dialect("tidb").release("8.0.11-TiDB-v9.0.0-master") == "9.0.0-master"
    assert engine_dialect("postgres").release("15.20") == "15.20"
    assert RunDir(Path("r")).engine_log("fakedb", "primary") == Path("r/fakedb-primary.log")


def test_a_run_that_cannot_be_scored_gives_no_verdict_and_no_error(tmp_path: Path) -> None:
    """The caller scores a run once; a directory the scorer cannot read is logged, not
    raised (the run's own outcome stands), and no verdict.json is written."""
    from dbaops.evaluation.score import score_and_record

    assert score_and_record(tmp_path) is None
    assert not (tmp_path / "verdict.json").exists()
