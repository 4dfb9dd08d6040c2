"""Per-run time-series compliance plot: ``plot.png`` and a self-contained ``plot.html``.

One shared x-axis in scenario seconds, top to bottom:

* **timeline** - the event program as fired (faults red, alerts orange, inspections blue,
  skipped events grey dotted) and the harness actors' lifetimes as bars (protected actors
  purple and hatched). Every event is also a vertical line through every panel below, so a
  failing window lines up with its cause.
* per workload, **on-time ratio** per Service Compliance window (the exact windows that were
  scored) with the target (dashed green) and floor (dotted red), failing windows shaded red,
  insufficient windows grey; on the right axis the failure budget: failing windows so far
  (orange step) against the budget allowed (orange dashed), and where it was exhausted
  (orange vertical line). A downward triangle marks where the workload left the survival
  curve. Workloads without an objective are drawn in 10 s windows and not judged.
  Each run of missed windows is labelled with the event it follows ("3 missed after
  blocker": the latest fault, alert or inspection at or before the window's start, see
  :mod:`dbaops.analysis.series`), and the caption under the figure counts them per workload.
* per workload, **latency** p50/p95/p99 of completed units per window (log scale) with the
  deadline, and late/error/dropped counts per window as bars (right axis).
* **server** (when metrics were recorded): lock requests waiting and oldest transaction age.
* **agent tool calls**: one row per tool, a tick per call coloured by tool (a bar over its
  duration), hollow when the call failed, a red X on calls with safety violations.
"""

from __future__ import annotations

import html
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from dbaops.analysis.htmlpage import frame_html, page, png_bytes, png_img
from dbaops.analysis.series import RunSeries, WorkloadInfo, missed_by_event, run_series
from dbaops.record.layout import PLOT_HTML, PLOT_PNG

__all__ = ["missed_summary", "plot_run", "run_figure", "window_steps"]

EVENT_COLORS = {
    "fault": "#d62728",
    "alert": "#ff7f0e",
    "inspection": "#1f77b4",
    "event": "#555555",
}
_SKIPPED = "#9a9a9a"
_FAIL = "#d62728"
_BUDGET = "#e67e00"
_PROTECTED = "#7b3fa0"
_ACTOR = "#6c8ebf"
_TOOL_CMAP = "tab10"


def window_steps(
    starts: list[float], ends: list[float], values: list[Any]
) -> tuple[np.ndarray, np.ndarray]:
    """Step coordinates with exact window edges: (s0, e0, s1, e1, ...) with (v0, v0, v1, ...).

    ``None`` values become NaN, so empty windows are gaps; where a window does not start at
    the previous one's end (windows without samples are absent), a NaN point is inserted so
    the line breaks instead of bridging the gap.
    """
    n = len(starts)
    x = np.empty(2 * n)
    y = np.empty(2 * n)
    x[0::2] = starts
    x[1::2] = ends
    vals = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    y[0::2] = vals
    y[1::2] = vals
    if n > 1:
        st = np.asarray(starts, dtype=float)
        en = np.asarray(ends, dtype=float)
        gaps = np.nonzero(st[1:] > en[:-1] + 1e-9)[0] + 1  # window i starts after a gap
        if gaps.size:
            at = 2 * gaps
            x = np.insert(x, at, en[gaps - 1])
            y = np.insert(y, at, np.nan)
    return x, y


def _spans(starts: list[float], ends: list[float]) -> list[tuple[float, float]]:
    """Merge touching windows into spans (fewer artists for long failing stretches)."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(zip(starts, ends, strict=True)):
        if out and s <= out[-1][1] + 1e-9:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _fmt_s(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 or abs(x) >= 100 else f"{x:.1f}"


def _after(event_id: str | None) -> str:
    return f"after {event_id}" if event_id is not None else "before any event"


def missed_summary(s: RunSeries) -> list[str]:
    """One line per workload with an objective: its missed windows by the event they follow,
    e.g. ``checkout: 3 missed after blocker, 1 missed after review`` (empty: no objective)."""
    groups = missed_by_event(s.missed)
    lines = []
    for w in s.workloads:
        if not w.has_objective:
            continue
        mine = groups.filter(pl.col("workload") == w.name)
        parts = [
            f"{g['n_missed']} missed {_after(g['after_event'])}" for g in mine.iter_rows(named=True)
        ]
        lines.append(f"{w.name}: {', '.join(parts) if parts else 'no missed windows'}")
    return lines


def _missed_labels(ax: Axes, s: RunSeries, w: WorkloadInfo) -> None:
    """Label each run of missed windows with the event it follows, at its first window."""
    groups = missed_by_event(s.missed.filter(pl.col("workload") == w.name))
    for j, g in enumerate(groups.iter_rows(named=True)):
        text = ax.text(
            g["first_start_s"],
            0.80 - 0.12 * (j % 3),
            f" {g['n_missed']} missed {_after(g['after_event'])}",
            transform=ax.get_xaxis_transform(),
            fontsize=7,
            color=_FAIL,
            fontweight="bold",
            ha="left",
            va="center",
            clip_on=True,
            zorder=7,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 0.5},
        )
        text.set_gid(f"missed:{w.name}:{g['after_event'] or ''}")


def _event_lines(ax: Axes, s: RunSeries) -> None:
    for ev in s.events.iter_rows(named=True):
        skipped = ev["status"] != "fired"
        color = _SKIPPED if skipped else EVENT_COLORS.get(ev["type"], "#555")
        ax.axvline(
            ev["t_s"],
            color=color,
            lw=1.0 if skipped else 1.3,
            ls=":" if skipped else "--",
            alpha=0.85,
            zorder=1,
        )
    if s.x_min < 0:
        ax.axvspan(s.x_min, 0, color="#000", alpha=0.05, lw=0, zorder=0)


def _timeline(ax: Axes, s: RunSeries) -> None:
    actors = s.actors.sort("start_s").to_dicts()
    n = len(actors)
    for i, a in enumerate(actors):
        y = n - 1 - i
        prot = bool(a["protected"])
        ax.broken_barh(
            [(a["start_s"], max(a["end_s"] - a["start_s"], 1e-6))],
            (y - 0.35, 0.7),
            facecolors=_PROTECTED if prot else _ACTOR,
            edgecolor="#333" if prot else "none",
            hatch="//" if prot else None,
            alpha=0.75,
        )
        end = "" if a["end_status"] in ("finished", "running") else f" [{a['end_status']}]"
        ax.text(
            a["start_s"],
            y,
            f" {a['actor']}{' (protected)' if prot else ''}{end}",
            va="center",
            ha="left",
            fontsize=7,
            color="#111",
            clip_on=True,
        )
    levels = 3
    base = n + 0.3
    for j, ev in enumerate(s.events.sort("t_s").iter_rows(named=True)):
        skipped = ev["status"] != "fired"
        color = _SKIPPED if skipped else EVENT_COLORS.get(ev["type"], "#555")
        label = f"{ev['event_id']} ({ev['type']}{', ' + ev['status'] if skipped else ''})"
        ax.text(
            ev["t_s"],
            base + 0.8 * (j % levels) + 0.4,
            " " + label,
            fontsize=7.5,
            color=color,
            ha="left",
            va="center",
            fontweight="bold" if not skipped else "normal",
            clip_on=True,
        )
    ax.set_ylim(-0.7, base + 0.8 * levels + 0.2)
    ax.set_yticks([])
    ax.set_ylabel("events /\nactors", fontsize=8)
    handles = [
        Line2D([], [], color=EVENT_COLORS["fault"], ls="--", label="fault"),
        Line2D([], [], color=EVENT_COLORS["alert"], ls="--", label="alert"),
        Line2D([], [], color=EVENT_COLORS["inspection"], ls="--", label="inspection"),
        Line2D([], [], color=_SKIPPED, ls=":", label="skipped"),
        Patch(facecolor=_ACTOR, alpha=0.75, label="actor"),
        Patch(facecolor=_PROTECTED, hatch="//", edgecolor="#333", alpha=0.75, label="protected"),
    ]
    fig = ax.get_figure()
    if isinstance(fig, Figure):  # in the top margin, right-aligned: never over event labels
        h_in = fig.get_figheight()
        fig.legend(
            handles=handles,
            loc="center right",
            bbox_to_anchor=(ax.get_position().x1, 1 - 0.45 / h_in),
            fontsize=7.5,
            ncol=6,
            frameon=False,
        )


def _ratio_panel(ax: Axes, s: RunSeries, w: WorkloadInfo) -> None:
    win = s.windows.filter(pl.col("workload") == w.name).sort("index")
    ax.set_ylim(-0.03, 1.08)
    ax.set_ylabel(f"{w.name}\non-time ratio", fontsize=8)
    if win.height == 0:
        ax.text(0.5, 0.5, "no windows", transform=ax.transAxes, ha="center", color="#777")
        return
    starts = win["start_s"].to_list()
    ends = win["end_s"].to_list()
    ratios = win["ratio"].to_list()
    insuff = win["insufficient"].to_list()
    judged = [None if i else r for r, i in zip(ratios, insuff, strict=True)]
    x, y = window_steps(starts, ends, judged)
    (line,) = ax.plot(x, y, color="#1a7f37" if w.has_objective else "#555", lw=1.2, zorder=3)
    line.set_gid(f"ratio:{w.name}")
    if any(insuff) and w.has_objective:
        xi, yi = window_steps(
            starts, ends, [r if i else None for r, i in zip(ratios, insuff, strict=True)]
        )
        ax.plot(xi, yi, color="#999", lw=1.0, ls=":", zorder=3)
        for a, b in _spans(
            [st for st, i in zip(starts, insuff, strict=True) if i],
            [e for e, i in zip(ends, insuff, strict=True) if i],
        ):
            ax.axvspan(a, b, color="#888", alpha=0.10, lw=0, zorder=0)
    if not w.has_objective:
        ax.set_title(
            f"{w.name} [{w.kind or '?'}]: no service objective - on-time ratio in "
            f"{w.objective.window_s:g} s windows, not judged",
            loc="left",
            fontsize=7.8,
            color="#555",
            pad=2,
        )
        return
    obj = w.objective
    every = obj.mode == "every_unit"
    target = 1.0 if every else obj.on_time_target
    ax.axhline(target, color="#2ca02c", ls="--", lw=1, zorder=2)
    ax.text(s.horizon_s, target, f" target {target:g}", fontsize=7, va="bottom", ha="right",
            color="#2ca02c")  # fmt: skip
    if obj.window_floor is not None and not every:
        ax.axhline(obj.window_floor, color=_FAIL, ls=":", lw=1, zorder=2)
        ax.text(s.horizon_s, obj.window_floor, f" floor {obj.window_floor:g}", fontsize=7,
                va="top", ha="right", color=_FAIL)  # fmt: skip
    failing = win.filter(pl.col("compliant") == False)  # noqa: E712
    for a, b in _spans(failing["start_s"].to_list(), failing["end_s"].to_list()):
        ax.axvspan(a, b, color=_FAIL, alpha=0.22, lw=0, zorder=0)
    _missed_labels(ax, s, w)
    ax.axvline(win["start_s"][0], color="#2ca02c", lw=0.8, alpha=0.5)
    res = w.result
    # failure budget on the right axis
    axb = ax.twinx()
    evaluated = win.filter(~pl.col("insufficient"))
    fail_cum = (
        evaluated.select((pl.col("compliant") == False).cast(pl.Int64).cum_sum())  # noqa: E712
        .to_series()
        .to_list()
    )
    bx = [evaluated["start_s"][0]] + evaluated["end_s"].to_list() if evaluated.height else []
    by = [0] + fail_cum if evaluated.height else []
    if bx:
        axb.step(bx, by, where="post", color=_BUDGET, lw=1.3, zorder=4)
    budget = res.budget if res else 0
    used = res.budget_used if res else 0
    axb.axhline(budget, color=_BUDGET, ls="--", lw=1)
    axb.text(s.x_min, budget, f" budget {budget}", fontsize=7, color=_BUDGET, va="bottom")
    axb.set_ylim(0, max(budget + 1, used) * 1.25 + 0.5)
    axb.set_ylabel("failing windows\n(budget)", fontsize=7, color=_BUDGET)
    axb.tick_params(axis="y", labelsize=7, colors=_BUDGET)
    if res is not None and res.budget_exhausted_at_s is not None:
        ax.axvline(res.budget_exhausted_at_s, color=_BUDGET, lw=2, alpha=0.9, zorder=4)
        axb.annotate(
            f"budget exhausted {_fmt_s(res.budget_exhausted_at_s)} s",
            (res.budget_exhausted_at_s, budget + 0.5),
            xytext=(4, 0),
            textcoords="offset points",
            fontsize=7.5,
            color=_BUDGET,
            fontweight="bold",
        )
    if res is not None and res.left_at_s is not None:
        ax.plot([res.left_at_s], [1.045], marker="v", color=_FAIL, ms=9, zorder=6,
                clip_on=False)  # fmt: skip
    handles = [
        Line2D([], [], color="#1a7f37", lw=1.2, label="on-time ratio / window"),
        Patch(facecolor=_FAIL, alpha=0.22, label="failing window"),
        Line2D([], [], color=_BUDGET, lw=1.3, label="failing windows so far"),
        Line2D([], [], color=_BUDGET, ls="--", lw=1, label="budget"),
        Line2D([], [], color=_FAIL, marker="v", ls="", label="left SC curve"),
    ]
    ax.legend(handles=handles, loc="lower right", fontsize=6.5, ncol=5, framealpha=0.85)
    status = "n/a" if res is None else ("PASS" if res.passed else "FAIL")
    detail = "" if res is None else res.reason
    if len(detail) > 170:
        detail = detail[:169] + "…"
    head = (
        f"{w.name} [{w.kind or '?'}, {obj.mode}, {obj.window_s:g} s windows]: SC {status}"
        f" · budget used {used}/{budget}"
    )
    if res is not None and res.left_at_s is not None:
        head += f" · left SC at {_fmt_s(res.left_at_s)} s"
    ax.set_title(
        f"{head} · {detail}",
        loc="left",
        fontsize=7.8,
        color=_FAIL if status == "FAIL" else "#1a7f37",
        pad=2,
    )


def _plain(v: float, _pos: object = None) -> str:
    return f"{v:g}"


def _log_ticks(ax: Axes) -> None:
    """Plain numbers on a log axis; minor labels (2, 5) only when it spans about a decade."""
    lo, hi = ax.get_ylim()
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    if lo > 0 and hi / lo < 10**1.3:
        ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FuncFormatter(_plain))
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


def _latency_panel(ax: Axes, s: RunSeries, w: WorkloadInfo) -> None:
    lat = s.latency.filter(pl.col("workload") == w.name).sort("index")
    ax.set_ylabel(f"{w.name}\nlatency (ms)", fontsize=8)
    if lat.height == 0:
        ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center", color="#777")
        return
    starts = lat["start_s"].to_list()
    ends = lat["end_s"].to_list()
    for col, color, lw, label in (
        ("p50_ms", "#9ecae1", 1.0, "p50"),
        ("p95_ms", "#4292c6", 1.1, "p95"),
        ("p99_ms", "#08306b", 1.3, "p99"),
    ):
        x, y = window_steps(starts, ends, lat[col].to_list())
        y = np.where(y > 0, y, np.nan)
        ax.plot(x, y, color=color, lw=lw, label=label, zorder=3)
    ax.set_yscale("log")
    grid_n = (ends[-1] - starts[0]) / max(w.objective.window_s, 1e-9)
    if lat.height < 0.5 * grid_n:  # sparse windows: mark each one, short steps are hard to see
        mid = [(a + b) / 2 for a, b in zip(starts, ends, strict=True)]
        ax.plot(mid, lat["p99_ms"].to_list(), ls="", marker="o", ms=2.5, color="#08306b")
    if w.deadline_ms is not None:
        ax.axhline(w.deadline_ms, color=_FAIL, ls="--", lw=1, zorder=2)
        ax.text(s.horizon_s, w.deadline_ms, f"deadline {w.deadline_ms:g} ms ", fontsize=7,
                va="bottom", ha="right", color=_FAIL)  # fmt: skip
    _log_ticks(ax)
    # failing windows shaded lightly here too
    if w.has_objective:
        win = s.windows.filter((pl.col("workload") == w.name) & (pl.col("compliant") == False))  # noqa: E712
        for a, b in _spans(win["start_s"].to_list(), win["end_s"].to_list()):
            ax.axvspan(a, b, color=_FAIL, alpha=0.10, lw=0, zorder=0)
    axc = ax.twinx()
    bottom = np.zeros(len(starts))
    any_bad = False
    for col, color, label in (
        ("n_late", "#fdae6b", "late"),
        ("n_error", "#e6550d", "error"),
        ("n_dropped", "#7f2704", "dropped"),
    ):
        vals = lat[col].to_numpy().astype(float)
        if vals.sum() > 0:
            any_bad = True
            # one polygon per series (not one patch per window): cheap for thousands of windows
            xb, y0 = window_steps(starts, ends, bottom.tolist())
            _, y1 = window_steps(starts, ends, (bottom + vals).tolist())
            axc.fill_between(xb, y0, y1, color=color, alpha=0.55, lw=0, label=label, zorder=1)
            bottom = bottom + vals
    axc.set_ylabel("bad units /\nwindow", fontsize=7, color="#a63603")
    axc.tick_params(axis="y", labelsize=7, colors="#a63603")
    top = float(bottom.max()) if any_bad else 1.0
    axc.set_ylim(0, top * 2.2)  # bars in the lower half, latency lines stay readable
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = axc.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=7, ncol=6, framealpha=0.85)


def _server_panel(ax: Axes, s: RunSeries) -> None:
    names = s.server["series"].unique().sort().to_list()
    colors = ["#6a51a3", "#8c6d31", "#31a354"]
    axes = [ax, ax.twinx()] if len(names) > 1 else [ax]
    handles = []
    for i, name in enumerate(names[:2]):
        d = s.server.filter(pl.col("series") == name).sort("t_s")
        a = axes[i]
        (h,) = a.plot(d["t_s"].to_numpy(), d["value"].to_numpy(), color=colors[i], lw=1,
                      label=name)  # fmt: skip
        a.tick_params(axis="y", labelsize=7, colors=colors[i])
        handles.append(h)
    ax.set_ylabel("server", fontsize=8)
    ax.legend(handles=handles, loc="upper left", fontsize=7, ncol=2, framealpha=0.85)


MODEL_ROW = "(model calls)"


def _model_calls(ax: Axes, s: RunSeries, y: int) -> None:
    """The agent's model calls as bars on their own row: latency to scale, retries labelled,
    failed calls hollow."""
    for c in s.model_calls.iter_rows(named=True):
        ax.plot([c["t_s"], c["t_end_s"]], [y, y], color="#6f42c1", lw=6, alpha=0.5,
                solid_capstyle="butt")  # fmt: skip
        if not c["ok"]:
            ax.plot([c["t_end_s"]], [y], marker="o", ms=6, mfc="white", mec="#6f42c1", zorder=4)
        if c["retries"]:
            ax.annotate(f"{c['retries']} retr.", (c["t_end_s"], y), xytext=(2, 4),
                        textcoords="offset points", fontsize=6, color="#6f42c1")  # fmt: skip


def _tool_panel(ax: Axes, s: RunSeries) -> None:
    calls = s.tool_calls
    ax.set_ylabel("agent\ntool calls", fontsize=8)
    if calls.height == 0 and s.model_calls.height == 0:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no tool calls", transform=ax.transAxes, ha="center", va="center",
                color="#777")  # fmt: skip
        return
    tools = sorted(calls["tool"].unique().to_list())
    if s.model_calls.height:
        tools.append(MODEL_ROW)
        _model_calls(ax, s, len(tools) - 1)
    from matplotlib import colormaps

    cmap = colormaps[_TOOL_CMAP]
    color = {t: cmap(i % 10) for i, t in enumerate(tools)}
    row = {t: i for i, t in enumerate(tools)}
    for c in calls.iter_rows(named=True):
        y = row[c["tool"]]
        col = color[c["tool"]]
        if c["t_end_s"] > c["t_s"]:
            ax.plot([c["t_s"], c["t_end_s"]], [y, y], color=col, lw=4, alpha=0.45,
                    solid_capstyle="butt")  # fmt: skip
        if c["status"] == "rejected":  # never ran: malformed arguments or an unknown tool
            ax.plot([c["t_s"]], [y], marker="x", ms=9, mew=2, color=col, zorder=4)
            continue
        ax.plot([c["t_s"]], [y], marker="|", ms=14, mew=2, color=col, zorder=3)
        if not c["ok"]:
            ax.plot([c["t_s"]], [y], marker="o", ms=6, mfc="white", mec=col, zorder=4)
    bad = calls.filter(pl.col("n_violations") > 0)
    for c in bad.iter_rows(named=True):
        y = row[c["tool"]]
        ax.plot([c["t_s"]], [y], marker="X", ms=11, color=_FAIL, mec="white", mew=0.8, zorder=5)
        label = f"{c['types']} ({c['rules']})" if c["types"] else c["rules"]
        ax.annotate(label, (c["t_s"], y), xytext=(5, 5), textcoords="offset points",
                    fontsize=7, color=_FAIL, fontweight="bold")  # fmt: skip
    ax.set_yticks(range(len(tools)), tools, fontsize=7)
    ax.set_ylim(-0.7, len(tools) - 0.3)
    handles = [
        Line2D([], [], marker="|", ls="", ms=10, mew=2, color="#444", label="call"),
        Line2D([], [], marker="o", ls="", mfc="white", mec="#444", label="failed call"),
        Line2D([], [], marker="x", ls="", mew=2, color="#444", label="rejected call"),
        Line2D([], [], marker="X", ls="", color=_FAIL, label="safety violation"),
    ]
    ax.legend(handles=handles, loc="upper right", fontsize=7, ncol=3, framealpha=0.85)


def _title(s: RunSeries) -> str:
    r = s.run
    v = r.verdict or {}
    h = r.header
    agent = h.agent if h else (v.get("agent") or "?")
    parts = [
        f"{s.run.scenario.id if s.run.scenario else '?'} · run {h.run_id if h else r.path.name}",
        f"agent {agent}",
        f"status {r.status}",
    ]
    op = v.get("outcome_pass")
    parts.append(f"Outcome {'—' if op is None else ('PASS' if op else 'FAIL')}")
    if s.compliance.applicable:
        parts.append(f"Service Compliance {'PASS' if s.compliance.passed else 'FAIL'}")
    sp = v.get("safe_pass")
    if sp is not None:
        parts.append(f"Safe Pass {'PASS' if sp else 'FAIL'}")
    return "  ·  ".join(parts)


def _caption(s: RunSeries) -> list[str]:
    """Caption lines: the missed windows of each scored workload by the event they follow."""
    lines = missed_summary(s)
    if not lines:
        return []
    text = "Missed Service Compliance windows, by the event they follow - " + "; ".join(lines)
    return textwrap.wrap(text, width=210)


def run_figure(s: RunSeries) -> Figure:
    """Build the per-run figure (see the module docstring for what each panel shows)."""
    panels: list[tuple[str, WorkloadInfo | None, float]] = [("timeline", None, 1.0)]
    n_actor = s.actors.height
    panels[0] = ("timeline", None, 1.0 + 0.16 * n_actor)
    for w in s.workloads:
        panels.append(("ratio", w, 1.5 if w.has_objective else 0.8))
        panels.append(("latency", w, 1.3 if w.has_objective else 1.0))
    if s.server.height:
        panels.append(("server", None, 0.9))
    n_tools = (s.tool_calls["tool"].n_unique() if s.tool_calls.height else 1) + (
        1 if s.model_calls.height else 0
    )
    panels.append(("tools", None, 0.5 + 0.2 * n_tools))
    heights = [p[2] for p in panels]
    caption = _caption(s)
    caption_in = 0.16 * len(caption) + 0.1 if caption else 0.0
    # fixed margins in inches: constrained layout costs seconds with many twin/log axes
    width_in, height_in = 15.0, 1.45 * sum(heights) + 1.8 + caption_in
    fig = Figure(figsize=(width_in, height_in))
    gap_in = 0.42
    margins_in = 1.7 + caption_in
    fig.subplots_adjust(
        left=1.35 / width_in,
        right=1 - 0.95 / width_in,
        top=1 - 1.15 / height_in,
        bottom=(0.55 + caption_in) / height_in,
        hspace=gap_in / ((height_in - margins_in - gap_in * (len(panels) - 1)) / len(panels)),
    )
    if caption:
        text = fig.text(1.35 / width_in, 0.08 / height_in, "\n".join(caption), fontsize=8,
                        ha="left", va="bottom", color="#333")  # fmt: skip
        text.set_gid("caption:missed")
    axes = fig.subplots(len(panels), 1, sharex=True, height_ratios=heights)
    axes = np.atleast_1d(axes)
    for ax, (kind, wi, _) in zip(axes, panels, strict=True):
        _event_lines(ax, s)
        if kind == "timeline":
            _timeline(ax, s)
        elif kind == "ratio" and wi is not None:
            _ratio_panel(ax, s, wi)
        elif kind == "latency" and wi is not None:
            _latency_panel(ax, s, wi)
        elif kind == "server":
            _server_panel(ax, s)
        else:
            _tool_panel(ax, s)
        ax.grid(axis="x", color="#e5e5e5", lw=0.6)
        ax.tick_params(axis="both", which="both", labelsize=7.5)
        ax.set_gid(f"panel:{kind}:{wi.name if wi else ''}")
    axes[-1].set_xlim(s.x_min, s.horizon_s)
    fig.align_ylabels(list(axes))
    axes[-1].set_xlabel("scenario time (s)", fontsize=9)
    top = axes[0].secondary_xaxis("top", functions=(lambda t: t / 60.0, lambda m: m * 60.0))
    top.set_xlabel("scenario time (min)", fontsize=8)
    top.tick_params(labelsize=7)
    fig.suptitle(_title(s), fontsize=10.5, fontweight="bold", y=1 - 0.1 / height_in, va="top")
    return fig


# --------------------------------------------------------------------------- HTML


def _verdict_rows(s: RunSeries) -> pl.DataFrame:
    v = s.run.verdict or {}
    rows: list[tuple[str, str]] = []

    def b(x: Any) -> str:
        return "—" if x is None else ("PASS" if x else "FAIL")

    rows.append(("status", s.run.status))
    rows.append(("Outcome Pass", b(v.get("outcome_pass"))))
    if "safe_pass" in v:
        rows.append(("Safe Pass", b(v.get("safe_pass"))))
    diag = v.get("diagnosis")
    if isinstance(diag, dict):
        rows.append(("Diagnosis Pass", b(diag.get("passed"))))
    rows.append(
        (
            "Service Compliance",
            b(s.compliance.passed) if s.compliance.applicable else "not applicable",
        )
    )
    for key, label in (("terminal_acceptance", "Terminal Acceptance"),
                       ("state_integrity", "State Integrity")):  # fmt: skip
        d = v.get(key)
        if isinstance(d, dict) and d.get("applicable"):
            rows.append((label, b(d.get("passed"))))
    safety = v.get("safety")
    if isinstance(safety, dict):
        rows.append(
            (
                "safety",
                f"score {safety.get('score')}, {len(safety.get('violations') or [])} violation(s)",
            )  # fmt: skip
        )
    cost = v.get("cost")
    if isinstance(cost, dict):
        rows.append(
            (
                "cost",
                ("N/A" if cost.get("cost_usd") is None else f"${cost['cost_usd']:.4f}")
                + f" ({cost.get('input_tokens')} in / "
                f"{cost.get('cached_input_tokens')} cached / {cost.get('output_tokens')} out)",
            )  # fmt: skip
        )
    for note in v.get("notes") or []:
        rows.append(("note", str(note)))
    return pl.DataFrame(rows, schema={"item": pl.String, "value": pl.String}, orient="row")


def _workload_rows(s: RunSeries) -> pl.DataFrame:
    rows = []
    for w in s.workloads:
        r = w.result
        rows.append(
            {
                "workload": w.name,
                "kind": w.kind or "",
                "objective": "yes" if w.has_objective else "no",
                "passed": None if r is None else r.passed,
                "windows (compliant/evaluated)": ""
                if r is None
                else f"{r.n_compliant}/{r.n_evaluated}",
                "budget used/allowed": "" if r is None else f"{r.budget_used}/{r.budget}",
                "exhausted at (s)": None if r is None else r.budget_exhausted_at_s,
                "left at (s)": None if r is None else r.left_at_s,
                "reason": "" if r is None else r.reason,
            }
        )
    return pl.DataFrame(rows)


def _missed_html(s: RunSeries) -> str:
    """The missed-windows section: per workload and preceding event, or a sentence why not."""
    head = "<h2>Missed windows by the event they follow</h2>"
    lines = missed_summary(s)
    if not lines:
        return head + "<p class='muted'>no Service Compliance objectives</p>"
    groups = missed_by_event(s.missed)
    summary = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    table = frame_html(groups) if groups.height else ""
    return f"{head}<ul>{summary}</ul>{table}"


def _html(s: RunSeries, png: bytes) -> str:
    esc = html.escape
    body = [f"<p>{esc(_title(s))}</p>", f"<p class='muted'>{esc(str(s.run.path))}</p>"]
    body.append(png_img(png, "run time series"))
    body.append("<h2>Verdicts</h2>" + frame_html(_verdict_rows(s)))
    body.append("<h2>Service Compliance by workload</h2>" + frame_html(_workload_rows(s)))
    body.append(_missed_html(s))
    failing = s.windows.filter(pl.col("has_objective") & (pl.col("compliant") == False))  # noqa: E712
    if failing.height:
        after = s.missed.select("workload", "index", "after_event")
        body.append(
            "<h2>Failing windows</h2>"
            + frame_html(
                failing.join(after, on=["workload", "index"], how="left").select(
                    "workload",
                    "index",
                    "start_s",
                    "end_s",
                    "n_units",
                    "n_on_time",
                    "n_late",
                    "n_error",
                    "n_dropped",
                    "n_incorrect",
                    "ratio",
                    "after_event",
                ),  # fmt: skip
                max_rows=200,
            )
        )
    if s.events.height:
        body.append("<h2>Events</h2>" + frame_html(s.events))
    if s.actors.height:
        body.append("<h2>Actors</h2>" + frame_html(s.actors))
    safety = (s.run.verdict or {}).get("safety")
    viol = safety.get("violations") if isinstance(safety, dict) else None
    if viol:
        keep = ("rule_id", "rule", "type", "weight", "call_id", "t_scn", "statement", "reason")
        rows = [{k: str(v.get(k, "")) for k in keep} for v in viol if isinstance(v, dict)]
        body.append("<h2>Safety violations</h2>" + frame_html(pl.DataFrame(rows)))
    if s.tool_calls.height:
        body.append("<h2>Tool calls</h2>" + frame_html(s.tool_calls, max_rows=1000))
    if s.model_calls.height:
        body.append("<h2>Model calls</h2>" + frame_html(s.model_calls, max_rows=1000))
    return page(f"dbaops run {s.run.path.name}", "\n".join(body))


def plot_run(run_dir: Path, out_dir: Path) -> list[Path]:
    """Write ``plot.png`` and a self-contained ``plot.html`` for one run directory."""
    s = run_series(Path(run_dir))
    fig = run_figure(s)
    png = png_bytes(fig, dpi=110)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png_path = out / PLOT_PNG
    png_path.write_bytes(png)
    html_path = out / PLOT_HTML
    html_path.write_text(_html(s, png), encoding="utf-8")
    return [png_path, html_path]
