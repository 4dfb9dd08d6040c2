"""Capacity and client CPU of the dbaops OLTP driver against pgbench, on one embedded server.

Usage::

    python benchmarks/driver_vs_pgbench.py [--seconds 20] [--scale 10] [--clients 8] [--repeats 1]

Per repeat, five runs against the same server (pgbench's pre-run steps plus a CHECKPOINT before
each): pgbench tpcb-like ``-M simple`` and ``-M prepared`` (closed loop), then the dbaops OLTP
driver with the same five statements in its own process (uvloop), as a run starts it, with
``protocol: prepared`` and ``protocol: simple``, then a bare asyncpg closed loop of the same
statements (the floor under the driver). The driver runs open loop
at ``--rate-factor`` x pgbench's best TPS, so it saturates and the excess shows as dropped
arrivals; its capacity is the completed (on-time + late) units per second. Client CPU per
transaction is getrusage(RUSAGE_CHILDREN) for pgbench, and for the driver the driver process's
getrusage(RUSAGE_CHILDREN) plus this process's ``time.process_time()`` (relaying the
samples). Figures are printed and written to ``benchmarks/results/``.

This is a measurement, not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import polars as pl

from dbaops.clock import ScenarioClock
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.record.kinds import ClientLagRecord
from dbaops.scenario.model import OltpWorkload
from dbaops.workloads.host import DriverPlan, DriverProcess, run_workloads
from dbaops.workloads.lag import ClientLagMonitor
from dbaops.workloads.sink import SampleSink
from dbaops.workloads.spec import WorkloadLibrary

DATABASE = "bench"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
CLIENTS = (
    "pgbench simple",
    "pgbench prepared",
    "dbaops prepared",
    "dbaops simple",
    "bare asyncpg",
)
#: The rows compared with pgbench; the dbaops ones are open-loop driver runs.
COMPARED = CLIENTS[2:]
DRIVER_ROWS = ("dbaops prepared", "dbaops simple")

# pgbench's built-in "tpcb-like" script, statement for statement. Each argument is drawn on its
# own (the library's generators have no shared variables), so the SELECT reads a random account
# rather than the one just updated; at scale 10 all accounts are in shared_buffers either way.
TPCB_STATEMENTS: list[dict[str, Any]] = [
    {
        "sql": "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
        "args": [{"uniform": [-5000, 5000]}, {"uniform": [1, "accounts"]}],
    },
    {
        "sql": "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
        "args": [{"uniform": [1, "accounts"]}],
    },
    {
        "sql": "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
        "args": [{"uniform": [-5000, 5000]}, {"uniform": [1, "tellers"]}],
    },
    {
        "sql": "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2",
        "args": [{"uniform": [-5000, 5000]}, {"uniform": [1, "branches"]}],
    },
    {
        "sql": "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) "
        "VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
        "args": [
            {"uniform": [1, "tellers"]},
            {"uniform": [1, "branches"]},
            {"uniform": [1, "accounts"]},
            {"uniform": [-5000, 5000]},
        ],
    },
]


def tpcb_library(scale: int) -> WorkloadLibrary:
    """The pgbench schema as a workload library (the data comes from ``pgbench -i``)."""
    return WorkloadLibrary.model_validate(
        {
            "id": "pgbench-tpcb",
            "description": "pgbench tpcb-like, for driver_vs_pgbench",
            "database": DATABASE,
            "params": {"accounts": 100_000 * scale, "tellers": 10 * scale, "branches": scale},
            "schema": "",
            "transactions": {"tpcb": {"role": "postgres", "statements": TPCB_STATEMENTS}},
        }
    )


# -- helpers -------------------------------------------------------------------------------------
def host_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


def host_busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total else 0.0


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_tool(cluster: PostgresCluster, *args: str) -> str:
    """Run a PostgreSQL client tool as the cluster's OS user (as ``PostgresCluster._run``)."""
    result = subprocess.run(
        list(args),
        capture_output=True,
        text=True,
        check=False,
        user=cluster.os_user,
        cwd=str(cluster.root),
        env={**os.environ, "PGPASSWORD": cluster.password("postgres")},
    )
    out = result.stdout + result.stderr
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}):\n{out.strip()}")
    return out


def conn_args(cluster: PostgresCluster) -> list[str]:
    return ["-h", cluster.host, "-p", str(cluster.port), "-U", "postgres"]


async def _sql(cluster: PostgresCluster, database: str, *statements: str) -> None:
    conn = await cluster.connect(database=database, application_name="bench-setup")
    try:
        for sql in statements:
            await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def pgbench_cluster(name: str, scale: int) -> Iterator[PostgresCluster]:
    """The embedded cluster ``name`` started, with database ``bench`` loaded by the cluster's
    own ``pgbench -i -s scale``; stopped and deleted afterwards, even after an error."""
    cluster = anyio.run(PostgresCluster.open, name)
    try:
        anyio.run(cluster.start)
        anyio.run(
            _sql, cluster, "postgres",
            f"DROP DATABASE IF EXISTS {DATABASE}", f"CREATE DATABASE {DATABASE}",
        )  # fmt: skip
        t0 = time.monotonic()
        run_tool(
            cluster, cluster.binaries.tool("pgbench"), *conn_args(cluster), "-i", "-q",
            "-s", str(scale), DATABASE,
        )  # fmt: skip
        print(f"pgbench -i -s {scale}: {time.monotonic() - t0:.1f} s", flush=True)
        yield cluster
    finally:
        anyio.run(cluster.stop)
        shutil.rmtree(cluster.root, ignore_errors=True)


def pre_run(cluster: PostgresCluster) -> None:
    """pgbench's own pre-run steps (-n skips them in pgbench) plus a CHECKPOINT."""
    anyio.run(
        _sql,
        cluster,
        DATABASE,
        "VACUUM pgbench_branches",
        "VACUUM pgbench_tellers",
        "TRUNCATE pgbench_history",
        "CHECKPOINT",
    )


# -- runs ----------------------------------------------------------------------------------------
def run_pgbench(cluster: PostgresCluster, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    pre_run(cluster)
    cmd = [
        cluster.binaries.tool("pgbench"),
        *conn_args(cluster),
        "-n",
        "-c",
        str(args.clients),
        "-j",
        str(min(2, args.clients)),
        "-T",
        str(args.seconds),
        "-M",
        mode,
        DATABASE,
    ]
    cpu0, host0, t0 = children_cpu(), host_cpu(), time.monotonic()
    out = run_tool(cluster, *cmd)
    wall = time.monotonic() - t0
    cpu = children_cpu() - cpu0
    busy = host_busy(host0, host_cpu())

    def grab(pattern: str) -> float:
        m = re.search(pattern, out, re.MULTILINE)
        if not m:
            raise RuntimeError(f"pgbench output has no {pattern!r}:\n{out}")
        return float(m.group(1))

    txns = int(grab(r"^number of transactions actually processed: (\d+)"))
    failed = re.search(r"^number of failed transactions: (\d+)", out, re.MULTILINE)
    return {
        "client": f"pgbench {mode}",
        "tps": grab(r"^tps = ([\d.]+) \(without initial connection time\)"),
        "latency_ms": grab(r"^latency average = ([\d.]+) ms"),
        "transactions": txns,
        "failed": int(failed.group(1)) if failed else 0,
        "client_cpu_s": cpu,
        "client_cpu_us_per_txn": cpu / txns * 1e6 if txns else None,
        "client_cores": cpu / wall,
        "host_busy": busy,
        "wall_s": wall,
    }


async def _drive(
    endpoint: Endpoint, library: WorkloadLibrary, spec: OltpWorkload, seconds: float
) -> dict[str, Any]:
    """One driver run in the driver process, as a run starts it (``DriverProcess`` and
    ``run_workloads``); this process only relays the samples into the sink."""
    clock = ScenarioClock()
    sink = SampleSink(None, recent_s=seconds + 3600.0)
    lags: list[ClientLagRecord] = []
    monitor = ClientLagMonitor(lags.append, window_s=1.0)
    sink.watch(monitor)
    process = await DriverProcess.spawn()
    await process.ready()
    plan = DriverPlan.for_clock(
        clock, workloads=[spec], library=library, params={}, primary=endpoint, seed=1,
        horizon_s=seconds, expected={},
    )  # fmt: skip
    host0 = host_cpu()
    clock.restart(0.0)
    child0, own0, t0 = children_cpu(), time.process_time(), time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sink.run_flusher)  # as the runner does; without parts it only drops rows
        # returns once the last arrival before stop_s has finished and the process has exited
        await run_workloads(plan, sink, process)
        tg.cancel_scope.cancel()
    monitor.close()
    wall = time.monotonic() - t0
    child_cpu = children_cpu() - child0  # the driver process, reaped by run_workloads
    relay_cpu = time.process_time() - own0  # this process: receiving and keeping the samples
    busy = host_busy(host0, host_cpu())

    frame = sink.recent(float("-inf"))
    counts = frame["outcome"].value_counts()
    n = dict(zip(counts["outcome"].to_list(), counts["count"].to_list(), strict=True))
    done = frame.filter(pl.col("outcome").is_in(["on_time", "late"]))
    completed = done.height
    admitted = frame.height - n.get("dropped", 0)
    lag = frame["client_lag_ms"].drop_nulls()

    def mean_ms(series: pl.Series, scale: float = 1.0) -> float | None:
        return float(series.mean()) * scale if completed else None  # type: ignore[arg-type]

    def q(series: pl.Series, p: float) -> float | None:
        return float(series.quantile(p)) if series.len() else None  # type: ignore[arg-type]

    cpu = child_cpu + relay_cpu
    return {
        # capacity: units completed inside the arrival window, per second of it
        "tps": done.filter(pl.col("end_s") <= seconds).height / seconds,
        # service time: connection acquired .. released (pgbench's latency has no queue wait)
        "latency_ms": mean_ms(done["end_s"] - done["start_s"], 1000.0),
        "sched_latency_ms_mean": mean_ms(done["latency_ms"]),
        "sched_latency_ms_p95": q(done["latency_ms"], 0.95),
        "client_lag_ms_p50": q(lag, 0.50),
        "client_lag_ms_p99": q(lag, 0.99),
        "client_lag_ms_max": q(lag, 1.0),
        "client_lag_warnings": len(lags),
        "arrivals": frame.height,
        "completed": completed,
        "on_time": n.get("on_time", 0),
        "late": n.get("late", 0),
        "dropped": n.get("dropped", 0),
        "errors": n.get("error", 0),
        "on_time_share": n.get("on_time", 0) / admitted if admitted else None,
        "client_cpu_s": cpu,
        "driver_cpu_s": child_cpu,
        "relay_cpu_s": relay_cpu,
        "client_cpu_us_per_txn": cpu / completed * 1e6 if completed else None,
        "driver_cpu_us_per_txn": child_cpu / completed * 1e6 if completed else None,
        "client_cores": cpu / wall,
        "host_busy": busy,
        "wall_s": wall,
    }


def run_driver(
    cluster: PostgresCluster, protocol: str, rate: float, args: argparse.Namespace
) -> dict[str, Any]:
    pre_run(cluster)
    endpoint = cluster.endpoint(DATABASE)
    spec = OltpWorkload(
        name="tpcb",
        mix={"tpcb": 1.0},
        protocol=protocol,  # type: ignore[arg-type]
        rate_per_s=rate,
        arrival="fixed",
        deadline_ms=args.deadline_ms,
        connections=args.clients,
        max_inflight=args.clients + args.extra_inflight,
        stop_s=float(args.seconds),
    )
    result = anyio.run(_drive, endpoint, tpcb_library(args.scale), spec, float(args.seconds))
    return {"client": f"dbaops {protocol}", "offered_rate": rate, **result}


async def _bare(endpoint: Endpoint, scale: int, clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` connections, each a closed loop of BEGIN, the five statements and COMMIT,
    all prepared once (asyncpg's public API), arguments drawn as pgbench does."""
    accounts, tellers, branches = 100_000 * scale, 10 * scale, scale
    sqls = ["BEGIN", *(st["sql"] for st in TPCB_STATEMENTS), "COMMIT"]
    counts: list[int] = []

    async def worker(conn: Any, stop: float, rng: random.Random) -> None:
        begin, upd_a, sel, upd_t, upd_b, ins, commit = [await conn.prepare(q) for q in sqls]
        n = 0
        while time.monotonic() < stop:
            aid, tid, bid = (
                rng.randint(1, accounts),
                rng.randint(1, tellers),
                rng.randint(1, branches),
            )
            delta = rng.randint(-5000, 5000)
            await begin.fetch()
            await upd_a.fetch(delta, aid)
            await sel.fetch(aid)
            await upd_t.fetch(delta, tid)
            await upd_b.fetch(delta, bid)
            await ins.fetch(tid, bid, aid, delta)
            await commit.fetch()
            n += 1
        counts.append(n)

    conns = [await endpoint.connect("postgres", "bench-bare") for _ in range(clients)]
    try:
        cpu0, t0 = time.process_time(), time.monotonic()
        async with anyio.create_task_group() as tg:
            for i, conn in enumerate(conns):
                tg.start_soon(worker, conn, t0 + seconds, random.Random(i))
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    finally:
        for conn in conns:
            await conn.close()
    txns = sum(counts)
    return {
        "client": "bare asyncpg",
        "tps": txns / wall,
        "latency_ms": clients * wall / txns * 1000.0 if txns else None,
        "transactions": txns,
        "client_cpu_s": cpu,
        "client_cpu_us_per_txn": cpu / txns * 1e6 if txns else None,
        "client_cores": cpu / wall,
        "wall_s": wall,
    }


def run_bare(cluster: PostgresCluster, args: argparse.Namespace) -> dict[str, Any]:
    pre_run(cluster)
    endpoint = cluster.endpoint(DATABASE)
    host0 = host_cpu()
    result = anyio.run(
        _bare, endpoint, args.scale, args.clients, float(args.seconds),
        backend="asyncio", backend_options={"use_uvloop": True},
    )  # fmt: skip
    result["host_busy"] = host_busy(host0, host_cpu())
    return result


# -- report --------------------------------------------------------------------------------------
def summarise(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Median per client over repeats of TPS, latency, CPU/txn and cores; ratios to pgbench."""
    out: dict[str, dict[str, Any]] = {}
    for client in CLIENTS:
        mine = [r for r in runs if r["client"] == client]
        row: dict[str, Any] = {"runs_tps": [round(r["tps"], 1) for r in mine]}
        keys = ["tps", "latency_ms", "client_cpu_us_per_txn", "client_cores", "host_busy"]
        if client.startswith("dbaops"):
            keys += ["on_time_share", "dropped", "errors", "offered_rate", "client_lag_ms_p99",
                     "client_lag_ms_max", "driver_cpu_us_per_txn"]  # fmt: skip
        for key in keys:
            values = [r[key] for r in mine if r.get(key) is not None]
            row[key] = statistics.median(values) if values else None
        out[client] = row
    for client in COMPARED:
        row = out[client]
        for base, tag in ((CLIENTS[0], "simple"), (CLIENTS[1], "prepared")):
            ref = out[base]
            row[f"tps_vs_{tag}"] = row["tps"] / ref["tps"] if ref["tps"] else None
            cpu, ref_cpu = row["client_cpu_us_per_txn"], ref["client_cpu_us_per_txn"]
            row[f"cpu_vs_{tag}"] = cpu / ref_cpu if cpu and ref_cpu else None
    return out


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(summary: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    print()
    print(
        f"tpcb-like, scale {args.scale}, {args.clients} clients, {args.seconds} s per run, "
        f"{args.repeats} repeat(s) (medians); {os.cpu_count()} CPUs"
    )
    head = (
        f"{'client':<17} {'TPS':>8} {'lat ms':>7} {'CPU µs/txn':>11} {'cores':>6} {'host':>5}"
        f" | {'TPS ÷simple':>11} {'÷prep':>6} | {'CPU ÷simple':>11} {'÷prep':>6}"
    )
    print(head)
    print("-" * len(head))
    for client in CLIENTS:
        r = summary[client]
        line = (
            f"{client:<17} {_f(r['tps'], '8.0f')} {_f(r['latency_ms'], '7.2f')}"
            f" {_f(r['client_cpu_us_per_txn'], '11.0f')} {_f(r['client_cores'], '6.2f')}"
            f" {_f(r['host_busy'] * 100 if r['host_busy'] is not None else None, '4.0f')}%"
        )
        if client in COMPARED:
            line += (
                f" | {_f(r['tps_vs_simple'], '11.2f')} {_f(r['tps_vs_prepared'], '6.2f')}"
                f" | {_f(r['cpu_vs_simple'], '11.2f')} {_f(r['cpu_vs_prepared'], '6.2f')}"
            )
        print(line)
    print()
    for client in DRIVER_ROWS:
        r = summary[client]
        print(
            f"{client}: offered {r['offered_rate']:.0f}/s open loop, client lag p99 "
            f"{_f(r['client_lag_ms_p99'], '.2f')} ms (max {_f(r['client_lag_ms_max'], '.1f')}), "
            f"driver process {_f(r['driver_cpu_us_per_txn'], '.0f')} µs/txn of the CPU, "
            f"on-time share of admitted {_f(r['on_time_share'], '.3f')} (deadline "
            f"{args.deadline_ms:g} ms), dropped {r['dropped']:.0f}, errors {r['errors']:.0f}"
        )
    print(
        "bare asyncpg: the floor under the driver, a closed loop of the same statements on "
        "prepared statements (uvloop, no schedule, deadlines, samples or relay)."
    )
    print(
        "lat ms: pgbench 'latency average'; dbaops mean time from connection acquire to "
        "release (service time, without the open-loop queue wait)."
    )


# -- main ----------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=int, default=20, help="duration of each run")
    p.add_argument("--scale", type=int, default=10, help="pgbench scale factor")
    p.add_argument("--clients", type=int, default=8, help="pgbench -c / driver connections")
    p.add_argument("--repeats", type=int, default=1, help="interleaved repeats (medians)")
    p.add_argument(
        "--rate-factor", type=float, default=1.3, help="driver arrivals x best pgbench TPS"
    )
    p.add_argument("--deadline-ms", type=float, default=100.0, help="driver unit deadline")
    p.add_argument(
        "--extra-inflight", type=int, default=4, help="driver max_inflight = clients + this"
    )
    p.add_argument("--out", type=Path, default=None, help="JSON path (default: results/...)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    t_start = time.monotonic()
    runs: list[dict[str, Any]] = []
    with pgbench_cluster("bench", args.scale) as cluster:
        for rep in range(args.repeats):
            this: list[dict[str, Any]] = []
            for mode in ("simple", "prepared"):
                this.append(run_pgbench(cluster, mode, args))
                print(f"[{rep + 1}] {this[-1]['client']}: {this[-1]['tps']:.0f} TPS", flush=True)
            rate = min(20000.0, args.rate_factor * max(r["tps"] for r in this))
            for protocol in ("prepared", "simple"):
                this.append(run_driver(cluster, protocol, rate, args))
                r = this[-1]
                print(
                    f"[{rep + 1}] {r['client']}: {r['tps']:.0f} TPS "
                    f"(offered {rate:.0f}/s, dropped {r['dropped']})",
                    flush=True,
                )
            this.append(run_bare(cluster, args))
            print(f"[{rep + 1}] bare asyncpg: {this[-1]['tps']:.0f} TPS", flush=True)
            for r in this:
                r["repeat"] = rep + 1
            runs.extend(this)

    summary = summarise(runs)
    print_table(summary, args)
    report = {
        "benchmark": "driver_vs_pgbench",
        "started": started.isoformat(timespec="seconds"),
        "total_s": round(time.monotonic() - t_start, 1),
        "config": {
            "seconds": args.seconds,
            "scale": args.scale,
            "clients": args.clients,
            "pgbench_threads": min(2, args.clients),
            "repeats": args.repeats,
            "rate_factor": args.rate_factor,
            "deadline_ms": args.deadline_ms,
            "max_inflight": args.clients + args.extra_inflight,
        },
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": cluster.binaries.version,
            "asyncpg": version("asyncpg"),
            "uvloop": version("uvloop"),
            "platform": platform.platform(),
        },
        "summary": summary,
        "runs": runs,
    }
    out = args.out or RESULTS_DIR / f"driver_vs_pgbench-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
