"""Shared fixtures: real PostgreSQL clusters started by the test session itself."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
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
    ]:
        try:
            pid = int(pidfile.read_text().splitlines()[0])
            os.kill(pid, 15)
        except (OSError, ValueError, IndexError):
            continue
    subprocess.run(["sleep", "1"], check=False)


def _unmount_volumes() -> None:
    """Unmount loop-mounted tablespace volumes a failed test may have left under the home."""
    import subprocess

    with open("/proc/self/mounts") as fh:
        points = [line.split()[1] for line in fh if len(line.split()) > 1]
    for point in sorted(points, reverse=True):
        if point.startswith(f"{_HOME}/"):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _remove_containers() -> None:
    """Remove the containers and networks of this session's container clusters (a failed test
    may have left them); the tests check that the backend itself leaves none."""
    from dbaops.containers.daemon import daemon_unavailable, docker_client
    from dbaops.dbms.postgres.container import CONTAINER_LABEL

    if daemon_unavailable() is not None:
        return

    async def remove() -> None:
        async with docker_client() as docker:
            for c in await docker.containers.list(all=True):
                if str(c["Labels"].get(CONTAINER_LABEL, "")).startswith(f"{_HOME}/"):
                    await (await docker.containers.get(c["Id"])).delete(force=True)
            for n in await docker.networks.list():
                if str((n.get("Labels") or {}).get(CONTAINER_LABEL, "")).startswith(f"{_HOME}/"):
                    await (await docker.networks.get(n["Id"])).delete()

    anyio.run(remove)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _remove_containers()
    _stop_all_clusters()
    _unmount_volumes()
    shutil.rmtree(_HOME, ignore_errors=True)
