"""``load_run``: the typed view of one run directory that scoring, replay, plots and reports
read (never a database or a model).

Everything here is defensive: run directories from older engine versions lack fields the
newer verdicts carry (``safety``, ``safe_pass``, ``diagnosis``, ``cost``), killed runs lack
``verdict.json`` and ``run_end``, and records of unknown kinds are kept as generic records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from dbaops.record.cost import CostSummary, call_record, summarize_cost
from dbaops.record.kinds import (
    ActorRecord,
    CallRecord,
    EventRecord,
    Record,
    RunEnd,
    RunHeader,
    ToolCallRecord,
)
from dbaops.record.layout import RunDir
from dbaops.record.tables import read_metrics, read_samples
from dbaops.record.trace import read_trace
from dbaops.scenario.model import Scenario

__all__ = [
    "RunData",
    "load_run",
    "load_run_scenario",
    "run_cost",
    "run_is_replay",
    "run_model",
    "run_time_scale",
    "violating_calls",
]


@dataclass
class RunData:
    """The parsed, small parts of one run directory (samples, metrics and the server log are
    read on demand)."""

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
    model_calls: list[CallRecord] = field(default_factory=list)

    @property
    def layout(self) -> RunDir:
        return RunDir(self.path)

    @property
    def status(self) -> str:
        return self.end.status if self.end else "incomplete"

    def samples(self) -> pl.DataFrame:
        """The run's SLO samples (also of an unfinished run)."""
        return read_samples(self.path)

    def metrics(self) -> pl.DataFrame:
        """The run's metric samples (also of an unfinished run)."""
        return read_metrics(self.path)

    def server_log_lines(self) -> list[str] | None:
        """The server log lines written during the run (None: the run recorded no log)."""
        path = self.layout.server_log
        return path.read_text(errors="replace").splitlines() if path.exists() else None

    def require_scenario(self) -> Scenario:
        """The scenario as run; raises what made it unreadable."""
        if self.scenario is None:
            return load_run_scenario(self.path)
        return self.scenario

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


def load_run_scenario(run_dir: Path) -> Scenario:
    """The scenario as it was run (validated on its own, older formats migrated; no library
    needed)."""
    from dbaops.scenario.loader import read_scenario

    return read_scenario(RunDir(Path(run_dir)).scenario)[0]


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
    path = Path(run_dir)
    records = read_trace(path)
    data = RunData(path=path, records=records)
    try:
        data.scenario = load_run_scenario(path)
    except Exception as exc:  # reported, not raised: one bad run must not stop a report
        data.scenario_error = f"{type(exc).__name__}: {exc}"
    data.verdict = _read_verdict(path)
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
        elif (call := call_record(r)) is not None:
            data.model_calls.append(call)
    if data.verdict is None and rescore_missing and data.scenario is not None:
        from dbaops.evaluation.score import score_loaded_run

        try:
            data.verdict = score_loaded_run(data).model_dump(mode="json")
        except Exception:  # an unscorable run is listed as such by the report
            data.verdict = None
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
    for call in data.model_calls:
        name = call.model_name or getattr(call, "model", None)
        if isinstance(name, str) and name:
            names[name] = names.get(name, 0) + 1
    if names:
        return max(names.items(), key=lambda kv: kv[1])[0]
    return None


def run_cost(data: RunData) -> CostSummary:
    """Token usage and cost: the verdict's ``cost`` when it has one, else summed model calls.

    Verdicts written before ``unpriced_calls`` / ``price_placeholder`` existed take them from
    the model_call records.
    """
    calls = summarize_cost(data.model_calls)
    cost = (data.verdict or {}).get("cost")
    if not isinstance(cost, dict):
        return calls
    known = {k: v for k, v in cost.items() if k in CostSummary.model_fields}
    known.setdefault("calls", calls.calls)
    known.setdefault("unpriced_calls", calls.unpriced_calls)
    known.setdefault("price_placeholder", calls.price_placeholder)
    known.setdefault("placeholder_priced_calls", calls.placeholder_priced_calls)
    try:
        out = CostSummary.model_validate(known)
    except ValueError:
        return calls
    if out.unpriced_calls:
        out.cost_usd = None
    return out


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
