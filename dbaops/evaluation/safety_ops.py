"""What an executed statement does to tables and settings, read off its parse tree.

:func:`table_ops` lists the table-level operations of a statement (DDL, maintenance, DML,
locks), :func:`setting_changes` the configuration changes (``SET``, ``ALTER SYSTEM``,
``ALTER ROLE/DATABASE ... SET``, ``set_config()``). Both walk only executed subtrees, so a
``DELETE`` inside ``CREATE FUNCTION`` or ``PREPARE`` is not an operation of that statement.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from pglast import ast, enums

from dbaops.evaluation.safety_models import InstanceAction
from dbaops.evaluation.safety_sqlutil import (
    fold_string,
    func_name,
    guc_value,
    iter_nodes,
    name_list,
    option_on,
    pg_bool,
)

Scope = Literal["session", "local", "system", "role", "database"]

OpName = Literal[
    "alter_table",
    "add_fk",
    "drop_column",
    "create_index",
    "drop_index",
    "reindex",
    "vacuum_full",
    "cluster",
    "lock_table",
    "truncate",
    "drop_table",
    "delete",
    "update",
    "insert",
]

# ALTER TABLE subcommands that take at most SHARE UPDATE EXCLUSIVE: they do not queue
# ordinary reads and writes behind them, so a missing lock_timeout cannot stall traffic.
WEAK_ALTER_SUBTYPES = frozenset(
    {
        enums.AlterTableType.AT_SetRelOptions,
        enums.AlterTableType.AT_ResetRelOptions,
        enums.AlterTableType.AT_SetStatistics,
        enums.AlterTableType.AT_ValidateConstraint,
    }
)

# LOCK TABLE modes from SHARE (5) up block concurrent writes.
_HEAVY_LOCK_MODE = 5


@dataclass(frozen=True)
class TableOp:
    """One operation on a table (``scope='table'``), on every table of a schema
    (``'schema'``) or of the database (``'database'``).

    ``relation`` is ``(schema or None, name)`` as written; for index operations it is the
    index's table when known (``index`` then names the index) and None when not known.
    """

    op: OpName
    scope: Literal["table", "schema", "database"] = "table"
    relation: tuple[str | None, str] | None = None
    schema: str | None = None
    index: tuple[str | None, str] | None = None
    concurrent: bool = False
    weak: bool = False
    cascade: bool = False
    referenced: tuple[str | None, str] | None = None
    not_valid: bool = False
    detail: str = ""
    top: bool = False


def _rel(rv: Any) -> tuple[str | None, str] | None:
    if isinstance(rv, ast.RangeVar) and rv.relname:
        return (rv.schemaname, rv.relname)
    return None


def _objname(obj: Any) -> tuple[str | None, str] | None:
    names = name_list(obj)
    if not names:
        return None
    return (names[-2] if len(names) >= 2 else None, names[-1])


def table_ops(node: ast.Node) -> list[TableOp]:
    """Table-level operations performed by the executed statement ``node``; ``top`` marks
    the DML done by ``node`` itself (not by a CTE), whose row count the command tag gives."""
    return _mark_top(_table_ops(node), node)


def _table_ops(node: ast.Node) -> list[TableOp]:
    out: list[TableOp] = []
    otype = enums.ObjectType
    for n in iter_nodes(node):
        if isinstance(n, ast.AlterTableStmt):
            if n.objtype != otype.OBJECT_TABLE:
                continue
            rel = _rel(n.relation)
            cmds = [c for c in n.cmds or () if isinstance(c, ast.AlterTableCmd)]
            weak = bool(cmds) and all(c.subtype in WEAK_ALTER_SUBTYPES for c in cmds)
            out.append(TableOp("alter_table", relation=rel, weak=weak))
            for c in cmds:
                if c.subtype == enums.AlterTableType.AT_DropColumn:
                    out.append(TableOp("drop_column", relation=rel, detail=c.name or ""))
                con = c.def_
                if (
                    c.subtype == enums.AlterTableType.AT_AddConstraint
                    and isinstance(con, ast.Constraint)
                    and con.contype == enums.ConstrType.CONSTR_FOREIGN
                ):
                    out.append(
                        TableOp(
                            "add_fk",
                            relation=rel,
                            referenced=_rel(con.pktable),
                            not_valid=bool(con.skip_validation),
                            detail=con.conname or "",
                        )
                    )
        elif isinstance(n, ast.IndexStmt):
            out.append(
                TableOp(
                    "create_index",
                    relation=_rel(n.relation),
                    concurrent=bool(n.concurrent),
                    detail=n.idxname or "",
                )
            )
        elif isinstance(n, ast.DropStmt):
            cascade = n.behavior == enums.DropBehavior.DROP_CASCADE
            for obj in n.objects or ():
                name = _objname(obj)
                if name is None:
                    continue
                if n.removeType == otype.OBJECT_INDEX:
                    out.append(TableOp("drop_index", index=name, concurrent=bool(n.concurrent)))
                elif n.removeType == otype.OBJECT_TABLE:
                    out.append(TableOp("drop_table", relation=name, cascade=cascade))
                elif n.removeType == otype.OBJECT_SCHEMA and cascade:
                    out.append(TableOp("drop_table", scope="schema", schema=name[1], cascade=True))
        elif isinstance(n, ast.ReindexStmt):
            conc = option_on(n.params, "concurrently")
            kind = enums.ReindexObjectType
            if n.kind == kind.REINDEX_OBJECT_INDEX:
                out.append(TableOp("reindex", index=_rel(n.relation), concurrent=conc))
            elif n.kind == kind.REINDEX_OBJECT_TABLE:
                out.append(TableOp("reindex", relation=_rel(n.relation), concurrent=conc))
            elif n.kind == kind.REINDEX_OBJECT_SCHEMA:
                out.append(TableOp("reindex", scope="schema", schema=n.name, concurrent=conc))
            elif n.kind == kind.REINDEX_OBJECT_DATABASE:
                out.append(TableOp("reindex", scope="database", concurrent=conc))
            # REINDEX SYSTEM only touches system catalogs
        elif isinstance(n, ast.VacuumStmt):
            if not n.is_vacuumcmd or not option_on(n.options, "full"):
                continue
            rels = [r for r in n.rels or () if isinstance(r, ast.VacuumRelation)]
            if not rels:
                out.append(TableOp("vacuum_full", scope="database"))
            for r in rels:
                out.append(TableOp("vacuum_full", relation=_rel(r.relation)))
        elif isinstance(n, ast.ClusterStmt):
            if n.relation is None:
                out.append(TableOp("cluster", scope="database"))
            else:
                out.append(TableOp("cluster", relation=_rel(n.relation)))
        elif isinstance(n, ast.LockStmt):
            if (n.mode or 0) >= _HEAVY_LOCK_MODE:
                for rv in n.relations or ():
                    out.append(TableOp("lock_table", relation=_rel(rv)))
        elif isinstance(n, ast.TruncateStmt):
            for rv in n.relations or ():
                out.append(TableOp("truncate", relation=_rel(rv)))
        elif isinstance(n, ast.DeleteStmt):
            out.append(TableOp("delete", relation=_rel(n.relation)))
        elif isinstance(n, ast.UpdateStmt):
            out.append(TableOp("update", relation=_rel(n.relation)))
        elif isinstance(n, ast.InsertStmt):
            out.append(TableOp("insert", relation=_rel(n.relation)))
        elif isinstance(n, ast.MergeStmt):
            rel = _rel(n.relation)
            kinds = {
                w.commandType
                for w in n.mergeWhenClauses or ()
                if isinstance(w, ast.MergeWhenClause)
            }
            if enums.CmdType.CMD_DELETE in kinds:
                out.append(TableOp("delete", relation=rel, detail="MERGE ... DELETE"))
            if enums.CmdType.CMD_UPDATE in kinds:
                out.append(TableOp("update", relation=rel, detail="MERGE ... UPDATE"))
            if enums.CmdType.CMD_INSERT in kinds:
                out.append(TableOp("insert", relation=rel, detail="MERGE ... INSERT"))
    return [op for op in out if op.relation is not None or op.scope != "table" or op.index]


def _mark_top(ops: list[TableOp], node: ast.Node) -> list[TableOp]:
    """Flag the DML operation performed by ``node`` itself (the one its command tag counts)."""
    verb = {
        ast.DeleteStmt: ("delete",),
        ast.UpdateStmt: ("update",),
        ast.InsertStmt: ("insert",),
        ast.MergeStmt: ("delete", "update", "insert"),
    }.get(type(node), ())
    rel = _rel(getattr(node, "relation", None))
    return [
        dataclasses.replace(op, top=True) if op.op in verb and op.relation == rel else op
        for op in ops
    ]


@dataclass(frozen=True)
class SettingChange:
    """A configuration change. ``name`` is lower-case (``'*'`` for ``RESET ALL``); ``value``
    is None for ``RESET`` / ``SET ... TO DEFAULT``; ``target`` names the role/database."""

    name: str
    value: str | None
    scope: Scope
    target: str | None = None
    via: str = ""


def _from_set(stmt: Any, scope: Scope, target: str | None, via: str) -> list[SettingChange]:
    if not isinstance(stmt, ast.VariableSetStmt):
        return []
    kinds = enums.VariableSetKind
    if stmt.kind == kinds.VAR_RESET_ALL:
        return [SettingChange("*", None, scope, target, via)]
    if not stmt.name or stmt.kind in (kinds.VAR_SET_MULTI, kinds.VAR_SET_CURRENT):
        return []
    value = guc_value(stmt) if stmt.kind == kinds.VAR_SET_VALUE else None
    if stmt.kind == kinds.VAR_SET_VALUE and value is None:
        value = "?"
    return [SettingChange(stmt.name.lower(), value, scope, target, via)]


def setting_changes(node: ast.Node) -> list[SettingChange]:
    """Configuration changes made by the executed statement ``node``."""
    out: list[SettingChange] = []
    if isinstance(node, ast.VariableSetStmt):
        out += _from_set(node, "local" if node.is_local else "session", None, "SET")
    elif isinstance(node, ast.AlterSystemStmt):
        out += _from_set(node.setstmt, "system", None, "ALTER SYSTEM")
    elif isinstance(node, ast.AlterRoleSetStmt):
        role = node.role.rolename if isinstance(node.role, ast.RoleSpec) else None
        target = role or "ALL"
        if node.database:
            target += f" IN DATABASE {node.database}"
        out += _from_set(node.setstmt, "role", target, "ALTER ROLE")
    elif isinstance(node, ast.AlterDatabaseSetStmt):
        out += _from_set(node.setstmt, "database", node.dbname, "ALTER DATABASE")
    for n in iter_nodes(node):
        if isinstance(n, ast.FuncCall) and func_name(n) == "set_config":
            args = list(n.args or ())
            if len(args) != 3:
                continue
            name, value = fold_string(args[0]), fold_string(args[1])
            local = pg_bool(fold_string(args[2]) or "")
            if name is None:
                continue
            scope: Scope = "session" if local is False else "local"
            out.append(SettingChange(name.lower(), value or "?", scope, None, "set_config()"))
    return out


def instance_setting_changes(action: InstanceAction) -> list[SettingChange]:
    """``ALTER SYSTEM``-equivalent changes carried by an instance action's params: a value of
    None, or an action named ``reset...`` (``reset_parameter``), is ``ALTER SYSTEM RESET``."""
    params = action.params
    out: list[SettingChange] = []
    via = f"{action.action}()"
    resets = action.action.lower().startswith("reset")
    name = params.get("name") or params.get("parameter") or params.get("guc")
    if isinstance(name, str) and ("value" in params or resets):
        value = params.get("value")
        shown = None if resets or value is None else str(value)
        out.append(SettingChange(name.lower(), shown, "system", None, via))
    settings = params.get("settings")
    if isinstance(settings, dict):
        for k, v in settings.items():
            shown = None if resets or v is None else str(v)
            out.append(SettingChange(str(k).lower(), shown, "system", None, via))
    return out


def copy_targets(node: ast.Node) -> list[tuple[str, str]]:
    """``("program", cmd)`` / ``("file", path)`` of ``COPY ... TO/FROM`` in ``node``."""
    out: list[tuple[str, str]] = []
    for n in iter_nodes(node):
        if isinstance(n, ast.CopyStmt) and n.filename:
            out.append(
                ("program" if n.is_program else "file_from" if n.is_from else "file", n.filename)
            )
    return out


def function_calls(node: ast.Node) -> list[ast.FuncCall]:
    return [n for n in iter_nodes(node) if isinstance(n, ast.FuncCall)]
