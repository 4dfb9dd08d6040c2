"""Reading what the analysis needs from a run directory (never from a database or a model).

Everything here is defensive: run directories from older engine versions lack fields the
newer verdicts carry (``safety``, ``safe_pass``, ``diagnosis``, ``cost``), killed runs lack
``verdict.json`` and ``run_end``, and records of unknown kinds are kept as generic records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbaops.records import (
    ActorRecord,
    EventRecord,
    Record,
    RunEnd,
    RunHeader,
    ToolCallRecord,
)
from dbaops.rundir import RunDir, read_trace
from dbaops.scenario.model import Scenario

__all__ = [
    "RunData",
    "discover_runs",
    "load_run",
    "run_cost",
    "run_is_replay",
    "run_model",
    "run_time_scale",
    "violating_calls",
]


@dataclass
class RunData:
    """The parsed, small parts of one run directory (samples and metrics are read lazily)."""

    path: Path
    records: list[Record]
    scenario: Scenario | None = None
    scenario_error: str | None = None
    verdict: dict[str, Any] | None = None
    header: RunHeader | None = None
    end: RunEnd | None = None
    events: list[EventRecord] = field(default_factory=list)
    actors: list[ActorRecord] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    model_calls: list[Record] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.end.status if self.end else "incomplete"

    @property
    def scheduled_horizon_s(self) -> float | None:
        """The scheduled scenario horizon (what survival time is normalised by)."""
        if self.header is not None:
            return self.header.horizon_s
        if self.scenario is not None:
            return self.scenario.horizon_s
        return None

    @property
    def scored_horizon_s(self) -> float | None:
        """The horizon Service Compliance was scored over (shorter for unfinished runs)."""
        sc = (self.verdict or {}).get("service_compliance") or {}
        h = sc.get("horizon_s")
        if isinstance(h, int | float) and h > 0:
            return float(h)
        if self.end is None or self.end.status != "completed":
            seen = [r.t_scn for r in self.records if r.t_scn is not None]
            if seen:
                return max(min(max(seen), self.scheduled_horizon_s or max(seen)), 1e-6)
        return self.scheduled_horizon_s

    @property
    def last_t_scn(self) -> float | None:
        seen = [r.t_scn for r in self.records if r.t_scn is not None]
        return max(seen) if seen else None


def discover_runs(runs_dir: Path) -> list[Path]:
    """Every directory below ``runs_dir`` (itself included) holding a ``trace.jsonl``."""
    runs_dir = Path(runs_dir)
    found = {p.parent for p in runs_dir.rglob("trace.jsonl") if p.is_file()}
    return sorted(found)


def _read_verdict(path: Path) -> dict[str, Any] | None:
    vp = RunDir(path).verdict
    if not vp.exists():
        return None
    try:
        data = json.loads(vp.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def load_run(run_dir: Path, *, rescore_missing: bool = False) -> RunData:
    """Parse trace, scenario and verdict of one run.

    With ``rescore_missing`` a run without ``verdict.json`` (a killed run) is scored in memory
    with :func:`dbaops.evaluation.score.score_run` (nothing is written).
    """
    from dbaops.evaluation.score import load_run_scenario

    path = Path(run_dir)
    records = read_trace(path)
    data = RunData(path=path, records=records)
    try:
        data.scenario = load_run_scenario(path)
    except Exception as exc:  # reported, not raised: one bad run must not stop a report
        data.scenario_error = f"{type(exc).__name__}: {exc}"
    data.verdict = _read_verdict(path)
    if data.verdict is None and rescore_missing and data.scenario is not None:
        from dbaops.evaluation.score import score_run

        try:
            data.verdict = score_run(path).model_dump(mode="json")
        except Exception:  # an unscorable run is listed as such by the report
            data.verdict = None
    for r in records:
        if isinstance(r, RunHeader) and data.header is None:
            data.header = r
        elif isinstance(r, RunEnd):
            data.end = r
        elif isinstance(r, EventRecord):
            data.events.append(r)
        elif isinstance(r, ActorRecord):
            data.actors.append(r)
        elif isinstance(r, ToolCallRecord):
            data.tool_calls.append(r)
        elif getattr(r, "kind", None) == "model_call":
            data.model_calls.append(r)
    return data


def run_model(data: RunData) -> str | None:
    """The model a run used: header field or setting ``model``, verdict, else model calls."""
    h = data.header
    if h is not None:
        extra = (h.model_extra or {}).get("model")
        if isinstance(extra, str) and extra:
            return extra
        setting = h.settings.get("model")
        if isinstance(setting, str) and setting:
            return setting
    v = (data.verdict or {}).get("model")
    if isinstance(v, str) and v:
        return v
    names: dict[str, int] = {}
    for r in data.model_calls:
        extra = r.model_extra or {}
        name = extra.get("model_name") or extra.get("model")
        if isinstance(name, str) and name:
            names[name] = names.get(name, 0) + 1
    if names:
        return max(names.items(), key=lambda kv: kv[1])[0]
    return None


def _as_int(v: Any) -> int:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0


def _calls_cost(data: RunData) -> dict[str, Any]:
    """Usage and cost summed over the run's model_call records (as score.py does)."""
    n_in = n_cache = n_out = unpriced = 0
    total = 0.0
    placeholder = False
    for r in data.model_calls:
        extra = r.model_extra or {}
        usage = extra.get("usage") or {}
        n_in += _as_int(usage.get("input_tokens"))
        n_cache += _as_int(usage.get("cached_input_tokens"))
        n_out += _as_int(usage.get("output_tokens"))
        c = extra.get("cost_usd")
        if isinstance(c, int | float) and not isinstance(c, bool):
            total += float(c)
            placeholder |= extra.get("price_placeholder") is True
        else:
            unpriced += 1
    n = len(data.model_calls)
    return {
        "input_tokens": n_in,
        "cached_input_tokens": n_cache,
        "output_tokens": n_out,
        "cost_usd": total if n and not unpriced else None,
        "n_model_calls": n,
        "unpriced_calls": unpriced,
        "price_placeholder": placeholder,
    }


def run_cost(data: RunData) -> dict[str, Any]:
    """Token usage and cost: the verdict's ``cost`` if present, else summed model calls.

    ``cost_usd`` is None (N/A) when there were no model calls or any call had no price
    (``unpriced_calls``); ``price_placeholder`` is True when the cost was computed from
    placeholder (unchecked) prices. Verdicts written before those two fields existed take
    them from the model_call records.
    """
    calls = _calls_cost(data)
    cost = (data.verdict or {}).get("cost")
    if not isinstance(cost, dict):
        return calls
    c = cost.get("cost_usd")
    unpriced = cost.get("unpriced_calls")
    n_unpriced = _as_int(unpriced) if "unpriced_calls" in cost else calls["unpriced_calls"]
    placeholder = cost.get("price_placeholder")
    return {
        "input_tokens": _as_int(cost.get("input_tokens")),
        "cached_input_tokens": _as_int(cost.get("cached_input_tokens")),
        "output_tokens": _as_int(cost.get("output_tokens")),
        "cost_usd": (
            float(c)
            if isinstance(c, int | float) and not isinstance(c, bool) and not n_unpriced
            else None
        ),
        "n_model_calls": _as_int(cost.get("calls", len(data.model_calls))),
        "unpriced_calls": n_unpriced,
        "price_placeholder": (
            placeholder if isinstance(placeholder, bool) else calls["price_placeholder"]
        ),
    }


def run_time_scale(data: RunData) -> float | None:
    """The run's ``--time-scale``: the run header's, else the verdict's (None: unknown)."""
    if data.header is not None:
        return float(data.header.time_scale)
    v = (data.verdict or {}).get("time_scale")
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def run_is_replay(data: RunData) -> bool:
    """True for a run that replays a recorded one (header ``settings.replay_of``, or an agent
    named ``*replay*``): its results are not a repeat of the live run."""
    h = data.header
    if h is None:
        return False
    return bool(h.settings.get("replay_of")) or "replay" in h.agent.lower()


def violating_calls(data: RunData) -> dict[str, list[dict[str, Any]]]:
    """call_id -> safety violations (verdict ``safety.violations`` and tool-call details)."""
    out: dict[str, list[dict[str, Any]]] = {}
    safety = (data.verdict or {}).get("safety")
    if isinstance(safety, dict):
        for v in safety.get("violations") or []:
            if isinstance(v, dict):
                out.setdefault(str(v.get("call_id", "")), []).append(v)
    for call in data.tool_calls:
        found = call.detail.get("safety_violations") if isinstance(call.detail, dict) else None
        if not found or call.call_id in out:
            continue
        items = found if isinstance(found, list) else [found]
        out[call.call_id] = [
            v if isinstance(v, dict) else {"rule_id": str(v), "call_id": call.call_id}
            for v in items
        ]
    return out
