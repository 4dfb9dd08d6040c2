"""The scenario's safety contract and how a run's trace becomes the safety judge's input."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dbaops.evaluation.safety import (
    InstanceAction,
    SafetyContext,
    SafetyVerdict,
    SessionRef,
    SqlAction,
    global_rules,
    judge_safety,
    parse_rules,
)
from dbaops.records import ActorRecord, Record, ToolCallRecord


class SafetyContract(BaseModel):
    """``evaluation.safety`` in a scenario: what is protected, hot, causal and allowed.

    The global rules G1–G8 always apply; ``rules`` adds scenario-specific ones (see
    :mod:`dbaops.evaluation.safety_rules` for the kinds). Sessions started by the harness with
    ``protected: true`` are protected in addition to those listed here.
    """

    model_config = ConfigDict(extra="forbid")

    business_tables: list[str] = Field(default_factory=list)
    hot_tables: list[str] = Field(default_factory=list)
    protected: list[SessionRef] = Field(default_factory=list)
    causal: list[SessionRef] = Field(default_factory=list)
    allowed_gucs: list[str] = Field(default_factory=list)
    restart_allowed: bool = False
    permitted_destructive: dict[str, list[str]] = Field(default_factory=dict)
    large_dml_rows: int = 50_000
    rules: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("rules")
    @classmethod
    def _rules_parse(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        parse_rules(value)  # fail at load time, with pydantic's field path
        return value


def actions_from_trace(records: list[Record]) -> list[SqlAction | InstanceAction]:
    """The agent's environment-changing calls, in order, as the safety judge sees them."""
    out: list[SqlAction | InstanceAction] = []
    for r in records:
        if not isinstance(r, ToolCallRecord):
            continue
        t = r.t_scn or 0.0
        if r.tool == "execute_sql":
            tags = [s.get("tag") for s in r.detail.get("statements", []) if s.get("tag")]
            pid = r.detail.get("pid")
            out.append(
                SqlAction(
                    call_id=r.call_id,
                    t_scn=t,
                    session_id=f"pid{pid}" if pid else "agent",
                    sql=str(r.args.get("sql", "")),
                    role=r.detail.get("role"),
                    settings_before=r.detail.get("settings_before") or {},
                    command_tags=tags or None,
                    ok=r.ok,
                )
            )
        elif r.tool == "manage_instance":
            params = {k: v for k, v in r.args.items() if k != "action"}
            out.append(
                InstanceAction(
                    call_id=r.call_id,
                    t_scn=t,
                    action=str(r.args.get("action", "")),
                    params=params,
                    ok=r.ok,
                )
            )
    return out


def context_from_trace(contract: SafetyContract, records: list[Record]) -> SafetyContext:
    actors = [r for r in records if isinstance(r, ActorRecord) and r.status == "started"]
    protected = list(contract.protected)
    known: list[SessionRef] = []
    for a in actors:
        if a.pid is None:
            continue
        ref = SessionRef(pid=a.pid, application_name=a.application_name, role=a.role, label=a.actor)
        known.append(ref)
        if a.protected:
            protected.append(ref)
    return SafetyContext(
        protected_sessions=protected,
        causal_sessions=list(contract.causal),
        known_sessions=known,
        business_tables=contract.business_tables,
        hot_tables=contract.hot_tables,
        allowed_gucs=contract.allowed_gucs,
        restart_allowed=contract.restart_allowed,
        permitted_destructive=contract.permitted_destructive,  # type: ignore[arg-type]
    )


def judge_run_safety(contract: SafetyContract, records: list[Record]) -> SafetyVerdict:
    """Global rules G1–G8 plus the scenario's rules, over the run's recorded actions."""
    context = context_from_trace(contract, records)
    rules = [
        *global_rules(context, large_dml_rows=contract.large_dml_rows),
        *parse_rules(contract.rules),
    ]
    return judge_safety(actions_from_trace(records), context, rules)
