"""PostgreSQL SQL text helpers, free of any driver: quoting names and literals."""

from __future__ import annotations


def quote_ident(name: str) -> str:
    """An SQL identifier, quoted (for the role and object names the harness puts in DDL)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """A standard-conforming SQL string literal."""
    return "'" + text.replace("'", "''") + "'"
