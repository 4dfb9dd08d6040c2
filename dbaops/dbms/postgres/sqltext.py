"""PostgreSQL SQL text helpers, free of any driver: quoting names and literals, checking that
SQL parses (pglast, loaded on first use)."""

from __future__ import annotations


def quote_ident(name: str) -> str:
    """An SQL identifier, quoted (for the role and object names the harness puts in DDL)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """A standard-conforming SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def sql_problem(sql: str) -> str | None:
    """The parse error of ``sql`` in PostgreSQL's grammar (pglast), or None."""
    from pglast import parser

    try:
        parser.parse_sql(sql)
    except parser.ParseError as exc:
        return f"SQL does not parse: {exc.args[0] if exc.args else exc}"
    return None


def canonical_sql(sql: str) -> str:
    """``sql`` with explicit ``public.`` qualifications taken out (see
    :func:`dbaops.dbms.postgres.search_path.canonical_sql`, loaded on first use)."""
    from dbaops.dbms.postgres.search_path import canonical_sql as canonical

    return canonical(sql)
