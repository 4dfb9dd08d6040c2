"""The TiDB server dbaops runs: the build recipe, finding an executable, and the embedded
``tidb-server`` (real, on loopback) with its lifecycle and snapshots."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dbaops.cli import app
from dbaops.dbms.tidb import build
from dbaops.dbms.tidb.binary import (
    TIDB_SERVER_ENV,
    TidbBinary,
    TidbServerNotFound,
    find_tidb_server,
    tiup_servers,
)
from dbaops.dbms.tidb.endpoint import execute, fetch_all, fetch_value
from dbaops.dbms.tidb.server import TidbServer, binary_version, process_gone

pytestmark = pytest.mark.anyio


# -- the build recipe (no toolchain needed) -------------------------------------------------
def test_recipe_pins_tidb_and_its_replaces() -> None:
    gomod = (Path(build.__file__).parent / "recipe" / "go.mod").read_text()
    assert f"github.com/pingcap/tidb {build.TIDB_MODULE_VERSION}" in gomod
    for replaced in ("github.com/go-ldap/ldap/v3 =>", "sourcegraph.com/sourcegraph/appdash =>"):
        assert replaced in gomod
    assert build.TIDB_COMMIT.startswith(build.TIDB_MODULE_VERSION.rsplit("-", 1)[1])
    gosum = (Path(build.__file__).parent / "recipe" / "go.sum").read_text()
    assert f"github.com/pingcap/tidb {build.TIDB_MODULE_VERSION} h1:" in gosum


def test_ldflags_stamp_the_truth() -> None:
    flags = build.ldflags("2026-01-02T03:04:05Z")
    assert f"mysql.TiDBReleaseVersion={build.TIDB_RELEASE_VERSION}" in flags
    assert f"versioninfo.TiDBGitHash={build.TIDB_COMMIT}" in flags
    assert "TiDBBuildTS=2026-01-02T03:04:05Z" in flags
    assert " " not in build.ldflags("x").split("TiDBBuildTS=")[1]  # one -X word each
    assert build.recipe_hash() == build.recipe_hash()
    assert build.build_dir().name.endswith(build.recipe_hash())


def test_go_versions() -> None:
    assert build.parse_go_version("go version go1.26.8 linux/amd64") == (1, 26, 8)
    assert build.parse_go_version("go version go1.24 linux/arm64") == (1, 24, 0)
    assert build.parse_go_version("go version go1.23.6 x") >= build.MIN_GO
    with pytest.raises(build.TidbBuildError):
        build.parse_go_version("no go here")


# -- finding an executable ------------------------------------------------------------------
def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment where no tidb-server can be found."""
    monkeypatch.delenv(TIDB_SERVER_ENV, raising=False)
    monkeypatch.setenv("DBAOPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("TIUP_HOME", str(tmp_path / "tiup"))
    return tmp_path


def test_not_found_names_every_way(nowhere: Path) -> None:
    with pytest.raises(TidbServerNotFound) as err:
        find_tidb_server()
    text = str(err.value)
    for way in ("dbaops tidb build", "on PATH", TIDB_SERVER_ENV, "tiup install tidb:"):
        assert way in text
    result = CliRunner().invoke(app, ["tidb", "where"])
    assert result.exit_code == 2
    assert "dbaops tidb build" in result.output


def test_found_in_order(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _executable(nowhere / "tiup" / "components" / "tidb" / "v7.5.1" / "tidb-server")
    new = _executable(nowhere / "tiup" / "components" / "tidb" / "v8.5.0" / "tidb-server")
    assert tiup_servers() == [new, old]
    assert find_tidb_server() == TidbBinary(new, "tiup")
    on_path = _executable(nowhere / "bin" / "tidb-server")
    assert find_tidb_server() == TidbBinary(on_path, "PATH")
    named = _executable(nowhere / "mine" / "tidb-server")
    monkeypatch.setenv(TIDB_SERVER_ENV, str(named))
    assert find_tidb_server() == TidbBinary(named, f"${TIDB_SERVER_ENV}")
    monkeypatch.setenv(TIDB_SERVER_ENV, str(nowhere / "missing"))
    with pytest.raises(TidbServerNotFound, match=TIDB_SERVER_ENV):
        find_tidb_server()


# -- the embedded server --------------------------------------------------------------------
@pytest.fixture
async def tidb(tidb_binary: TidbBinary) -> AsyncIterator[TidbServer]:
    server = await TidbServer.open("pytest-tidb", tidb_binary)
    server.acquire()
    await server.start()
    try:
        yield server
    finally:
        await server.dispose()


def test_binary_reports_its_release(tidb_binary: TidbBinary) -> None:
    version = binary_version(tidb_binary.path)
    assert "placeholder" not in version
    if tidb_binary.source == "dbaops build":
        assert version == build.TIDB_RELEASE_VERSION


async def test_server_answers_on_loopback_as_a_service_user(tidb: TidbServer) -> None:
    version = await tidb.server_version()
    assert version.startswith("8.0.11-TiDB-")
    assert tidb.version in version
    conn = await tidb.connect()
    try:
        info = await fetch_value(conn, "SELECT tidb_version()")
        assert "Store: unistore" in info
        rows = await fetch_all(
            conn, "SELECT PORT, STATUS_PORT FROM information_schema.TIDB_SERVERS_INFO"
        )
        assert rows == [{"PORT": tidb.port, "STATUS_PORT": tidb.status_port}]
        assert await fetch_value(conn, "SELECT @@socket") == ""
    finally:
        conn.close()
    listening = _listening()
    assert listening[tidb.port] == listening[tidb.status_port] == {"127.0.0.1"}
    assert tidb.pid is not None
    owner = os.stat(f"/proc/{tidb.pid}").st_uid
    if os.geteuid() == 0:
        assert pwd.getpwuid(owner).pw_name == tidb.os_user != "root"
    assert "Welcome to TiDB" in tidb.log_path.read_text()


async def test_snapshot_round_trip(tidb: TidbServer) -> None:
    conn = await tidb.connect()
    try:
        await execute(conn, "CREATE DATABASE shop")
        await execute(conn, "CREATE TABLE shop.t (id INT PRIMARY KEY, v INT)")
        await execute(conn, "INSERT INTO shop.t VALUES (1, 10), (2, 20)")
    finally:
        conn.close()
    async with tidb.snapshot_lock(exclusive=True):
        await tidb.capture_snapshot("dirty")
    assert tidb.has_snapshot("dirty")
    if tidb.os_user:
        assert stat.S_IMODE(tidb.snapshot_root.stat().st_mode) == 0o700
    conn = await tidb.connect()
    try:
        await execute(conn, "DELETE FROM shop.t WHERE id = 1")
        await execute(conn, "CREATE TABLE shop.later (id INT)")
    finally:
        conn.close()
    async with tidb.snapshot_lock(exclusive=False):
        await tidb.restore_snapshot("dirty")
    conn = await tidb.connect()
    try:
        assert await fetch_all(conn, "SELECT id, v FROM shop.t ORDER BY id") == [
            {"id": 1, "v": 10},
            {"id": 2, "v": 20},
        ]
        tables = await fetch_all(conn, "SHOW TABLES IN shop")
        assert [next(iter(row.values())) for row in tables] == ["t"]
    finally:
        conn.close()
    tidb.drop_snapshot("dirty")
    assert not tidb.has_snapshot("dirty")


async def test_crash_then_start_recovers(tidb: TidbServer) -> None:
    conn = await tidb.connect()
    try:
        await execute(conn, "CREATE DATABASE IF NOT EXISTS crash")
        await execute(conn, "CREATE TABLE crash.t (id INT PRIMARY KEY)")
        await execute(conn, "INSERT INTO crash.t VALUES (7)")
    finally:
        conn.close()
    tidb.kill()
    assert not tidb.process_alive()
    await tidb.start()
    conn = await tidb.connect()
    try:
        assert await fetch_value(conn, "SELECT id FROM crash.t") == 7
    finally:
        conn.close()


async def test_one_run_at_a_time_and_leftovers_are_stopped(tidb: TidbServer) -> None:
    from dbaops.dbms.tidb.server import TidbError

    second = await TidbServer.open("pytest-tidb-other", tidb.binary)
    second.acquire()
    await second.start()
    pid = second.pid
    assert pid is not None
    # another run opening the same name while this one holds it: refused, the server untouched
    intruder = await TidbServer.open("pytest-tidb-other", tidb.binary)
    with pytest.raises(TidbError, match="in use by another dbaops run"):
        intruder.acquire()
    assert not process_gone(pid) and second.process_alive()
    second.release()
    # a crashed harness left the server running: the next run taking the name stops it
    third = await TidbServer.open("pytest-tidb-other", tidb.binary)
    third.acquire()
    assert process_gone(pid)
    await third.dispose()


def _listening() -> dict[int, set[str]]:
    """Listening TCP (IPv4 and IPv6) sockets by port: the addresses they are bound to."""
    import ipaddress

    found: dict[int, set[str]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state != "0A":
                continue
            addr, port = local.split(":")
            raw = bytes.fromhex(addr)
            # the kernel prints each 32-bit word in host (little-endian) order
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.setdefault(int(port, 16), set()).add(str(ipaddress.ip_address(words)))
    return found


def test_workers_on_a_fresh_home_copy_the_binary_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A campaign's workers on a fresh DBAOPS_HOME each make the service user's copy of the
    binary at the same moment: every one gets it (a shared partial file made all but one fail)."""
    from concurrent.futures import ThreadPoolExecutor

    from dbaops.dbms.tidb.server import _accessible_binary

    monkeypatch.setenv("DBAOPS_HOME", str(tmp_path / "home"))
    binary = tmp_path / "private" / "tidb-server"
    binary.parent.mkdir()
    binary.write_bytes(os.urandom(8 * 1024 * 1024))
    binary.chmod(0o700)
    binary.parent.chmod(0o700)
    with ThreadPoolExecutor(8) as pool:
        copies = list(pool.map(lambda _: _accessible_binary(binary, "dbaops"), range(8)))
    assert len(set(copies)) == 1 and copies[0].read_bytes() == binary.read_bytes()
    assert [p.name for p in copies[0].parent.iterdir()] == [copies[0].name]  # no partial left


# -- a server that cannot start, in a run (no tidb-server needed) ---------------------------
async def test_a_tidb_instance_fault_that_fails_is_recorded_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """The timeline handles every engine's instance error: a timed ``instance: start`` whose
    server exits at once (here a binary that is not a tidb-server) is on record as failed,
    with the reason, instead of ending the run."""
    from dbaops.clock import ScenarioClock
    from dbaops.execution.actors import ActorContext
    from dbaops.execution.timeline import _event_actor
    from dbaops.record.kinds import EventRecord, Record
    from dbaops.scenario.faults import InstanceControl
    from dbaops.scenario.model import Event

    server = TidbServer(
        tmp_path / "server",
        TidbBinary(Path("/bin/false"), "a binary that exits at once"),
        "v0",
        None,
        tmp_path / "snapshots",
    )
    written: list[Record] = []

    class Trace:
        def write(self, record: Record) -> None:
            written.append(record)

    ctx = ActorContext(
        endpoint=server.endpoint(), clock=ScenarioClock(), trace=Trace(), instance=server
    )
    event = Event(id="start_again", at=0, fault=InstanceControl(action="start"))
    await _event_actor(event, ctx, Trace())
    [record] = [r for r in written if isinstance(r, EventRecord)]
    assert record.status == "failed" and "TidbError" in record.detail["error"]
    assert "exited" in record.detail["error"]
