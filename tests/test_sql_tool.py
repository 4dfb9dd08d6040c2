"""``execute_sql`` returns whatever PostgreSQL can return, as psql shows it: the catalog views
a DBA reads, pseudo-typed columns (``anyarray``) included, as the agent's own role."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbaops.agents.base import AgentSession
from dbaops.execution.runner import RunOptions, run_scenario

pytestmark = pytest.mark.anyio

CATALOG_QUERIES = [
    "SELECT attname, null_frac, n_distinct, most_common_vals, most_common_freqs, "
    "histogram_bounds FROM pg_stats WHERE schemaname = 'public' AND tablename = 'orders'",
    "SELECT * FROM pg_stats WHERE schemaname = 'public' LIMIT 5",
    "SELECT * FROM pg_stat_activity",
    "SELECT * FROM pg_locks",
    "SELECT * FROM pg_settings WHERE name LIKE 'autovacuum%'",
    "SELECT * FROM pg_db_role_setting",
    "SELECT relname, reloptions FROM pg_class WHERE relnamespace = 'public'::regnamespace",
    "SELECT * FROM pg_index LIMIT 5",
    "SELECT * FROM pg_class WHERE relname = 'orders'",
    "SELECT * FROM pg_stat_user_tables",
    "SELECT * FROM pg_stat_statements LIMIT 5",
    "SELECT * FROM pg_roles",
    "SELECT * FROM pg_stats_ext",
    "SELECT * FROM pg_proc WHERE proname = 'now'",
]
CLIENT_ERRORS = ("InternalClientError", "could not resolve", "ProtocolError", "tool failed",
                 "UnsupportedClientFeature", "unexpected instance")  # fmt: skip


class CatalogReader:
    """Reads the catalog views and reports."""

    name = "catalog-reader"

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    async def run(self, session: AgentSession) -> None:
        sql = session.tools["execute_sql"].handler
        for query in CATALOG_QUERIES:
            self.seen[query] = (await sql({"sql": query})).observation
        await session.tools["submit_report"].handler({"summary": "read the catalog"})


async def test_every_catalog_view_a_dba_reads_comes_back_as_psql_shows_it(
    tmp_path: Path,
) -> None:
    agent = CatalogReader()
    result = await run_scenario(
        "pg-qt-01", RunOptions(time_scale=0.05, runs_dir=tmp_path), agent=agent
    )
    assert result.status == "completed"
    for query, observation in agent.seen.items():
        assert not any(e in observation for e in CLIENT_ERRORS), (query, observation[:300])
        # a view the role may not read answers with PostgreSQL's own error, as psql would
        assert not observation.startswith("error:"), (query, observation[:300])
    stats = agent.seen[CATALOG_QUERIES[0]]
    assert "most_common_vals" in stats and "{" in stats  # anyarray in PostgreSQL's text form
    assert "(0 rows)" not in stats
