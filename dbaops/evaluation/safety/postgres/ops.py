"""What an executed statement does to tables, settings, privileges and sequences, read off
its pglast parse tree into the neutral facts of :mod:`dbaops.evaluation.safety.facts`.

:func:`table_ops` lists the table-level operations of a statement (DDL, maintenance, DML,
locks), :func:`setting_changes` the configuration changes (``SET``, ``ALTER SYSTEM``,
``ALTER ROLE/DATABASE ... SET``, ``set_config()``), :func:`privilege_changes` the grants and
revokes (of object privileges, default privileges and role membership),
:func:`role_attribute_changes` the role attributes set (``ALTER/CREATE ROLE``),
:func:`sequence_changes` the changes of a sequence's position, step or bounds, and
:func:`dropped_objects` what ``DROP`` removes. All walk only executed subtrees, so a ``DELETE``
inside ``CREATE FUNCTION`` or ``PREPARE`` is not an operation of that statement.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from pglast import ast, enums

from dbaops.evaluation.safety.facts import (
    CopyTarget,
    DroppedObject,
    FunctionCall,
    ObjectKind,
    PrivilegeChange,
    RelationSource,
    RoleAttribute,
    RoleAttributeChange,
    Scope,
    SequenceChange,
    SequenceOp,
    SequenceOwner,
    SettingChange,
    TableOp,
)
from dbaops.evaluation.safety.postgres.sqlutil import (
    const_value,
    defelem_true,
    deparse,
    fold_string,
    func_name,
    guc_value,
    iter_nodes,
    name_list,
    numeric_int,
    option_on,
    parse_name,
    role_name,
)
from dbaops.evaluation.safety.values import ObjName, pg_bool

# ALTER TABLE subcommands that take at most SHARE UPDATE EXCLUSIVE: they do not queue
# ordinary reads and writes behind them, so a missing lock_timeout cannot stall traffic.
WEAK_ALTER_SUBTYPES = frozenset(
    {
        enums.AlterTableType.AT_SetRelOptions,
        enums.AlterTableType.AT_ResetRelOptions,
        enums.AlterTableType.AT_SetStatistics,
        enums.AlterTableType.AT_ValidateConstraint,
        # ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the parent (PostgreSQL 12+), which
        # writes to it never wait behind, queued or held (the table attached is locked
        # exclusively, but it is not in service yet)
        enums.AlterTableType.AT_AttachPartition,
    }
)

# LOCK TABLE modes from SHARE (5) up block concurrent writes.
_HEAVY_LOCK_MODE = 5


def _weak_alter(cmd: ast.AlterTableCmd) -> bool:
    """A subcommand that takes at most SHARE UPDATE EXCLUSIVE on the table it alters: the
    weak ones, and ``DETACH PARTITION ... CONCURRENTLY`` / ``... FINALIZE`` (the parent is
    only SHARE UPDATE EXCLUSIVE locked; the partition gets ACCESS EXCLUSIVE once nobody uses
    it through the parent)."""
    if cmd.subtype in WEAK_ALTER_SUBTYPES:
        return True
    if cmd.subtype == enums.AlterTableType.AT_DetachPartitionFinalize:
        return True
    part = cmd.def_
    return (
        cmd.subtype == enums.AlterTableType.AT_DetachPartition
        and isinstance(part, ast.PartitionCmd)
        and bool(part.concurrent)
    )


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
        if isinstance(n, ast.CreateStmt) and n.partbound is not None:
            # CREATE TABLE ... PARTITION OF takes ACCESS EXCLUSIVE on the parent
            parents = (_rel(r) for r in n.inhRelations or ())
            out += [TableOp("create_partition", relation=p) for p in parents if p is not None]
        if isinstance(n, ast.AlterTableStmt):
            if n.objtype != otype.OBJECT_TABLE:
                continue
            rel = _rel(n.relation)
            cmds = [c for c in n.cmds or () if isinstance(c, ast.AlterTableCmd)]
            weak = bool(cmds) and all(_weak_alter(c) for c in cmds)
            out.append(TableOp("alter_table", relation=rel, weak=weak))
            for c in cmds:
                if c.subtype == enums.AlterTableType.AT_DropColumn:
                    out.append(TableOp("drop_column", relation=rel, detail=c.name or ""))
                using = _rewriting_using(c)
                if using is not None:
                    out.append(TableOp("rewrite_column", relation=rel, detail=using))
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
                            deletes_referrers=(con.fk_del_action or "a") in ("c", "n", "d"),
                            updates_referrers=(con.fk_upd_action or "a") in ("c", "n", "d"),
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
        elif isinstance(n, ast.RefreshMatViewStmt):
            out.append(
                TableOp("refresh_matview", relation=_rel(n.relation), concurrent=bool(n.concurrent))
            )
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
            cascade = n.behavior == enums.DropBehavior.DROP_CASCADE
            for rv in n.relations or ():
                out.append(TableOp("truncate", relation=_rel(rv), cascade=cascade))
        elif isinstance(n, ast.DeleteStmt):
            out.append(TableOp("delete", relation=_rel(n.relation)))
        elif isinstance(n, ast.UpdateStmt):
            out.append(TableOp("update", relation=_rel(n.relation)))
            overwritten = _overwritten(n)
            if overwritten:
                out.append(TableOp("overwrite", relation=_rel(n.relation), detail=overwritten))
        elif isinstance(n, ast.InsertStmt):
            out.append(TableOp("insert", relation=_rel(n.relation)))
            conflict = n.onConflictClause
            if (
                isinstance(conflict, ast.OnConflictClause)
                and conflict.action == enums.OnConflictAction.ONCONFLICT_UPDATE
            ):
                detail = "(INSERT ... ON CONFLICT DO UPDATE)"
                out.append(TableOp("overwrite", relation=_rel(n.relation), detail=detail))
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
                out.append(TableOp("overwrite", relation=rel, detail="(MERGE ... UPDATE)"))
            if enums.CmdType.CMD_INSERT in kinds:
                out.append(TableOp("insert", relation=rel, detail="MERGE ... INSERT"))
    return [op for op in out if op.relation is not None or op.scope != "table" or op.index]


def _overwritten(node: ast.UpdateStmt) -> str:
    """``"(UPDATE sets a, b)"`` for an ``UPDATE`` that replaces values in place; ``""`` when
    every column it sets is tested ``IS NULL`` in its ``WHERE`` (it fills missing values)."""
    columns = [t.name for t in node.targetList or () if isinstance(t, ast.ResTarget) and t.name]
    if not columns:
        return ""
    tested: set[str] = set()
    todo: list[Any] = [node.whereClause]
    while todo:
        cond = todo.pop()
        if isinstance(cond, ast.BoolExpr) and cond.boolop == enums.BoolExprType.AND_EXPR:
            todo.extend(cond.args or ())
        elif (
            isinstance(cond, ast.NullTest)
            and cond.nulltesttype == enums.NullTestType.IS_NULL
            and isinstance(cond.arg, ast.ColumnRef)
        ):
            fields = [f.sval for f in cond.arg.fields or () if isinstance(f, ast.String)]
            if fields:
                tested.add(fields[-1] or "")
    if set(columns) <= tested:
        return ""
    return f"(UPDATE sets {', '.join(dict.fromkeys(columns))})"


def _rewriting_using(cmd: ast.AlterTableCmd) -> str | None:
    """``ALTER COLUMN c TYPE t USING expr`` where ``expr`` is more than ``c`` (cast or not):
    the column's values are rewritten, not converted (``"c USING expr"``); None otherwise."""
    col = cmd.def_
    if cmd.subtype != enums.AlterTableType.AT_AlterColumnType or not isinstance(col, ast.ColumnDef):
        return None
    expr = col.raw_default
    if expr is None:
        return None
    bare: ast.Node | None = expr
    while isinstance(bare, ast.TypeCast | ast.CollateClause):
        bare = bare.arg
    if isinstance(bare, ast.ColumnRef):
        fields = [f.sval for f in bare.fields or () if isinstance(f, ast.String)]
        if fields and fields[-1] == cmd.name:
            return None
    return f"{cmd.name} USING {deparse(expr)}"


def relation_sources(node: ast.Node) -> list[RelationSource]:
    """Views defined in ``node`` with the relations their query reads, and tables made
    partitions or children of others (``PARTITION OF``, ``INHERITS``, ``ATTACH PARTITION``)."""
    out: list[RelationSource] = []
    for n in iter_nodes(node):
        if isinstance(n, ast.ViewStmt):
            view = _rel(n.view)
            read = [_rel(r) for r in iter_nodes(n.query, executed_only=False)]
            bases = tuple(dict.fromkeys(r for r in read if r is not None))
            if view is not None and bases:
                out.append(RelationSource("view", view, bases))
        elif isinstance(n, ast.CreateStmt):
            child = _rel(n.relation)
            parents = tuple(p for p in (_rel(r) for r in n.inhRelations or ()) if p is not None)
            if child is not None and parents:
                out.append(RelationSource("parent", child, parents))
        elif isinstance(n, ast.AlterTableStmt):
            parent = _rel(n.relation)
            for c in n.cmds or ():
                part = getattr(c, "def_", None)
                if (
                    isinstance(c, ast.AlterTableCmd)
                    and c.subtype == enums.AlterTableType.AT_AttachPartition
                    and isinstance(part, ast.PartitionCmd)
                    and parent is not None
                ):
                    child = _rel(part.name)
                    if child is not None:
                        out.append(RelationSource("parent", child, (parent,)))
    return out


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


def _from_set(
    stmt: Any,
    scope: Scope,
    target: str | None,
    via: str,
    role: str | None = None,
    database: str | None = None,
) -> list[SettingChange]:
    if not isinstance(stmt, ast.VariableSetStmt):
        return []
    kinds = enums.VariableSetKind
    if stmt.kind == kinds.VAR_RESET_ALL:
        return [SettingChange("*", None, scope, target, via, role, database)]
    if not stmt.name or stmt.kind in (kinds.VAR_SET_MULTI, kinds.VAR_SET_CURRENT):
        return []
    value = guc_value(stmt) if stmt.kind == kinds.VAR_SET_VALUE else None
    if stmt.kind == kinds.VAR_SET_VALUE and value is None:
        value = "?"
    return [SettingChange(stmt.name.lower(), value, scope, target, via, role, database)]


def setting_changes(node: ast.Node) -> list[SettingChange]:
    """Configuration changes made by the executed statement ``node``."""
    out: list[SettingChange] = []
    if isinstance(node, ast.VariableSetStmt):
        out += _from_set(node, "local" if node.is_local else "session", None, "SET")
    elif isinstance(node, ast.AlterSystemStmt):
        out += _from_set(node.setstmt, "system", None, "ALTER SYSTEM")
    elif isinstance(node, ast.AlterRoleSetStmt):
        role = role_name(node.role)
        target = role or "ALL"
        if node.database:
            target += f" IN DATABASE {node.database}"
        out += _from_set(node.setstmt, "role", target, "ALTER ROLE", role, node.database)
    elif isinstance(node, ast.AlterDatabaseSetStmt):
        out += _from_set(
            node.setstmt, "database", node.dbname, "ALTER DATABASE", database=node.dbname
        )
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


def copy_targets(node: ast.Node) -> list[CopyTarget]:
    """The programs and server files ``COPY ... TO/FROM`` in ``node`` runs, writes or reads."""
    out: list[CopyTarget] = []
    for n in iter_nodes(node):
        if isinstance(n, ast.CopyStmt) and n.filename:
            kind: Literal["program", "file", "file_from"] = (
                "program" if n.is_program else "file_from" if n.is_from else "file"
            )
            out.append(CopyTarget(kind, n.filename))
    return out


def function_calls(node: ast.Node) -> list[FunctionCall]:
    """Every function call in the executed statement ``node``, arguments as constants."""
    return [
        FunctionCall(func_name(n), tuple(const_value(a) for a in n.args or ()))
        for n in iter_nodes(node)
        if isinstance(n, ast.FuncCall)
    ]


def created_extensions(node: ast.Node) -> list[str]:
    """Extensions ``CREATE EXTENSION`` in ``node`` creates."""
    return [n.extname or "" for n in iter_nodes(node) if isinstance(n, ast.CreateExtensionStmt)]


# --------------------------------------------------------------------------------------------
# privileges and roles

_OBJECT_TYPE_NAMES = {
    enums.ObjectType.OBJECT_TABLE: "table",
    enums.ObjectType.OBJECT_SEQUENCE: "sequence",
    enums.ObjectType.OBJECT_SCHEMA: "schema",
    enums.ObjectType.OBJECT_FUNCTION: "function",
    enums.ObjectType.OBJECT_PROCEDURE: "procedure",
    enums.ObjectType.OBJECT_ROUTINE: "routine",
    enums.ObjectType.OBJECT_DATABASE: "database",
    enums.ObjectType.OBJECT_PARAMETER_ACL: "parameter",
    enums.ObjectType.OBJECT_TYPE: "type",
    enums.ObjectType.OBJECT_DOMAIN: "domain",
    enums.ObjectType.OBJECT_LARGEOBJECT: "large_object",
    enums.ObjectType.OBJECT_FDW: "foreign_data_wrapper",
    enums.ObjectType.OBJECT_FOREIGN_SERVER: "foreign_server",
    enums.ObjectType.OBJECT_TABLESPACE: "tablespace",
    enums.ObjectType.OBJECT_LANGUAGE: "language",
}
_PRIVILEGE_ALIASES = {"temp": "temporary"}


def _role_list(items: Any) -> tuple[str, ...]:
    names = (role_name(r) for r in (items or ()))
    return tuple(n for n in names if n is not None)


def _privileges(items: Any) -> tuple[str, ...]:
    out: list[str] = []
    for p in items or ():
        if isinstance(p, ast.AccessPriv):
            if not p.priv_name:  # ALL PRIVILEGES (columns)
                return ()
            name = p.priv_name.lower()
            out.append(_PRIVILEGE_ALIASES.get(name, name).replace(" ", "_"))
    return tuple(out)


def _column_privileges(items: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The privileges given on columns only: ``SELECT (id, email)`` -> ("select", ("id",
    "email")); ``ALL PRIVILEGES (a)`` is "" with its columns."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for p in items or ():
        if isinstance(p, ast.AccessPriv) and p.cols:
            name = (p.priv_name or "").lower()
            cols = tuple(str(c.sval).lower() for c in p.cols if isinstance(c, ast.String))
            out.append((_PRIVILEGE_ALIASES.get(name, name).replace(" ", "_"), cols))
    return tuple(out)


def _grant_objects(items: Any) -> tuple[ObjName, ...]:
    out: list[ObjName] = []
    for obj in items or ():
        name = _rel(obj)
        if name is None:
            names = name_list(obj.objname if isinstance(obj, ast.ObjectWithArgs) else obj)
            if not names:
                continue
            name = (names[-2] if len(names) >= 2 else None, names[-1])
        out.append(name)
    return tuple(out)


def _object_grant(n: ast.GrantStmt, kind: Literal["object", "default"]) -> PrivilegeChange:
    all_in = n.targtype == enums.GrantTargetType.ACL_TARGET_ALL_IN_SCHEMA
    verb = "GRANT" if n.is_grant else "REVOKE"
    return PrivilegeChange(
        grant=bool(n.is_grant),
        kind=kind,
        grantees=_role_list(n.grantees),
        privileges=_privileges(n.privileges),
        columns=_column_privileges(n.privileges),
        object_type=_OBJECT_TYPE_NAMES.get(n.objtype, "") if n.objtype is not None else "",
        objects=() if all_in or kind == "default" else _grant_objects(n.objects),
        in_schemas=tuple(name_list(n.objects)) if all_in else (),
        option=bool(n.grant_option),
        via=verb,
    )


def _membership(
    grant: bool, roles: tuple[str, ...], grantees: tuple[str, ...], via: str, option: bool
) -> PrivilegeChange:
    return PrivilegeChange(grant, "membership", grantees, roles=roles, option=option, via=via)


def privilege_changes(node: ast.Node) -> list[PrivilegeChange]:
    """Grants and revokes made by the executed statement ``node``: ``GRANT``/``REVOKE`` of
    object privileges and of roles, ``ALTER DEFAULT PRIVILEGES``, the memberships of
    ``CREATE ROLE ... IN ROLE / ROLE / ADMIN`` and ``ALTER GROUP ... ADD/DROP USER``, and
    ``DROP OWNED BY`` (which revokes every privilege granted to the roles)."""
    out: list[PrivilegeChange] = []
    for n in iter_nodes(node):
        if isinstance(n, ast.GrantStmt):
            if n.targtype != enums.GrantTargetType.ACL_TARGET_DEFAULTS:  # see below
                out.append(_object_grant(n, "object"))
        elif isinstance(n, ast.AlterDefaultPrivilegesStmt) and isinstance(n.action, ast.GrantStmt):
            opts = {d.defname: d.arg for d in n.options or () if isinstance(d, ast.DefElem)}
            base = _object_grant(n.action, "default")
            schemas = tuple(name_list(opts.get("schemas")))
            out.append(
                dataclasses.replace(
                    base,
                    in_schemas=schemas,
                    everywhere=not schemas,
                    for_roles=_role_list(opts.get("roles")),
                    via=f"ALTER DEFAULT PRIVILEGES ... {base.via}",
                )
            )
        elif isinstance(n, ast.GrantRoleStmt):
            roles = tuple(
                p.priv_name for p in n.granted_roles or () if isinstance(p, ast.AccessPriv)
            )
            given = [d for d in n.opt or () if isinstance(d, ast.DefElem)]
            if n.is_grant:
                option = any(d.defname == "admin" and defelem_true(d) for d in given)
            else:
                option = bool(given)  # REVOKE ADMIN/INHERIT/SET OPTION FOR
            verb = "GRANT" if n.is_grant else "REVOKE"
            out.append(
                _membership(
                    bool(n.is_grant),
                    tuple(r for r in roles if r),
                    _role_list(n.grantee_roles),
                    verb,
                    option,
                )
            )
        elif isinstance(n, ast.CreateRoleStmt) and n.role:
            for d in n.options or ():
                if not isinstance(d, ast.DefElem):
                    continue
                members = _role_list(d.arg)
                if d.defname == "addroleto":
                    out.append(
                        _membership(True, members, (n.role,), "CREATE ROLE ... IN ROLE", False)
                    )
                elif d.defname in ("rolemembers", "adminmembers"):
                    admin = d.defname == "adminmembers"
                    via = "CREATE ROLE ... ADMIN" if admin else "CREATE ROLE ... ROLE"
                    out.append(_membership(True, (n.role,), members, via, admin))
        elif isinstance(n, ast.AlterRoleStmt):
            role = role_name(n.role)
            for d in n.options or ():
                if isinstance(d, ast.DefElem) and d.defname == "rolemembers" and role:
                    add = (n.action or 0) >= 0
                    via = "ALTER GROUP ... ADD USER" if add else "ALTER GROUP ... DROP USER"
                    out.append(_membership(add, (role,), _role_list(d.arg), via, False))
        elif isinstance(n, ast.DropOwnedStmt):
            out.append(
                PrivilegeChange(
                    False, "object", _role_list(n.roles), everywhere=True, via="DROP OWNED BY"
                )
            )
    return out


ROLE_FLAGS: dict[str, RoleAttribute] = {
    "superuser": "superuser",
    "createrole": "createrole",
    "createdb": "createdb",
    "inherit": "inherit",
    "canlogin": "login",
    "isreplication": "replication",
    "bypassrls": "bypassrls",
}
_ROLE_VALUES: dict[str, RoleAttribute] = {
    "connectionlimit": "connection_limit",
    "password": "password",
    "validUntil": "valid_until",
}


def role_attribute_changes(node: ast.Node) -> list[RoleAttributeChange]:
    """Role attributes set by the executed statement ``node`` (``ALTER ROLE/USER``,
    ``CREATE ROLE/USER/GROUP``, ``ALTER ROLE ... RENAME TO``)."""
    out: list[RoleAttributeChange] = []
    for n in iter_nodes(node):
        if isinstance(n, ast.AlterRoleStmt | ast.CreateRoleStmt):
            created = isinstance(n, ast.CreateRoleStmt)
            role = n.role if isinstance(n, ast.CreateRoleStmt) else role_name(n.role)
            if not role:
                continue
            for d in n.options or ():
                if not isinstance(d, ast.DefElem) or not d.defname:
                    continue
                if d.defname in ROLE_FLAGS:
                    out.append(
                        RoleAttributeChange(role, ROLE_FLAGS[d.defname], defelem_true(d), created)
                    )
                elif d.defname in _ROLE_VALUES:
                    attribute = _ROLE_VALUES[d.defname]
                    value: int | str | None
                    if attribute == "connection_limit":
                        value = numeric_int(d.arg)
                    else:
                        value = d.arg.sval if isinstance(d.arg, ast.String) else None
                    out.append(RoleAttributeChange(role, attribute, value, created))
        elif (
            isinstance(n, ast.RenameStmt)
            and n.renameType == enums.ObjectType.OBJECT_ROLE
            and n.subname
        ):
            out.append(RoleAttributeChange(n.subname, "rename", n.newname))
    return out


# --------------------------------------------------------------------------------------------
# sequences

_SEQUENCE_OPTIONS = ("restart", "cycle", "increment", "minvalue", "maxvalue", "as")


def _sequence_ref(arg: Any) -> tuple[ObjName | None, ObjName | None, str | None]:
    """``(sequence, table, column)`` named by ``setval()``'s first argument."""
    if isinstance(arg, ast.FuncCall) and func_name(arg) == "pg_get_serial_sequence":
        parts = [fold_string(a) for a in arg.args or ()]
        if len(parts) == 2 and parts[0] and parts[1]:
            try:
                return None, parse_name(parts[0]), parts[1]
            except ValueError:
                return None, None, None
        return None, None, None
    text = fold_string(arg)
    if text:
        try:
            return parse_name(text), None, None
        except ValueError:
            pass
    return None, None, None


def _non_negative(node: Any) -> bool:
    value = numeric_int(node)
    return value is not None and value >= 0


def _ahead(node: Any, target: Any) -> bool:
    """Whether a ``setval()`` value is derived from a column's ``max()`` (the key floor) or
    from the position of the sequence ``target`` itself, plus a non-negative amount."""
    if isinstance(node, ast.TypeCast):
        return _ahead(node.arg, target)
    if isinstance(node, ast.FuncCall):
        name = func_name(node)
        if name == "max":
            return True
        if name in ("nextval", "currval"):
            args = list(node.args or ())
            own = _sequence_ref(target)
            return len(args) == 1 and own != (None, None, None) and _sequence_ref(args[0]) == own
        if name == "greatest":
            return any(_ahead(a, target) for a in node.args or ())
        return False
    if isinstance(node, ast.MinMaxExpr):
        return node.op == enums.MinMaxOp.IS_GREATEST and any(
            _ahead(a, target) for a in node.args or ()
        )
    if isinstance(node, ast.CoalesceExpr):
        args = list(node.args or ())
        return bool(args) and _ahead(args[0], target)
    if isinstance(node, ast.A_Expr) and name_list(node.name) == ["+"]:
        return (_ahead(node.lexpr, target) and _non_negative(node.rexpr)) or (
            _non_negative(node.lexpr) and _ahead(node.rexpr, target)
        )
    if isinstance(node, ast.SubLink) and node.subLinkType == enums.SubLinkType.EXPR_SUBLINK:
        sel = node.subselect
        if not isinstance(sel, ast.SelectStmt) or not sel.targetList:
            return False
        first = sel.targetList[0]
        val = first.val if isinstance(first, ast.ResTarget) else None
        if isinstance(val, ast.ColumnRef) and name_list(val.fields) == ["last_value"]:
            return True  # SELECT last_value FROM <sequence>
        return _ahead(val, target)
    return False


def _option_changes(
    options: Any, via: str, sequence: ObjName | None, table: ObjName | None, column: str | None
) -> list[SequenceChange]:
    out: list[SequenceChange] = []
    for d in options or ():
        if not isinstance(d, ast.DefElem) or d.defname not in _SEQUENCE_OPTIONS:
            continue
        op: SequenceOp = d.defname  # type: ignore[assignment]
        base = SequenceChange(op, sequence, table, column, via=via)
        if op == "restart":
            base = dataclasses.replace(base, next_value=numeric_int(d.arg))
        elif op == "cycle":
            base = dataclasses.replace(base, enabled=defelem_true(d))
        elif op in ("increment", "minvalue", "maxvalue"):
            base = dataclasses.replace(base, amount=numeric_int(d.arg))
        out.append(base)
    return out


def sequence_changes(node: ast.Node) -> list[SequenceChange]:
    """Sequence changes made by the executed statement ``node``: ``setval()``,
    ``ALTER SEQUENCE ... RESTART / CYCLE / INCREMENT / MINVALUE / MAXVALUE / AS`` and the
    same options of an identity column (``ALTER TABLE ... ALTER COLUMN ... RESTART``, ``SET
    INCREMENT BY``, ``SET CYCLE``...)."""
    out: list[SequenceChange] = []
    for n in iter_nodes(node):
        if isinstance(n, ast.FuncCall) and func_name(n) == "setval":
            args = list(n.args or ())
            if len(args) not in (2, 3):
                continue
            sequence, table, column = _sequence_ref(args[0])
            value = numeric_int(args[1])
            is_called = pg_bool(fold_string(args[2]) or "") if len(args) == 3 else True
            if value is not None and is_called is not False:
                value += 1  # is_called: nextval() returns the next step (ascending, by 1)
            out.append(
                SequenceChange(
                    "setval",
                    sequence,
                    table,
                    column,
                    next_value=value,
                    ahead=_ahead(args[1], args[0]),
                    via="setval()",
                )
            )
        elif isinstance(n, ast.AlterSeqStmt):
            out += _option_changes(n.options, "ALTER SEQUENCE", _rel(n.sequence), None, None)
        elif isinstance(n, ast.AlterTableStmt) and n.objtype == enums.ObjectType.OBJECT_TABLE:
            table = _rel(n.relation)
            for c in n.cmds or ():
                if (
                    isinstance(c, ast.AlterTableCmd)
                    and c.subtype == enums.AlterTableType.AT_SetIdentity
                ):
                    via = f"ALTER TABLE ... ALTER COLUMN {c.name}"
                    out += _option_changes(c.def_, via, None, table, c.name)
    return out


def sequence_owners(node: ast.Node) -> list[SequenceOwner]:
    """``CREATE/ALTER SEQUENCE ... OWNED BY table.column`` in ``node``, names as written."""
    out: list[SequenceOwner] = []
    for n in iter_nodes(node):
        if not isinstance(n, ast.CreateSeqStmt | ast.AlterSeqStmt):
            continue
        seq = _rel(n.sequence)
        for d in n.options or ():
            if isinstance(d, ast.DefElem) and d.defname == "owned_by" and seq is not None:
                names = name_list(d.arg)
                if len(names) >= 2:  # (OWNED BY NONE is one name)
                    table = (names[-3] if len(names) >= 3 else None, names[-2])
                    out.append(SequenceOwner(seq, table, names[-1]))
    return out


# --------------------------------------------------------------------------------------------
# dropped objects

_DROP_TYPES: dict[enums.ObjectType, ObjectKind] = {
    enums.ObjectType.OBJECT_INDEX: "index",
    enums.ObjectType.OBJECT_TABLE: "table",
    enums.ObjectType.OBJECT_VIEW: "view",
    enums.ObjectType.OBJECT_MATVIEW: "materialized_view",
    enums.ObjectType.OBJECT_SEQUENCE: "sequence",
    enums.ObjectType.OBJECT_SCHEMA: "schema",
    enums.ObjectType.OBJECT_FUNCTION: "function",
    enums.ObjectType.OBJECT_PROCEDURE: "procedure",
    enums.ObjectType.OBJECT_EXTENSION: "extension",
    enums.ObjectType.OBJECT_TRIGGER: "trigger",
    enums.ObjectType.OBJECT_PUBLICATION: "publication",
}


def dropped_objects(node: ast.Node) -> list[DroppedObject]:
    """Objects the executed statement ``node`` drops, names as written split at dots:
    ``DROP <type>`` and the statements of their own (``DROP DATABASE``,
    ``DROP SUBSCRIPTION``, ``DROP ROLE/USER/GROUP``)."""
    out: list[DroppedObject] = []
    for n in iter_nodes(node):
        if isinstance(n, ast.DropRoleStmt):
            roles = (role_name(spec) for spec in n.roles or ())
            out += [DroppedObject("role", (r,)) for r in roles if r]
        elif isinstance(n, ast.DropdbStmt) and n.dbname:
            out.append(DroppedObject("database", (n.dbname,)))
        elif isinstance(n, ast.DropSubscriptionStmt) and n.subname:
            out.append(DroppedObject("subscription", (n.subname,)))
        elif isinstance(n, ast.DropStmt) and n.removeType in _DROP_TYPES:
            kind = _DROP_TYPES[n.removeType]
            for obj in n.objects or ():
                names = name_list(obj.objname if isinstance(obj, ast.ObjectWithArgs) else obj)
                if names:
                    out.append(DroppedObject(kind, tuple(names)))
    return out
