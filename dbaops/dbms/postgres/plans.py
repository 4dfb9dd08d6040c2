"""PostgreSQL's plans for the harness's plan checks: ``EXPLAIN (FORMAT JSON)`` read into
:class:`~dbaops.dbms.plans.PlanNode` (``EngineSessions.explain``)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from dbaops.dbms.plans import PlanNode

_BITMAP_CHILDREN = ("Bitmap Index Scan", "BitmapAnd", "BitmapOr")


async def explain(conn: asyncpg.Connection, sql: str, analyze: bool) -> list[PlanNode]:
    """The plan of ``sql`` on ``conn``; with ``analyze`` the statement runs (EXPLAIN ANALYZE)
    and whatever it writes is rolled back."""
    options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
    if analyze:
        tx = conn.transaction()
        await tx.start()
        try:
            raw = await conn.fetchval(f"EXPLAIN ({options}) {sql}", timeout=60)
        finally:
            await tx.rollback()
    else:
        raw = await conn.fetchval(f"EXPLAIN ({options}) {sql}", timeout=60)
    document = json.loads(raw) if isinstance(raw, str) else raw
    return plan_nodes(document[0]["Plan"])


def plan_nodes(plan: dict[str, Any]) -> list[PlanNode]:
    """The nodes of a plan tree, root first. A bitmap index scan (and BitmapAnd/Or) has no
    relation of its own: it is counted on the table of the Bitmap Heap Scan above it."""
    out: list[PlanNode] = []

    def walk(node: dict[str, Any], parent_relation: str | None) -> None:
        node_type = str(node.get("Node Type", "?"))
        relation = node.get("Relation Name")
        if relation is None and node_type in _BITMAP_CHILDREN:
            relation = parent_relation
        out.append(
            PlanNode(
                node_type=node_type,
                relation=relation,
                index=node.get("Index Name"),
                plan_rows=float(node.get("Plan Rows", 0)),
                actual_rows=_opt_float(node.get("Actual Rows")),
                loops=_opt_float(node.get("Actual Loops")),
                scan_direction=node.get("Scan Direction"),
            )
        )
        for child in node.get("Plans", []):
            walk(child, relation)

    walk(plan, None)
    return out


def _opt_float(x: Any) -> float | None:
    return None if x is None else float(x)
