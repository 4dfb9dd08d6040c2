"""Shared fixtures: real PostgreSQL clusters started by the test session itself."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

# Clusters made by the tests live in their own home (world-traversable, as the server runs as a
# service user when the tests run as root), removed at the end of the session.
_HOME = Path("/var/tmp") / f"dbaops-tests-{os.getuid()}-{os.getpid()}"
_HOME.mkdir(mode=0o755, parents=True, exist_ok=True)
os.chmod(_HOME, 0o755)
os.environ["DBAOPS_HOME"] = str(_HOME)

from dbaops.dbms.postgres.cluster import PostgresCluster  # noqa: E402
from dbaops.dbms.tidb.binary import TidbBinary  # noqa: E402

SCENARIOS = Path(__file__).parent / "scenarios"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    """A running embedded cluster (initdb'd fresh for this session)."""

    async def _start() -> PostgresCluster:
        cluster = await PostgresCluster.open("pytest")
        await cluster.start()
        return cluster

    cluster = anyio.run(_start)
    try:
        yield cluster
    finally:
        anyio.run(cluster.stop)


def _stop_all_clusters() -> None:
    """Stop every server the session started (scenario runs stop theirs; killed ones may not)."""
    import subprocess

    for pidfile in [
        *_HOME.glob("clusters/*/data/postmaster.pid"),
        *_HOME.glob("clusters/*/standby/data/postmaster.pid"),  # replica profile standbys
        *_HOME.glob("clusters/*/tidb.pid"),  # embedded tidb-servers
    ]:
        try:
            pid = int(pidfile.read_text().splitlines()[0])
            os.kill(pid, 15)
        except (OSError, ValueError, IndexError):
            continue
    subprocess.run(["sleep", "1"], check=False)


def _remove_containers() -> None:
    """Remove the containers and networks of this session's container clusters (a failed test
    may have left them); the tests check that the backend itself leaves none."""
    from dbaops.containers.daemon import daemon_unavailable
    from dbaops.dbms.postgres.container import remove_labelled

    if daemon_unavailable() is None:
        anyio.run(remove_labelled, lambda root: root.startswith(f"{_HOME}/"))


@pytest.fixture
async def fresh_db(pg_cluster: PostgresCluster) -> AsyncIterator[str]:
    """A new, empty database on the session's cluster, dropped afterwards (connections
    allowed again first, for a test that disallowed them)."""
    name = f"t_{uuid.uuid4().hex[:8]}"
    admin = await pg_cluster.connect()
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        yield name
        await admin.execute(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS true")
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    finally:
        await admin.close()


@pytest.fixture(scope="session")
def docker_daemon() -> None:
    """A Docker daemon answers (the container backend's tests): skipped, with the reason,
    where none does, or failed under ``DBAOPS_REQUIRE_DOCKER=1`` (CI, which starts one)."""
    from dbaops.containers.daemon import daemon_unavailable

    problem = daemon_unavailable()
    if problem is not None:
        if os.environ.get("DBAOPS_REQUIRE_DOCKER") == "1":
            pytest.fail(f"DBAOPS_REQUIRE_DOCKER=1 but {problem}")
        pytest.skip(problem)


@pytest.fixture(scope="session")
def tidb_binary() -> TidbBinary:
    """A ``tidb-server`` dbaops finds (its TiDB tests): skipped, with the ways to get one,
    where none is found, or failed under ``DBAOPS_REQUIRE_TIDB=1`` (CI, which builds one)."""
    from dbaops.dbms.tidb.binary import TidbServerNotFound, find_tidb_server

    try:
        return find_tidb_server()
    except TidbServerNotFound as exc:
        if os.environ.get("DBAOPS_REQUIRE_TIDB") == "1":
            pytest.fail(f"DBAOPS_REQUIRE_TIDB=1 but {exc}")
        pytest.skip(str(exc))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from dbaops.dbms.postgres.volumes import unmount_under

    _remove_containers()
    _stop_all_clusters()
    unmount_under(_HOME, lazy=True)  # loop-mounted volumes a failed test may have left
    shutil.rmtree(_HOME, ignore_errors=True)
