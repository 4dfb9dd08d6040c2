"""A small shop fixture on a fresh embedded cluster, for tests that act on the database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from dbaops.dbms.postgres.binaries import PgBinaries
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.dbms.postgres.fixture import build_fixture
from dbaops.scenario.loader import load_library

#: Sizes that build in a second or two.
SMALL = {"customers": 2000, "products": 400, "orders": 4000}


@asynccontextmanager
async def small_shop(name: str, binaries: PgBinaries | None = None) -> AsyncIterator[Endpoint]:
    """The shop library's fixture (small) on the cluster ``name``, started and stopped here;
    yields the endpoint of its database (harness sessions as the admin, nothing hidden)."""
    cluster = await PostgresCluster.open(name, binaries=binaries)
    await cluster.start()
    try:
        admin = cluster.endpoint()
        lib = load_library("shop")
        await build_fixture(admin, lib, {**lib.params, **SMALL}, 42, "2026-01-01")
        yield admin.model_copy(update={"database": lib.database})
    finally:
        await cluster.stop()
