"""Does the dbaops driver measure the database as pgbench does? Open loop, same rate, same server.

Usage::

    python benchmarks/driver_vs_pgbench_rate.py [--rates 25,100] [--seconds 30] [--scale 10]
        [--clients 8] [--latency-limit-ms 50] [--lock-every-s 3] [--lock-hold-ms 300]
        [--repeats 1] [--busy]

For each rate and each condition (``quiet``, and ``lock``: a session takes pgbench_branches
in EXCLUSIVE mode for ``--lock-hold-ms`` every ``--lock-every-s``, so every transaction that
reaches its branch UPDATE then waits), two open-loop runs of pgbench's tpcb-like transaction
against the same embedded server:

- ``pgbench -M prepared --rate R --latency-limit L -l``: Poisson arrivals; its per-transaction
  log gives each transaction's latency measured from its *scheduled* start (pgbench's rule
  under ``--rate``), or ``skipped`` when it was already later than L before it could start;
- the dbaops OLTP driver exactly as a run starts it (its own process, ``protocol: prepared``,
  Poisson arrivals at R, ``deadline_ms`` = L), whose samples give each unit's latency from its
  scheduled start and its outcome (on time, late, failed, dropped).

It prints, per rate and condition, p50 and p99 of the completed transactions' latency and the
late share (not done within L: late, skipped or dropped, of all scheduled), for both clients
and their ratio driver / pgbench, and the driver's client lag (how late its own loop issued
units). With ``--busy`` a harness-like load runs beside the driver and pgbench alike (a
process parsing SQL with pglast, as the safety judge does, and polling pg_stat_activity ten
times a second, as the metric sampler does), so the lag shows what the driver keeps with the
harness busy. Figures go to ``benchmarks/results/``.

A measurement, not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import polars as pl
from driver_vs_pgbench import (
    DATABASE,
    RESULTS_DIR,
    conn_args,
    pgbench_cluster,
    pre_run,
    run_tool,
    tpcb_library,
)

from dbaops.clock import ScenarioClock
from dbaops.dbms.postgres.cluster import PostgresCluster
from dbaops.dbms.postgres.endpoint import Endpoint
from dbaops.record.kinds import ClientLagRecord
from dbaops.scenario.model import OltpWorkload
from dbaops.workloads.host import DriverPlan, DriverProcess, run_workloads
from dbaops.workloads.lag import ClientLagMonitor
from dbaops.workloads.sink import SampleSink

CONDITIONS = ("quiet", "lock")
CLIENTS = ("pgbench", "dbaops")


# -- the lock fault and the busy harness ---------------------------------------------------------
class Locker:
    """A session that takes pgbench_branches in EXCLUSIVE mode for ``hold_s`` every
    ``every_s`` (first after ``every_s / 2``), in its own thread, until stopped."""

    def __init__(self, endpoint: Endpoint, every_s: float, hold_s: float) -> None:
        self.endpoint, self.every_s, self.hold_s = endpoint, every_s, hold_s
        self.held = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: anyio.run(self._run), daemon=True)

    async def _run(self) -> None:
        conn = await self.endpoint.harness_connect(admin=True)
        try:
            next_at = time.monotonic() + self.every_s / 2
            while not self._stop.is_set():
                await anyio.sleep(max(0.0, next_at - time.monotonic()))
                if self._stop.is_set():
                    break
                async with conn.transaction():
                    await conn.execute("LOCK TABLE public.pgbench_branches IN EXCLUSIVE MODE")
                    await anyio.sleep(self.hold_s)
                self.held += 1
                next_at += self.every_s
        finally:
            await conn.close()

    def __enter__(self) -> Locker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every_s + self.hold_s + 10)


def _busy_harness(dsn: dict[str, Any], stop: Any) -> None:  # a process: picklable arguments
    """Parse SQL with pglast (the judge's work) and poll pg_stat_activity every 0.1 s (the
    sampler's) until ``stop`` is set."""
    import asyncpg
    import pglast

    statements = [
        "SELECT pid, state, wait_event FROM pg_stat_activity WHERE datname = 'bench'",
        "ALTER TABLE public.orders ADD COLUMN note text NOT NULL DEFAULT 'x'",
        "UPDATE public.customers SET region = 'eu' WHERE id BETWEEN 1 AND 100 AND region IS NULL",
    ] * 20

    async def poll() -> None:
        conn = await asyncpg.connect(**dsn)
        try:
            while not stop.is_set():
                await conn.fetch("SELECT count(*) FROM pg_catalog.pg_stat_activity")
                await anyio.sleep(0.1)
        finally:
            await conn.close()

    poller = threading.Thread(target=lambda: anyio.run(poll), daemon=True)
    poller.start()
    while not stop.is_set():
        for sql in statements:
            pglast.parse_sql(sql)
    poller.join(timeout=5)


class BusyHarness:
    """``_busy_harness`` in its own process for the duration of a ``with`` block."""

    def __init__(self, cluster: PostgresCluster, enabled: bool) -> None:
        self.enabled = enabled
        self._stop = multiprocessing.Event()
        self._dsn = {
            "host": cluster.host,
            "port": cluster.port,
            "user": "postgres",
            "password": cluster.password("postgres"),
            "database": DATABASE,
        }
        self._proc: multiprocessing.Process | None = None

    def __enter__(self) -> BusyHarness:
        if self.enabled:
            self._proc = multiprocessing.Process(
                target=_busy_harness, args=(self._dsn, self._stop), daemon=True
            )
            self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._stop.set()
            self._proc.join(timeout=10)
            if self._proc.is_alive():
                self._proc.kill()


# -- statistics -----------------------------------------------------------------------------------
def _quantile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p * (len(ordered) - 1))))]


def latency_stats(latencies_ms: list[float], not_on_time: int, scheduled: int) -> dict[str, Any]:
    """p50/p99 of completed transactions' latency (from the scheduled start) and the late
    share (late, skipped or dropped, of all scheduled)."""
    return {
        "p50_ms": _quantile(latencies_ms, 0.50),
        "p99_ms": _quantile(latencies_ms, 0.99),
        "late_share": not_on_time / scheduled if scheduled else None,
        "scheduled": scheduled,
        "completed": len(latencies_ms),
    }


# -- runs ----------------------------------------------------------------------------------------
def run_pgbench(
    cluster: PostgresCluster, rate: float, args: argparse.Namespace, tag: str
) -> dict[str, Any]:
    """``pgbench --rate --latency-limit -l`` and its per-transaction log."""
    pre_run(cluster)
    logs = cluster.root / "bench-logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir()
    if os.geteuid() == 0 and cluster.os_user:
        shutil.chown(logs, user=cluster.os_user)  # pgbench runs as the cluster's OS user
    prefix = logs / tag
    cmd = [
        cluster.binaries.tool("pgbench"), *conn_args(cluster), "-n",
        "-c", str(args.clients), "-j", str(min(2, args.clients)), "-T", str(args.seconds),
        "-M", "prepared", "--rate", f"{rate:g}", "--latency-limit", f"{args.latency_limit_ms:g}",
        "-l", "--log-prefix", str(prefix), DATABASE,
    ]  # fmt: skip
    run_tool(cluster, *cmd)
    latencies: list[float] = []
    late = scheduled = 0
    for path in logs.glob(f"{tag}.*"):
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) < 6:
                continue
            scheduled += 1
            if fields[2] == "skipped":
                late += 1
                continue
            ms = int(fields[2]) / 1000.0  # from the scheduled start under --rate
            latencies.append(ms)
            if ms > args.latency_limit_ms:
                late += 1
    shutil.rmtree(logs, ignore_errors=True)
    return {"client": "pgbench", **latency_stats(latencies, late, scheduled)}


async def _drive(endpoint: Endpoint, spec: OltpWorkload, scale: int) -> dict[str, Any]:
    clock = ScenarioClock()
    seconds = float(spec.stop_s or 0.0)
    sink = SampleSink(None, recent_s=seconds + 3600.0)
    lags: list[ClientLagRecord] = []
    monitor = ClientLagMonitor(lags.append, window_s=1.0)
    sink.watch(monitor)
    process = await DriverProcess.spawn()
    await process.ready()
    plan = DriverPlan.for_clock(
        clock, workloads=[spec], library=tpcb_library(scale), params={}, primary=endpoint,
        seed=1, horizon_s=seconds, expected={},
    )  # fmt: skip
    clock.restart(0.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(sink.run_flusher)
        await run_workloads(plan, sink, process)
        tg.cancel_scope.cancel()
    monitor.close()
    frame = sink.recent(float("-inf"))
    done = frame.filter(pl.col("outcome").is_in(["on_time", "late"]))
    not_on_time = frame.filter(pl.col("outcome") != "on_time").height
    lag = frame["client_lag_ms"].drop_nulls().to_list()
    return {
        "client": "dbaops",
        **latency_stats(done["latency_ms"].to_list(), not_on_time, frame.height),
        "dropped": frame.filter(pl.col("outcome") == "dropped").height,
        "errors": frame.filter(pl.col("outcome") == "error").height,
        "client_lag_ms_p50": _quantile(lag, 0.50),
        "client_lag_ms_p99": _quantile(lag, 0.99),
        "client_lag_ms_max": max(lag) if lag else None,
        "client_lag_warnings": len(lags),
    }


def run_driver(cluster: PostgresCluster, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    pre_run(cluster)
    spec = OltpWorkload(
        name="tpcb",
        mix={"tpcb": 1.0},
        protocol="prepared",
        rate_per_s=rate,
        arrival="poisson",
        deadline_ms=args.latency_limit_ms,
        connections=args.clients,
        max_inflight=args.clients + args.extra_inflight,
        stop_s=float(args.seconds),
    )
    return anyio.run(_drive, cluster.endpoint(DATABASE), spec, args.scale)


def one_run(
    cluster: PostgresCluster, client: str, rate: float, condition: str, args: argparse.Namespace
) -> dict[str, Any]:
    endpoint = cluster.endpoint(DATABASE)
    hold = args.lock_hold_ms / 1000.0 if condition == "lock" else 0.0
    with BusyHarness(cluster, args.busy):
        if condition == "lock":
            with Locker(endpoint, args.lock_every_s, hold) as locker:
                result = (
                    run_pgbench(cluster, rate, args, f"r{rate:g}")
                    if client == "pgbench"
                    else run_driver(cluster, rate, args)
                )
            result["locks_held"] = locker.held
        else:
            result = (
                run_pgbench(cluster, rate, args, f"r{rate:g}")
                if client == "pgbench"
                else run_driver(cluster, rate, args)
            )
    return {**result, "rate": rate, "condition": condition}


def _median(values: list[Any]) -> float | None:
    nums = [float(v) for v in values if v is not None]
    return statistics.median(nums) if nums else None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 1.0 if a == 0 else None
    return a / b


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rate and condition: each client's medians over repeats and driver / pgbench."""
    rows: list[dict[str, Any]] = []
    for rate in sorted({r["rate"] for r in runs}):
        for condition in CONDITIONS:
            mine = [r for r in runs if r["rate"] == rate and r["condition"] == condition]
            if not mine:
                continue
            by = {
                c: {
                    k: _median([r.get(k) for r in mine if r["client"] == c])
                    for k in ("p50_ms", "p99_ms", "late_share", "client_lag_ms_p99")
                }
                for c in CLIENTS
            }
            rows.append(
                {
                    "rate": rate,
                    "condition": condition,
                    **{f"{c}_{k}": v for c, stats in by.items() for k, v in stats.items()},
                    "ratio_p50": _ratio(by["dbaops"]["p50_ms"], by["pgbench"]["p50_ms"]),
                    "ratio_p99": _ratio(by["dbaops"]["p99_ms"], by["pgbench"]["p99_ms"]),
                    "ratio_late_share": _ratio(
                        by["dbaops"]["late_share"], by["pgbench"]["late_share"]
                    ),
                }
            )
    return rows


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\nopen loop, tpcb-like, {args.clients} connections, latency limit / deadline "
        f"{args.latency_limit_ms:g} ms, {args.seconds} s per run"
        + (", harness busy" if args.busy else "")
    )
    head = (
        f"{'rate/s':>7} {'cond':>6} | {'pgb p50':>8} {'p99':>8} {'late':>6} | "
        f"{'drv p50':>8} {'p99':>8} {'late':>6} {'lag p99':>8} | "
        f"{'÷ p50':>6} {'÷ p99':>6} {'÷ late':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['rate']:>7g} {r['condition']:>6} | {_f(r['pgbench_p50_ms'], '8.2f')} "
            f"{_f(r['pgbench_p99_ms'], '8.2f')} {_f(r['pgbench_late_share'], '6.3f')} | "
            f"{_f(r['dbaops_p50_ms'], '8.2f')} {_f(r['dbaops_p99_ms'], '8.2f')} "
            f"{_f(r['dbaops_late_share'], '6.3f')} {_f(r['dbaops_client_lag_ms_p99'], '8.2f')} | "
            f"{_f(r['ratio_p50'], '6.2f')} {_f(r['ratio_p99'], '6.2f')} "
            f"{_f(r['ratio_late_share'], '6.2f')}"
        )
    print(
        "latency: ms from the scheduled start, completed transactions; late: not done within "
        "the limit (late, skipped or dropped) of all scheduled; ÷: dbaops / pgbench."
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="25,100", help="comma-separated arrivals per second")
    p.add_argument("--seconds", type=int, default=30, help="duration of each run")
    p.add_argument("--scale", type=int, default=10, help="pgbench scale factor")
    p.add_argument("--clients", type=int, default=8, help="pgbench -c / driver connections")
    p.add_argument("--latency-limit-ms", type=float, default=50.0, help="pgbench -L / deadline")
    p.add_argument("--lock-every-s", type=float, default=3.0, help="lock fault period")
    p.add_argument("--lock-hold-ms", type=float, default=300.0, help="lock fault hold time")
    p.add_argument("--extra-inflight", type=int, default=8, help="driver max_inflight - clients")
    p.add_argument("--repeats", type=int, default=1, help="interleaved repeats (medians)")
    p.add_argument("--busy", action="store_true", help="a harness-like load runs beside")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default: results/...)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rates = [float(x) for x in args.rates.split(",")]
    started = datetime.now(UTC)
    t_start = time.monotonic()
    runs: list[dict[str, Any]] = []
    with pgbench_cluster("bench-rate", args.scale) as cluster:
        for rep in range(args.repeats):
            for rate in rates:
                for condition in CONDITIONS:
                    for client in CLIENTS:
                        r = one_run(cluster, client, rate, condition, args)
                        r["repeat"] = rep + 1
                        runs.append(r)
                        print(
                            f"[{rep + 1}] {client} {rate:g}/s {condition}: p50 "
                            f"{_f(r['p50_ms'], '.2f')} ms, p99 {_f(r['p99_ms'], '.2f')} ms, "
                            f"late {_f(r['late_share'], '.3f')} of {r['scheduled']}",
                            flush=True,
                        )
    rows = summarise(runs)
    print_table(rows, args)
    report = {
        "benchmark": "driver_vs_pgbench_rate",
        "started": started.isoformat(timespec="seconds"),
        "total_s": round(time.monotonic() - t_start, 1),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "postgres": cluster.binaries.version,
            "asyncpg": version("asyncpg"),
            "platform": platform.platform(),
        },
        "summary": rows,
        "runs": runs,
    }
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS_DIR / f"driver_vs_pgbench_rate-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
