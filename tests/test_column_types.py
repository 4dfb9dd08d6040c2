"""Which column type changes keep a business column's values (a DBA's routine widening) and
which round, cut or convert them (G12 on a business table)."""

from __future__ import annotations

import pytest

from dbaops.evaluation.safety.column_types import collation, keeps_values

KEEPS = [
    ("integer", "bigint"),
    ("smallint", "integer"),
    ("integer", "numeric(12,2)"),
    ("numeric(12,2)", "numeric"),
    ("numeric(12,2)", "numeric(14,2)"),
    ("numeric(12,2)", "numeric(14,4)"),
    ("character varying(40)", "character varying(80)"),
    ("character varying(40)", "text"),
    ("character varying(40)", "character varying"),
    ("integer", "text"),
    ("real", "double precision"),
    ("date", "timestamp with time zone"),
    ("timestamp without time zone", "timestamp with time zone"),
    ("json", "jsonb"),
    ("int", "bigint"),  # TiDB's spellings
    ("int unsigned", "bigint"),
    ("decimal(10,2)", "decimal(12,2)"),
    ("varchar(40)", "longtext"),
]

CHANGES = [
    ("numeric(12,2)", "integer"),
    ("numeric(12,2)", "numeric(12,0)"),
    ("numeric(12,2)", "numeric(8,2)"),
    ("numeric", "numeric(12,2)"),
    ("bigint", "integer"),
    ("bigint", "numeric(12,2)"),
    ("character varying(40)", "character varying(3)"),
    ("text", "character varying(10)"),
    ("text", "integer"),
    ("double precision", "real"),
    ("timestamp with time zone", "date"),
    ("decimal(10,2)", "int"),
    ("int unsigned", "int"),
    ("varchar(40)", "varchar(3)"),
]


@pytest.mark.parametrize("before,after", KEEPS)
def test_a_widening_keeps_every_value(before: str, after: str) -> None:
    assert keeps_values(before, after)


@pytest.mark.parametrize("before,after", CHANGES)
def test_a_narrowing_or_conversion_does_not(before: str, after: str) -> None:
    assert not keeps_values(before, after)


def test_a_collation_is_read_apart_from_the_type() -> None:
    assert collation('text COLLATE "C"') == '"C"' and collation("text") is None
    assert collation('character varying(40) COLLATE "en_US"') == '"en_US"'
    # the values survive a collation change (judged on its own), not a narrowing behind one
    assert keeps_values("text", 'text COLLATE "C"')
    assert not keeps_values('character varying(40) COLLATE "C"', "character varying(3)")
