"""The server's OS user reaches nothing of the harness: read from inside the server, as a
superuser agent (or one that escalated to the server's OS user) would, with the server's own
file and program access."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import asyncpg
import pytest

import dbaops
from dbaops.dbms.osuser import running_as_root
from dbaops.dbms.postgres.binaries import installed_majors
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.dbms.private_view import hidden_directories
from dbaops.dbms.serverdir import dbaops_home
from dbaops.dbms.tidb.binary import TidbBinary

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not running_as_root(), reason="the server is isolated only as root"),
]

CHECKOUT = Path(dbaops.__file__).resolve().parents[1]


async def _server_reads(conn: asyncpg.Connection, path: Path) -> str | None:
    """What the server's OS user reads at ``path`` (a file's first line, a directory's
    listing), or None if it cannot."""
    try:
        await conn.execute("CREATE TEMP TABLE IF NOT EXISTS seen(line text); TRUNCATE seen")
        command = f"(cat {path} 2>/dev/null || ls -a {path} 2>/dev/null) | base64 -w0"
        await conn.execute(f"COPY seen FROM PROGRAM $q${command}$q$")
    except asyncpg.PostgresError:
        return None
    encoded = "".join(r["line"] for r in await conn.fetch("SELECT line FROM seen"))
    lines = base64.b64decode(encoded).decode(errors="replace").splitlines()
    listing = [line for line in lines if line not in (".", "..")]
    return "\n".join(listing) if listing else None


@pytest.mark.parametrize("major", sorted(installed_majors()), ids=lambda m: f"pg{m}")
async def test_the_server_sees_its_own_directory_and_nothing_of_the_harness(major: int) -> None:
    binaries = installed_majors()[major]
    # another scenario's cluster
    other = await PostgresCluster.open(f"t-private-view-other-{major}", binaries=binaries)
    cluster = await PostgresCluster.open(f"t-private-view-{major}", binaries=binaries)
    await cluster.start()
    try:
        conn = await cluster.connect()
        try:
            own_conf = await _server_reads(conn, cluster.datadir / "postgresql.conf")
            own_log = await conn.fetchval("SELECT pg_catalog.pg_read_file('log/postgresql.log')")
            seen = {
                path: await _server_reads(conn, path)
                for path in (
                    CHECKOUT / "README.md",  # world-readable in a checkout
                    CHECKOUT / "timelines",
                    CHECKOUT / ".git" / "HEAD",
                    dbaops_home() / ".cluster-key",
                    other.datadir,
                    cluster.snapshot_root,
                    Path("/root"),
                    Path(os.getcwd()),
                    Path(f"/proc/{os.getpid()}/cmdline"),  # the harness's command line
                    Path(f"/proc/{os.getpid()}/cwd"),
                )
            }
            # Only the path down to its own directory (which SHOW data_directory names anyway)
            home = await _server_reads(conn, dbaops_home())
            clusters = await _server_reads(conn, dbaops_home() / "clusters")
            with pytest.raises(asyncpg.PostgresError):
                await conn.fetchval(f"SELECT pg_catalog.pg_read_file('{CHECKOUT / 'README.md'}')")
        finally:
            await conn.close()
    finally:
        await cluster.stop()
    assert own_conf and "dbaops fixture settings" in own_conf
    assert own_log is not None
    # (and the server's binaries, where dbaops copied them there)
    assert home is not None and set(home.split("\n")) <= {"clusters", "pg"}
    assert clusters == cluster.root.name
    assert {path: text for path, text in seen.items() if text is not None} == {}


def test_every_harness_place_and_non_system_directory_is_hidden(tmp_path: Path) -> None:
    (tmp_path / "work" / "checkout").mkdir(parents=True)
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "var" / "lib" / "dbaops").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "usr" / "bin").mkdir()
    (tmp_path / "bin").symlink_to(tmp_path / "usr" / "bin")  # as merged-/usr systems have
    hidden = hidden_directories(
        [
            tmp_path / "work" / "checkout",
            tmp_path / "usr" / "lib",
            tmp_path / "nowhere",
            tmp_path / "etc",
            tmp_path,
        ],
        root=tmp_path,
    )
    assert hidden == [tmp_path / "var", tmp_path / "work", tmp_path / "usr" / "lib"]


def _seen_by(pid: int, path: Path) -> bool:
    """Whether process ``pid`` sees ``path`` in its mount namespace (through its root)."""
    return Path(f"/proc/{pid}/root{path}").exists()


async def test_tidb_server_sees_its_own_directory_and_nothing_of_the_harness(
    tidb_binary: TidbBinary,
) -> None:
    from dbaops.dbms.tidb.server import TidbServer

    server = await TidbServer.open("t-private-view-tidb", tidb_binary)
    server.acquire()
    await server.start()
    try:
        pid = server.pid
        assert pid is not None
        assert _seen_by(pid, server.config_path) and _seen_by(pid, server.binary.path)
        assert _seen_by(os.getpid(), CHECKOUT / "README.md")  # the control: we see it
        hidden = [
            str(p)
            for p in (
                CHECKOUT / "README.md",
                CHECKOUT / "timelines",
                dbaops_home() / "snapshots",
                Path(os.getcwd()),
                Path("/root"),
            )
            if _shows_something(pid, p)
        ]
        assert hidden == []
    finally:
        await server.dispose()


def _shows_something(pid: int, path: Path) -> bool:
    """Whether process ``pid`` sees a file at ``path``, or a directory with anything in it."""
    seen = Path(f"/proc/{pid}/root{path}")
    if seen.is_dir():
        return any(seen.iterdir())
    return seen.exists()


@pytest.mark.parametrize("major", sorted(installed_majors()), ids=lambda m: f"pg{m}")
async def test_the_servers_os_user_cannot_log_in_as_anyone(major: int) -> None:
    """No ``trust``: from inside the server, a client without the harness's secrets is refused
    as the superuser, over TCP and over the socket."""
    cluster = await PostgresCluster.open(f"t-no-trust-{major}", binaries=installed_majors()[major])
    await cluster.start()
    try:
        hba = (cluster.datadir / "pg_hba.conf").read_text()
        conn = await cluster.connect()
        try:
            await conn.execute("CREATE TEMP TABLE seen(line text)")
            psql = cluster.binaries.tool("psql")
            tries = {}
            for where in (
                f"127.0.0.1 -p {cluster.port}",
                f"{cluster.socket_dir} -p {cluster.port}",
            ):
                await conn.execute("TRUNCATE seen")
                await conn.execute(
                    f"COPY seen FROM PROGRAM $q$({psql} -w -h {where} -U postgres -d postgres "
                    "-Atc 'SELECT 42' 2>&1; echo exit=$?) | base64 -w0$q$"
                )
                encoded = "".join(r["line"] for r in await conn.fetch("SELECT line FROM seen"))
                tries[where] = base64.b64decode(encoded).decode(errors="replace")
        finally:
            await conn.close()
    finally:
        await cluster.stop()
    rules = [line.split() for line in hba.splitlines() if line.strip() and line[0] != "#"]
    assert rules and all(rule[-1] == "scram-sha-256" for rule in rules), rules
    for where, out in tries.items():
        printed = out.split("exit=")[0].splitlines()
        assert "exit=0" not in out and "42" not in printed, (where, out)
        assert "password" in out, (where, out)
