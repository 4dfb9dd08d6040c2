"""Rich live views: a running scenario (clock, phase, events fired, per-workload SLO state) and
a campaign's progress."""

from __future__ import annotations

import time

from rich.console import Group
from rich.table import Table
from rich.text import Text

from dbaops.campaign.manifest import Manifest
from dbaops.execution.runner import RunMonitor
from dbaops.workloads.sink import workload_stat


def render(monitor: RunMonitor) -> Group:
    sc = monitor.scenario
    now = monitor.clock.now() if monitor.clock else 0.0
    head = Text.assemble(
        (f"{sc.id if sc else '?'} ", "bold"),
        (f"[{monitor.phase}] ", "cyan"),
        f"t = {now:7.1f} s / {monitor.horizon_s:.0f} s",
    )
    wl = Table(title="workloads (last 10 scenario-s)", expand=False)
    for col in ("workload", "units", "on time", "p95 ms", "errors", "dropped"):
        wl.add_column(col, justify="right" if col != "workload" else "left")
    if monitor.sink is not None and sc is not None:
        mono = monitor.clock.mono() if monitor.clock else 0.0
        recent = monitor.sink.recent(now - 10.0, now=(now, mono))
        for w in sc.workloads:
            f = recent.filter(recent["workload"] == w.name)
            ratio = workload_stat(f, "on_time_ratio")
            p95 = workload_stat(f, "p95_ms")
            style = "green" if ratio is not None and ratio >= 0.99 else "red"
            wl.add_row(
                w.name,
                str(f.height),
                Text(f"{ratio:.1%}" if ratio is not None else "-", style=style),
                f"{p95:.1f}" if p95 is not None else "-",
                str((f["outcome"] == "error").sum()),
                str((f["outcome"] == "dropped").sum()),
            )
    ev = Table(title="events", expand=False)
    for col in ("t", "id", "fault", "alert / inspection", "status"):
        ev.add_column(col)
    for e in monitor.events[-8:]:
        ev.add_row(
            f"{e.at_s:.0f}", e.event_id, e.fault or "", e.alert or e.inspection or "", e.status
        )
    checks = Table(title="checks", expand=False)
    for col in ("purpose", "name", "passed", "observed"):
        checks.add_column(col)
    for c in monitor.checks[-8:]:
        checks.add_row(
            c.purpose,
            c.name,
            Text(str(c.passed), style="green" if c.passed else "red"),
            str(c.observed)[:60],
        )
    parts: list[object] = [head]
    lag = monitor.client_lag
    if lag is not None and (lag.current is not None or lag.records):
        now_text = "" if lag.current is None else f"now p99 {lag.current:.0f} ms; "
        parts.append(
            Text(
                f"warning: the workload client is behind its timetable ({now_text}worst "
                f"{lag.worst_ms:.0f} ms, {lag.records} stretch(es) over {lag.bound_ms:g} ms "
                "recorded): latencies leave it out, but the load offered is not the scenario's",
                style="yellow",
            )
        )
    agent = monitor.agent
    if agent is not None and hasattr(agent, "progress"):
        p = agent.progress()
        cost = p.get("cost_usd")
        parts.append(
            Text(
                f"agent {agent.name}: turn {p.get('turns')}/{p.get('turn_budget')}, "
                f"tokens in {p.get('input_tokens')} (cached {p.get('cached_input_tokens')}) "
                f"out {p.get('output_tokens')}, cost {'n/a' if cost is None else f'${cost:.4f}'}"
            )
        )
    return Group(*parts, wl, ev, checks)  # type: ignore[arg-type]


def campaign_view(manifest: Manifest, started: float) -> Table:
    """A campaign's progress: runs done, running, pending, failed by the harness, refused,
    and the time left at the pace so far (``started``: monotonic start time)."""
    counts = manifest.counts()
    done = counts["done"] + counts["refused"]
    left = counts["pending"] + counts["running"]
    elapsed = time.monotonic() - started
    eta = f"{elapsed / done * left / 60:.1f} min" if done else "–"
    view = Table("done", "running", "pending", "infra errors", "refused", "ETA")
    view.add_row(
        str(counts["done"]), str(counts["running"]), str(counts["pending"]),
        str(counts["infra_error"]), str(counts["refused"]), eta,
    )  # fmt: skip
    return view
