"""The container backend against a real Docker daemon: images built from Debian packages, the
server in a container with resource limits, and the faults only a machine suffers, each shown
to have really happened (the server log line, the exit code, the failed connection).

Skipped, with the reason, where no Docker daemon answers; ``DBAOPS_REQUIRE_DOCKER=1`` (CI)
turns the skip into a failure."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import asyncpg
import pytest

from dbaops.containers.daemon import DockerUnavailable, docker_client
from dbaops.containers.images import ensure_postgres_image
from dbaops.containers.resources import ServerResources
from dbaops.dbms.postgres.container import (
    CONTAINER_LABEL,
    ContainerCluster,
    labelled,
    open_container_cluster,
)
from dbaops.dbms.postgres.instance_tool import instance_tool
from dbaops.dbms.serverdir import dbaops_home
from dbaops.evaluation.score import score_run
from dbaops.execution.actors import run_fault
from dbaops.execution.runner import RunOptions, run_scenario
from dbaops.record.kinds import ActorRecord
from dbaops.scenario.faults import CpuLimit, Crash, Freeze, Partition, TablespaceVolume
from dbaops.scenario.loader import ScenarioError, load_scenario
from dbaops.testing.actors import RecordList, cluster_actor_context

pytestmark = pytest.mark.anyio

SCENARIOS = Path(__file__).parent / "scenarios"


requires_docker = pytest.mark.usefixtures("docker_daemon")


@pytest.fixture
async def boxed() -> AsyncIterator[ContainerCluster]:
    """A container cluster of its own (256 MiB of memory), started; removed afterwards."""
    cluster = await open_container_cluster("box", resources=ServerResources(memory_mb=256))
    cluster.acquire()
    try:
        await cluster.start()
        yield cluster
    finally:
        await cluster.dispose()
        await cluster.unmount_volumes()
        cluster.release()
        shutil.rmtree(cluster.root, ignore_errors=True)


async def _query(cluster: ContainerCluster, sql: str) -> object:
    conn = await cluster.connect()
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _log(cluster: ContainerCluster) -> str:
    return cluster.log_path.read_text(errors="replace")


@requires_docker
async def test_the_image_is_built_from_debian_packages_once_and_found_again() -> None:
    async with docker_client() as docker:
        first = await ensure_postgres_image(docker, 15, dbaops_home() / "images", lambda _: None)
        again = await ensure_postgres_image(docker, 15, dbaops_home() / "images", lambda _: None)
        assert again.tag == first.tag and again.tag.startswith("dbaops/postgres:15-")
        assert again.built is False  # cached by its recipe's hash
        info = await docker.images.inspect(again.tag)
        assert "postgresql-15" in info["Config"]["Labels"]["dbaops.recipe"]


@requires_docker
async def test_the_server_runs_in_a_container_with_its_limits(boxed: ContainerCluster) -> None:
    assert await _query(boxed, "SELECT 1") == 1
    async with docker_client() as docker:
        info = await (await docker.containers.get(boxed.container_name)).show()
    assert info["HostConfig"]["Memory"] == 256 << 20
    assert info["Config"]["Labels"][CONTAINER_LABEL] == str(boxed.root)
    # The postmaster is a process of that container (its cgroup), not of the host's.
    pid = boxed._postmaster_pid()
    assert pid is not None
    cgroups = _read(f"/proc/{pid}/cgroup")
    assert str(info["Id"]) in cgroups
    status = await boxed.machine_status()
    assert status.status == "running" and status.memory_limit_mb == 256
    assert boxed.describe()["backend"] == "docker"


@requires_docker
async def test_an_oom_kill_is_real_and_the_postmaster_resets_every_session(
    boxed: ContainerCluster,
) -> None:
    bystander = await boxed.connect()
    hungry = await boxed.connect()
    await hungry.execute("SET work_mem = '2GB'")
    with pytest.raises((asyncpg.PostgresConnectionError, asyncpg.ConnectionDoesNotExistError,
                        ConnectionError)):  # fmt: skip
        await hungry.fetchval(
            "SELECT count(DISTINCT repeat('x', 100) || g) FROM generate_series(1, 3000000) g"
        )
    with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError)):
        await bystander.fetchval("SELECT 1")  # reset with every other session
    with anyio.fail_after(60):  # the reset's crash recovery ends
        while True:
            after = _log(boxed).split("terminating any other active server processes")[-1]
            if "database system is ready to accept connections" in after:
                break
            await anyio.sleep(0.2)
    log = _log(boxed)
    assert "was terminated by signal 9: Killed" in log
    assert "terminating any other active server processes" in log
    status = await boxed.machine_status()
    assert (status.oom_kills or 0) >= 1 and status.status == "running"
    assert "out-of-memory kills" in status.summary()
    assert await _query(boxed, "SELECT 1") == 1  # the server itself survived


@requires_docker
async def test_a_crash_kills_every_server_process_and_a_start_recovers(
    boxed: ContainerCluster,
) -> None:
    conn = await boxed.connect()
    await conn.execute("CREATE TABLE t (x int); INSERT INTO t SELECT generate_series(1, 1000)")
    await conn.close()
    pids = boxed._server_processes()
    trace = RecordList()
    await run_fault(Crash(), cluster_actor_context(boxed, trace))
    assert not any(_exists(f"/proc/{p}") for p in pids)  # all of them at once
    status = await boxed.machine_status()
    assert status.status == "exited" and status.exit_code == 137
    assert await boxed.is_running() is False
    with pytest.raises(OSError):
        await boxed.connect()
    tool = instance_tool(boxed.endpoint(), boxed)
    shown = await tool.handler({"action": "status"})
    assert "server running: False" in shown.observation
    assert "instance container: exited; exit code 137" in shown.observation
    started = await tool.handler({"action": "start"})
    assert started.ok, started.observation
    assert "automatic recovery in progress" in _log(boxed)
    assert await _query(boxed, "SELECT count(*) FROM t") == 1000  # committed rows survived
    assert [r.actor for r in trace.items if isinstance(r, ActorRecord)] == ["t:crash"]


@requires_docker
async def test_a_frozen_server_answers_nothing_until_it_thaws(boxed: ContainerCluster) -> None:
    conn = await boxed.connect()
    done = anyio.Event()
    trace = RecordList()
    async with anyio.create_task_group() as tg:
        await tg.start(run_fault, Freeze(duration_s=None), cluster_actor_context(boxed, trace))
        assert (await boxed.machine_status()).status == "paused"

        async def ask() -> None:
            assert await conn.fetchval("SELECT 42") == 42
            done.set()

        tg.start_soon(ask)
        await anyio.sleep(0.5)
        assert not done.is_set()  # a frozen server cannot have answered
        tg.cancel_scope.cancel()  # the fault's end thaws the machine
    with anyio.fail_after(30):
        assert await conn.fetchval("SELECT 42") == 42
    await conn.close()
    assert (await boxed.machine_status()).status == "running"
    assert [r.status for r in trace.items if isinstance(r, ActorRecord)] == [
        "started",
        "finished",
    ]


@requires_docker
async def test_a_cpu_limit_throttles_the_server(boxed: ContainerCluster) -> None:
    await run_fault(CpuLimit(cpus=0.2), cluster_actor_context(boxed, RecordList()))
    async with docker_client() as docker:
        container = await docker.containers.get(boxed.container_name)
        info = await container.show()
        assert info["HostConfig"]["NanoCpus"] == 200_000_000
    stat = f"/sys/fs/cgroup/cpu/docker/{info['Id']}/cpu.stat"
    if not _exists(stat):
        pytest.skip("cgroup v1 cpu.stat not here (the limit is set; throttling not readable)")

    def throttled() -> int:
        fields = dict(line.split() for line in _read(stat).splitlines())
        return int(fields["nr_throttled"])

    before = throttled()
    await _query(boxed, "SELECT count(*) FROM generate_series(1, 3000000)")
    assert throttled() > before
    await boxed.restart()  # the limit is the instance's: it outlives a restart
    async with docker_client() as docker:
        info = await (await docker.containers.get(boxed.container_name)).show()
        assert info["HostConfig"]["NanoCpus"] == 200_000_000


@requires_docker
async def test_a_tablespace_volume_is_in_the_container_and_fills_for_real(
    boxed: ContainerCluster,
) -> None:
    await run_fault(
        TablespaceVolume(name="small", size_mb=12), cluster_actor_context(boxed, RecordList())
    )
    conn = await boxed.connect()
    try:
        await conn.execute("CREATE TABLE big (x text) TABLESPACE small")
        with pytest.raises(asyncpg.PostgresError) as full:
            for _ in range(200):
                await conn.execute(
                    "INSERT INTO big SELECT repeat('x', 1000) FROM generate_series(1, 2000)"
                )
        assert full.value.sqlstate == "53100"
        assert "No space left on device" in str(full.value)
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()


@requires_docker
async def test_a_partition_cuts_the_standby_off_and_healing_resumes_it() -> None:
    cluster = await open_container_cluster("partition")
    cluster.acquire()
    try:
        await cluster.start()
        conn = await cluster.connect()
        await conn.execute("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        await conn.close()
        standby = await cluster.create_standby("standby1", {})
        assert isinstance(standby, ContainerCluster)
        conn = await cluster.connect()  # the primary restarted to listen on the network
        assert standby.host == cluster.replication_net().standby_ip

        async def replayed(value: int) -> None:
            with anyio.fail_after(60):
                while True:
                    try:
                        if await _query(standby, f"SELECT count(*) FROM t WHERE x = {value}"):
                            return
                    except (OSError, asyncpg.PostgresError):
                        pass
                    await anyio.sleep(0.2)

        await replayed(1)
        client = await conn.fetchval(
            "SELECT host(client_addr) FROM pg_stat_replication WHERE application_name = 'standby1'"
        )
        assert client == standby.host  # replication crosses the bridge network

        trace = RecordList()
        async with anyio.create_task_group() as tg:
            await tg.start(run_fault, Partition(mode="drop"), cluster_actor_context(cluster, trace))
            await conn.execute("INSERT INTO t VALUES (2)")
            await anyio.sleep(1.0)
            # The harness still reaches the standby; the standby has not received the row.
            assert await _query(standby, "SELECT count(*) FROM t WHERE x = 2") == 0
            await standby.restart()  # a new container on the same partitioned network
            await anyio.sleep(1.0)
            assert await _query(standby, "SELECT count(*) FROM t WHERE x = 2") == 0
            tg.cancel_scope.cancel()  # the fault's end heals the partition
        await replayed(2)

        async with anyio.create_task_group() as tg:
            await tg.start(
                run_fault, Partition(mode="disconnect"), cluster_actor_context(cluster, trace)
            )
            with pytest.raises((OSError, asyncpg.PostgresError)):
                with anyio.fail_after(10):
                    await standby.connect()  # the link is gone
            tg.cancel_scope.cancel()
        await conn.execute("INSERT INTO t VALUES (3)")
        await replayed(3)
        await conn.close()
        kinds = [(r.actor, r.status) for r in trace.items if isinstance(r, ActorRecord)]
        assert kinds == [("t:partition", s) for s in ("started", "finished") * 2]
    finally:
        await cluster.dispose()
        cluster.release()
        shutil.rmtree(cluster.root, ignore_errors=True)


@requires_docker
async def test_a_bounded_scenario_runs_on_the_docker_backend_with_a_standby(
    tmp_path: Path,
) -> None:
    result = await run_scenario(
        SCENARIOS / "t-replica.yaml",
        RunOptions(time_scale=0.25, runs_dir=tmp_path, backend="docker"),
        agent="reference",
    )
    assert result.status == "completed"
    assert score_run(result.run_dir).outcome_pass is True
    header = next(
        line for line in (result.run_dir / "trace.jsonl").read_text().splitlines()
        if '"run_header"' in line
    )  # fmt: skip
    assert '"backend":"docker"' in header and '"kind":"docker"' in header


async def test_a_container_scenario_is_refused_elsewhere_with_the_reason(tmp_path: Path) -> None:
    for options in (
        RunOptions(time_scale=0.1, runs_dir=tmp_path, backend="embedded"),
        RunOptions(time_scale=0.1, runs_dir=tmp_path, dsn="postgresql://x@127.0.0.1:1/db"),
    ):
        result = await run_scenario("pg-sf-10", options)
        assert result.status == "refused"
        assert "needs the docker backend" in (result.reason or "")


async def test_no_daemon_is_a_clear_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    result = await run_scenario("pg-sf-10", RunOptions(time_scale=0.1, runs_dir=tmp_path))
    assert result.status == "refused"
    assert "no Docker daemon" in (result.reason or "")
    assert "apt-get install docker.io" in (result.reason or "")
    with pytest.raises(DockerUnavailable):
        async with docker_client():
            pass


def test_a_machine_fault_without_the_docker_backend_is_refused_at_load(tmp_path: Path) -> None:
    text = (Path(__file__).parent.parent / "timelines" / "pg-sf-10.yaml").read_text()
    path = tmp_path / "no-backend.yaml"
    path.write_text(text.replace("backend: docker\n", "", 1))
    with pytest.raises(ScenarioError) as refused:
        load_scenario(path)
    message = str(refused.value)
    assert "preparation.activation[2]" in message and "'crash'" in message
    assert "declare backend: docker" in message
    with pytest.raises(ValueError, match="cpus"):
        CpuLimit(cpus=0)
    with pytest.raises(ValueError, match="mode"):
        Partition.model_validate({"mode": "cut"})


@requires_docker
async def test_zz_nothing_the_tests_made_is_left_in_docker() -> None:
    """Runs last in this module: every container and network dbaops made is gone."""
    home = str(dbaops_home())
    async with docker_client() as docker:
        left, nets = await labelled(docker, lambda root: root.startswith(home))
    assert left == [] and nets == []
