"""``read_log``: the server log of the run and the workload (application) log, as the engine and
the harness expose them (the tool opens no file)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from dbaops.clock import ScenarioClock
from dbaops.tools.base import Tool, ToolResult, ToolSpec

LineStamp = Callable[[str], tuple[float, int] | None]


@dataclass(frozen=True)
class ServerLogSource:
    """One server log ``read_log`` offers: its lines so far, how a line's time is read (None
    for a continuation line), and what it holds (for the tool's description)."""

    lines: Callable[[], list[str]]
    stamp: LineStamp
    about: str


#: What the workload source holds (every engine has it).
WORKLOAD_ABOUT = "the application's failed, late or dropped requests with their error codes"


def _server_lines(
    lines: list[str], stamp_of: LineStamp, clock: ScenarioClock, since: float | None
) -> list[str]:
    if since is None:
        return lines
    cutoff = clock.wall_start + since * clock.time_scale
    out: list[str] = []
    keep = False
    for line in lines:
        stamp = stamp_of(line)
        if stamp is not None:
            keep = stamp[0] >= cutoff - 1
        if keep:
            out.append(line)
    return out


def _workload_lines(samples: pl.DataFrame, since: float | None) -> list[str]:
    bad = samples.filter(pl.col("outcome") != "on_time")
    if since is not None:
        bad = bad.filter(pl.col("scheduled_s") >= since)
    bad = bad.sort("scheduled_s")
    return [
        f"t={r['scheduled_s']:.1f}s {r['workload']}/{r['unit']} {r['outcome']} "
        f"latency={r['latency_ms']:.0f}ms retries={r['retries']}"
        + (f" sqlstate={r['sqlstate']}" if r["sqlstate"] else "")
        + (f" error={r['error']}" if r["error"] else "")
        for r in bad.iter_rows(named=True)
    ]


def log_tool(
    servers: dict[str, ServerLogSource],
    samples: Callable[[], pl.DataFrame],
    clock: ScenarioClock,
) -> Tool:
    """``read_log`` over the server logs of the run (by source name: ``postgresql``; ``tidb``
    and ``slow``) and the workload's SLO samples (``workload``)."""
    names = [*servers, "workload"]
    first = names[0]

    async def handler(args: dict[str, Any]) -> ToolResult:
        source = str(args.get("source", first))
        pattern = args.get("pattern")
        since = args.get("since")
        limit = int(args.get("limit") or 50)
        limit = max(1, min(limit, 500))
        since_s = float(since) if since is not None else None
        if source in servers:
            log = servers[source]
            lines = _server_lines(log.lines(), log.stamp, clock, since_s)
        elif source == "workload":
            lines = _workload_lines(samples(), since_s)
        else:
            choices = " or ".join(repr(n) for n in names)
            return ToolResult(
                ok=False,
                error=f"unknown source {source!r}",
                observation=f"error: source must be {choices}",
            )
        if pattern:
            try:
                rx = re.compile(str(pattern), re.IGNORECASE)
            except re.error as exc:
                return ToolResult(
                    ok=False, error=str(exc), observation=f"error: bad pattern: {exc}"
                )
            lines = [ln for ln in lines if rx.search(ln)]
        total = len(lines)
        shown = lines[-limit:]
        head = f"{total} matching line(s)" + (
            f"; showing the last {len(shown)}" if total > limit else ""
        )
        return ToolResult(
            ok=True,
            observation="\n".join([head, *shown]),
            detail={"source": source, "matched": total},
        )

    about = {**{n: s.about for n, s in servers.items()}, "workload": WORKLOAD_ABOUT}
    spec = ToolSpec(
        name="read_log",
        description=(
            "Read logs. source: "
            + " or ".join(f"'{n}' ({a})" for n, a in about.items())
            + ". Optional regex pattern, since (scenario seconds) and limit (last N lines)."
        ),
        parameters={
            "type": "object",
            "properties": {
                "source": {"type": "string", "enum": names},
                "pattern": {"type": "string"},
                "since": {"type": "number"},
                "limit": {"type": "integer"},
            },
            "required": ["source"],
        },
    )
    return Tool(spec=spec, handler=handler)
