"""Harness SQL that no agent can hijack through the search path (the CVE-2018-1058 pattern).

Every session the harness opens runs with ``search_path = pg_catalog, pg_temp``
(:data:`HARNESS_SEARCH_PATH`): an unqualified function, operator, aggregate or type then
resolves in ``pg_catalog`` only, never to a same-name overload the agent planted in a schema
it can create in (an exact-type ``public.count(integer)`` beats ``pg_catalog.count("any")``
whatever the order of the path). Business objects are therefore named with their schema.

:func:`search_path_problems` finds, in one piece of harness SQL, every name that would
resolve through the search path (and so fail, or worse, resolve to something the agent made)
or that calls code outside ``pg_catalog``; :func:`qualify` writes the schema in where it can.
Both read the statement with the PostgreSQL grammar (pglast), never with regular expressions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pglast
from pglast import ast

from dbaops.evaluation.safety.postgres.sqlutil import do_block

#: What every harness session's search path is, set at connect.
HARNESS_SEARCH_PATH = "pg_catalog, pg_temp"

#: Relations an extension installs in the business schema: not in pg_catalog, so qualified.
_EXTENSION_RELATIONS = frozenset({"pg_stat_statements", "pg_stat_statements_info"})

#: Routines of the extensions scenarios install (in the business schema, where a role the
#: agent holds can replace them): an unqualified call finds none in pg_catalog, a qualified
#: one runs code outside it.
_EXTENSION_ROUTINES = frozenset(
    {
        "pgstattuple",
        "pgstattuple_approx",
        "pgstatindex",
        "pgstatginindex",
        "pgstathashindex",
        "pg_relpages",
        "pg_stat_statements",
        "pg_stat_statements_info",
        "pg_stat_statements_reset",
    }
)

#: Object-identifier types whose text input names a relation (resolved through the search
#: path; routines, operators and types named in text resolve in pg_catalog only).
_NAME_RESOLVING_TYPES = frozenset({"regclass"})

#: Functions that take a relation's name as text (argument positions, by argument count).
_RELATION_NAME_ARGS: dict[str, dict[int, tuple[int, ...]]] = {
    **{
        f: {1: (0,), 2: (0,)}
        for f in (
            "pg_relation_size",
            "pg_total_relation_size",
            "pg_table_size",
            "pg_indexes_size",
            "to_regclass",
            "pg_relation_filenode",
            "pg_relation_filepath",
            "nextval",
            "currval",
            "setval",
            "pg_get_serial_sequence",
            "pg_sequence_last_value",
        )
    },
    **{
        f: {2: (0,), 3: (1,), 4: (1,)}
        for f in (
            "has_table_privilege",
            "has_sequence_privilege",
            "has_any_column_privilege",
            "has_column_privilege",
        )
    },
}


@dataclass(frozen=True)
class Unqualified:
    """One name in harness SQL that the search path would resolve."""

    name: str
    what: str
    #: where to write ``schema.`` in (character offset), or None when it cannot be done
    insert_at: int | None

    def message(self) -> str:
        if self.what.endswith("outside pg_catalog"):
            return (
                f"{self.what} {self.name!r}: harness SQL runs no code that a role the agent "
                "holds could have made or replaced"
            )
        return f"{self.what} {self.name!r} is resolved through the search path: " + (
            f"write public.{self.name}" if self.insert_at is not None else "name its schema"
        )


def iter_nodes(node: Any) -> Iterator[ast.Node]:
    """Every node under ``node``, depth first."""
    if isinstance(node, ast.Node):
        yield node
        for slot in getattr(type(node), "__slots__", ()):
            yield from iter_nodes(getattr(node, slot, None))
    elif isinstance(node, tuple | list):
        for item in node:
            yield from iter_nodes(item)


def _names(items: Any) -> list[str]:
    return [i.sval for i in items or () if isinstance(i, ast.String) and i.sval is not None]


def _is_catalog_relation(name: str) -> bool:
    return name.startswith("pg_") and name not in _EXTENSION_RELATIONS


def _string_const(node: Any) -> str | None:
    """A string literal's value (None for anything else)."""
    if isinstance(node, ast.A_Const) and isinstance(node.val, ast.String):
        return node.val.sval or ""
    return None


def _literal_offset(sql: str, value: str, anchor: int | None, *, before: bool) -> int | None:
    """The offset just inside the quote of the literal ``'value'`` nearest ``anchor`` (the
    first one after it, or with ``before`` the last one before it), by the SQL scanner."""
    if anchor is None or anchor < 0:
        return None
    text = "'" + value + "'"
    starts = [
        t.start
        for t in pglast.parser.scan(sql)
        if t.name == "SCONST" and sql[t.start : t.end + 1] == text
    ]
    near = [s for s in starts if (s < anchor if before else s >= anchor)]
    if not near:
        return None
    return (near[-1] if before else near[0]) + 1


def _text_name_problem(value: str, offset: int | None, what: str) -> Unqualified | None:
    """A relation (or routine) named in a string literal without a schema."""
    if "." in value or not value or value.startswith("pg_"):
        return None
    return Unqualified(value, what, offset)


def search_path_problems(sql: str, own_routines: frozenset[str] = frozenset()) -> list[Unqualified]:
    """Every name in ``sql`` that the harness's search path would resolve (a business relation
    without its schema, a relation or routine named in text) and every routine or operator it
    calls outside ``pg_catalog`` but ``own_routines`` (``schema.name`` of routines the
    scenario's construction makes as the superuser, which no role the agent holds can replace).
    Empty when ``sql`` does not parse (reported elsewhere)."""
    try:
        statements = pglast.parse_sql(sql)
    except pglast.parser.ParseError:
        return []
    found: list[Unqualified] = []
    for raw in statements:
        nodes = list(iter_nodes(raw.stmt))
        ctes = {n.ctename for n in nodes if isinstance(n, ast.CommonTableExpr)}
        for node in nodes:
            found.extend(_node_problems(node, ctes, sql, own_routines))
        if isinstance(raw.stmt, ast.DoStmt):
            found.extend(_do_block_problems(raw.stmt, own_routines))
    return sorted(found, key=lambda u: (u.insert_at is None, u.insert_at or 0))


def _do_block_problems(do: ast.DoStmt, own_routines: frozenset[str]) -> list[Unqualified]:
    """The problems of the statements a PL/pgSQL ``DO`` block runs (their place in the
    block's text is not written in: the author qualifies them)."""
    body, language = do_block(do)
    if body is None or language != "plpgsql":
        return []
    tag = "dbaops_do"
    try:
        tree = pglast.parse_plpgsql(f"DO ${tag}${body}${tag}$")
    except pglast.parser.ParseError:
        return []
    out: list[Unqualified] = []
    for query, mode in _plpgsql_queries(tree):
        text = query if mode == 0 else f"SELECT {query}"
        for problem in search_path_problems(text, own_routines):
            out.append(Unqualified(problem.name, f"{problem.what} in a DO block", None))
    return out


def _plpgsql_queries(node: Any) -> Iterator[tuple[str, int]]:
    """Every SQL text of a parsed PL/pgSQL tree, with its parse mode (0: a statement)."""
    if isinstance(node, dict):
        expr = node.get("PLpgSQL_expr")
        if isinstance(expr, dict) and isinstance(expr.get("query"), str):
            mode = int(expr.get("parseMode", 0) or 0)
            if mode != 1:  # 1: a type name
                yield expr["query"], mode
        for value in node.values():
            yield from _plpgsql_queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from _plpgsql_queries(item)


def _node_problems(
    node: ast.Node, ctes: set[str | None], sql: str, own_routines: frozenset[str]
) -> Iterator[Unqualified]:
    if isinstance(node, ast.RangeVar):
        name = node.relname or ""
        if node.schemaname is None and name not in ctes and not _is_catalog_relation(name):
            where = node.location if node.location is not None and node.location >= 0 else None
            if where is not None and sql[where : where + len(name)].lower() != name:
                where = None  # a quoted name: left to the author
            yield Unqualified(name, "relation", where)
    elif isinstance(node, ast.DropStmt | ast.CommentStmt | ast.AlterObjectSchemaStmt):
        objects = node.objects if isinstance(node, ast.DropStmt) else (node.object,)
        for obj in objects or ():
            parts = _names(obj) if isinstance(obj, tuple | list) else []
            if len(parts) == 1 and not _is_catalog_relation(parts[0]):
                yield Unqualified(parts[0], "object", None)
    elif isinstance(node, ast.FuncCall | ast.CreateFunctionStmt):
        parts = _names(node.funcname)
        called = isinstance(node, ast.FuncCall)
        if called and len(parts) == 2 and parts[0] != "pg_catalog":
            if ".".join(parts) not in own_routines:
                yield Unqualified(".".join(parts), "routine outside pg_catalog", None)
        elif isinstance(node, ast.CreateFunctionStmt) and len(parts) == 1:
            yield Unqualified(parts[0], "routine", None)
        elif isinstance(node, ast.FuncCall) and len(parts) == 1:
            if parts[0] in _EXTENSION_ROUTINES:
                yield Unqualified(parts[0], "extension routine outside pg_catalog", None)
            args = node.args or ()
            for i in _RELATION_NAME_ARGS.get(parts[0], {}).get(len(args), ()):
                value = _string_const(args[i])
                if value is not None:
                    at = _literal_offset(sql, value, node.location, before=False)
                    problem = _text_name_problem(value, at, "relation named in text")
                    if problem is not None:
                        yield problem
    elif isinstance(node, ast.A_Expr):
        parts = _names(node.name)
        if len(parts) == 2 and parts[0] != "pg_catalog":
            yield Unqualified(".".join(parts), "operator outside pg_catalog", None)
    elif isinstance(node, ast.TypeCast) and node.typeName is not None:
        type_names = _names(node.typeName.names)
        if type_names and type_names[-1] in _NAME_RESOLVING_TYPES:
            value = _string_const(node.arg)
            if value is not None:
                at = _literal_offset(sql, value, node.location, before=True)
                problem = _text_name_problem(value, at, f"name cast to {type_names[-1]}")
                if problem is not None:
                    yield problem


def created_routines(sql: str) -> set[str]:
    """``schema.name`` of every routine ``sql`` creates with a qualified name."""
    try:
        statements = pglast.parse_sql(sql)
    except pglast.parser.ParseError:
        return set()
    return {
        ".".join(parts)
        for raw in statements
        if isinstance(raw.stmt, ast.CreateFunctionStmt)
        and len(parts := _names(raw.stmt.funcname)) == 2
    }


def qualify(sql: str, schema: str = "public") -> str:
    """``sql`` with ``schema.`` written before every business name the search path would
    resolve, where the name's place in the text is known (the rest stay for the author)."""
    offsets = sorted(
        {u.insert_at for u in search_path_problems(sql) if u.insert_at is not None}, reverse=True
    )
    for at in offsets:
        sql = sql[:at] + f"{schema}." + sql[at:]
    return sql


def canonical_sql(sql: str, schema: str = "public") -> str:
    """``sql`` with every explicit ``schema.`` qualification taken out (of names, and of names
    in string literals), by the SQL scanner: the business schema is the one the fixture's
    objects live in, so ``orders`` and ``public.orders`` name the same thing, and a scenario
    whose SQL only gained its qualifications means what it meant. Text that does not scan is
    returned as it is."""
    try:
        tokens = pglast.parser.scan(sql)
    except pglast.parser.ParseError:
        return sql
    cuts: list[tuple[int, int]] = []
    prefix = f"'{schema}."
    for i, token in enumerate(tokens):
        text = sql[token.start : token.end + 1]
        if token.name == "IDENT" and text.lower() == schema and i + 1 < len(tokens):
            dot = tokens[i + 1]
            if dot.name == "ASCII_46" and dot.start == token.end + 1:
                cuts.append((token.start, dot.end + 1))
        elif token.name == "SCONST" and text.lower().startswith(prefix):
            cuts.append((token.start + 1, token.start + len(prefix)))
    for start, end in reversed(cuts):
        sql = sql[:start] + sql[end:]
    return sql
