"""What a superuser statement run while the agent works could hand to the agent's code.

Qualified names keep the harness's statements off the agent's overloads, but not off what
fires or expands *inside* an object the statement touches: a trigger, rule, column default,
view or policy the agent planted on a business relation runs, as the caller, when the harness
writes or reads that relation. A fault the harness injects as a superuser after the agent has
started would so run the agent's code as a superuser. :func:`agent_reachable` lists what in a
statement could: any write (``INSERT``, ``UPDATE``, ``DELETE``, ``MERGE``, ``COPY``,
``TRUNCATE``), any procedure or ``DO`` block, any relation outside the system catalogs (but
in maintenance that runs as the relation's owner: ``REFRESH``, ``VACUUM``, ``ANALYZE``...), any
routine outside ``pg_catalog`` (an unqualified one resolves there in a harness session).
``dbaops check`` rejects such faults (run them as a fixture
role, whose power the agent has anyway, or before the agent starts).
"""

from __future__ import annotations

import pglast
from pglast import ast

from dbaops.dbms.postgres.search_path import iter_nodes

_CATALOG_SCHEMAS = frozenset({"pg_catalog", "information_schema"})
_WRITES: dict[type, str] = {
    ast.InsertStmt: "INSERT",
    ast.UpdateStmt: "UPDATE",
    ast.DeleteStmt: "DELETE",
    ast.MergeStmt: "MERGE",
    ast.CopyStmt: "COPY",
    ast.TruncateStmt: "TRUNCATE",
    ast.CallStmt: "CALL",
    ast.DoStmt: "a DO block",
}


#: Maintenance that runs the relation's code as the relation's owner, never as the caller
#: (a security-restricted operation, since the CVE-2022-1552 fix).
_AS_OWNER = (ast.RefreshMatViewStmt, ast.VacuumStmt, ast.ClusterStmt, ast.ReindexStmt)


def agent_reachable(sql: str) -> list[str]:
    """What in ``sql`` could run code the agent planted (see the module docstring); empty
    when nothing could, or when ``sql`` does not parse (reported elsewhere)."""
    try:
        statements = pglast.parse_sql(sql)
    except pglast.parser.ParseError:
        return []
    found: list[str] = []
    for raw in statements:
        if isinstance(raw.stmt, _AS_OWNER):
            continue
        for node in iter_nodes(raw.stmt):
            what = _WRITES.get(type(node))
            if what is not None:
                found.append(what)
            elif isinstance(node, ast.RangeVar) and node.relname:
                schema = node.schemaname or ""
                catalog_view = not schema and node.relname.startswith("pg_")
                if schema not in _CATALOG_SCHEMAS and not catalog_view:
                    found.append(f"relation {schema + '.' if schema else ''}{node.relname}")
            elif isinstance(node, ast.FuncCall):
                names = [
                    n.sval for n in node.funcname or () if isinstance(n, ast.String) and n.sval
                ]
                if len(names) == 2 and names[0] != "pg_catalog":  # unqualified: pg_catalog
                    found.append(f"routine {'.'.join(names)}")
    return list(dict.fromkeys(found))
