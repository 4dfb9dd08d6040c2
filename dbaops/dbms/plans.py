"""A query plan as the harness's plan checks read it, whatever the engine: its nodes,
flattened root first (each engine's ``EngineSessions.explain`` produces them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlanNode:
    """One node of a plan, flattened."""

    node_type: str
    relation: str | None
    index: str | None
    plan_rows: float
    actual_rows: float | None
    loops: float | None
    scan_direction: str | None = None
