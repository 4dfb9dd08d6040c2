"""Shared fixtures: one real PostgreSQL cluster for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import anyio
import pytest

from dbaops.backends.postgres.cluster import PostgresCluster


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    """A running embedded cluster (initdb'd fresh for this session)."""

    async def _start() -> PostgresCluster:
        cluster = await PostgresCluster.open(f"pytest-{os.getpid()}")
        await cluster.start()
        return cluster

    cluster = anyio.run(_start)
    try:
        yield cluster
    finally:
        anyio.run(cluster.stop)
        import shutil

        shutil.rmtree(cluster.root, ignore_errors=True)
