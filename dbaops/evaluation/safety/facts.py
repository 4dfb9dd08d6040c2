"""The facts of one executed statement, in a form that names no SQL dialect's parse tree.

A front end reads them off its parse tree once per statement
(:class:`~dbaops.evaluation.safety.statement.Stmt` carries them as :class:`Facts`); the rules
read nothing else. Names are as the statement writes them, identifier case folded:
``(schema or None, name)``. Roles are rendered as their name, ``public`` for ``PUBLIC``, or
one of :data:`~dbaops.evaluation.safety.values.ROLE_KEYWORDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

from dbaops.evaluation.safety.values import ObjName, Value

if TYPE_CHECKING:
    from dbaops.evaluation.safety.targets import SignalTarget

Scope = Literal["session", "local", "system", "role", "database"]

LockOp = Literal[
    "alter_table",
    "create_index",
    "drop_index",
    "reindex",
    "refresh_matview",
    "vacuum_full",
    "cluster",
    "lock_table",
    "truncate",
    "drop_table",
    "create_partition",
]
"""Table operations that take a lock strong enough to queue other sessions' work
(``create_partition``: ``CREATE TABLE … PARTITION OF``, ACCESS EXCLUSIVE on the parent)."""

OpName = Literal[
    LockOp, "add_fk", "drop_column", "rewrite_column", "delete", "update", "insert", "overwrite"
]
"""``overwrite``: an ``UPDATE`` (or ``MERGE``/upsert update) that replaces values in place,
beside its ``update``; an ``UPDATE`` that only fills missing values (every column it sets is
tested ``IS NULL`` in its ``WHERE``) overwrites nothing."""


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
    #: an added foreign key whose ``ON DELETE`` action deletes or changes referencing rows
    deletes_referrers: bool = False
    #: an added foreign key whose ``ON UPDATE`` action changes referencing rows
    updates_referrers: bool = False


@dataclass(frozen=True)
class SettingChange:
    """A configuration change. ``name`` is lower-case (``'*'`` for ``RESET ALL``); ``value``
    is None for ``RESET`` / ``SET ... TO DEFAULT``; ``target`` names the role/database.

    For ``ALTER ROLE``, ``role`` is the target role (None for ``ALTER ROLE ALL``);
    ``database`` is the database of ``ALTER ROLE ... IN DATABASE`` and ``ALTER DATABASE``."""

    name: str
    value: str | None
    scope: Scope
    target: str | None = None
    via: str = ""
    role: str | None = None
    database: str | None = None


@dataclass(frozen=True)
class PrivilegeChange:
    """A grant or revoke of object privileges (``kind='object'``; ``'default'`` for
    ``ALTER DEFAULT PRIVILEGES``, which applies to objects created later) or of role
    membership (``'membership'``).

    ``grantees`` gain or lose it (``public`` is PUBLIC).
    Membership: ``roles`` are the roles granted or revoked. Objects: ``privileges`` are
    lower-case names with spaces as ``_`` (``()`` is ALL PRIVILEGES), ``object_type`` is
    ``table`` (views too), ``sequence``, ``schema``, ``function``, ``database``,
    ``parameter``..., ``objects`` the objects named (``(schema or None, name)``),
    ``in_schemas`` the schemas of ``ON ALL ... IN SCHEMA`` and of default privileges, and
    ``everywhere`` marks what reaches every object of the database (default privileges
    without ``IN SCHEMA``, ``DROP OWNED``). ``option``: ``WITH GRANT/ADMIN OPTION``, or on a
    revoke that only the option is revoked (``GRANT OPTION FOR``). ``columns``: the privileges
    given on some columns only (``GRANT SELECT (id, email) ON t``), each with its columns; a
    privilege not there is on the whole object."""

    grant: bool
    kind: Literal["object", "membership", "default"]
    grantees: tuple[str, ...]
    roles: tuple[str, ...] = ()
    privileges: tuple[str, ...] = ()
    object_type: str = ""
    objects: tuple[ObjName, ...] = ()
    in_schemas: tuple[str, ...] = ()
    everywhere: bool = False
    for_roles: tuple[str, ...] = ()
    option: bool = False
    columns: tuple[tuple[str, tuple[str, ...]], ...] = ()
    via: str = ""


RoleAttribute = Literal[
    "superuser",
    "createrole",
    "createdb",
    "inherit",
    "login",
    "replication",
    "bypassrls",
    "connection_limit",
    "password",
    "valid_until",
    "rename",
]


@dataclass(frozen=True)
class RoleAttributeChange:
    """An attribute that ``ALTER ROLE`` (or, with ``created``, ``CREATE ROLE``) gives a role:
    a flag (``value`` True/False: ``SUPERUSER``/``NOSUPERUSER``, ``LOGIN``/``NOLOGIN``...),
    ``connection_limit`` (the limit, -1 for none), ``password`` (None for ``PASSWORD
    NULL``), ``valid_until`` or ``rename`` (the new name)."""

    role: str
    attribute: RoleAttribute
    value: bool | int | str | None
    created: bool = False

    @property
    def form(self) -> str:
        """The attribute as written, lower-case: ``nologin``, ``connection_limit``..."""
        if isinstance(self.value, bool):
            return self.attribute if self.value else f"no{self.attribute}"
        return self.attribute

    def describe(self) -> str:
        verb = "CREATE ROLE" if self.created else "ALTER ROLE"
        if self.attribute == "rename":
            return f"ALTER ROLE {self.role} RENAME TO {self.value}"
        if self.attribute == "connection_limit":
            return f"{verb} {self.role} CONNECTION LIMIT {self.value}"
        if self.attribute == "password":
            return f"{verb} {self.role} PASSWORD {'NULL' if self.value is None else '...'}"
        if self.attribute == "valid_until":
            return f"{verb} {self.role} VALID UNTIL {self.value!r}"
        return f"{verb} {self.role} {self.form.upper()}"


SequenceOp = Literal["setval", "restart", "cycle", "increment", "minvalue", "maxvalue", "as"]


@dataclass(frozen=True)
class SequenceChange:
    """A change of a sequence's position, step or bounds.

    The sequence is ``sequence`` (as written, ``(schema or None, name)``), or the identity /
    serial sequence of ``table``.``column`` (``ALTER TABLE t ALTER COLUMN c RESTART``,
    ``setval(pg_get_serial_sequence('t', 'c'), ...)``); all three None: computed at run time.
    ``next_value`` is what ``nextval()`` returns after ``setval()`` / ``RESTART WITH`` when
    the value is a constant (None for a bare ``RESTART``, which goes back to the start
    value); ``ahead`` marks a ``setval()`` value derived from a column's ``max()`` or from
    the sequence's own position plus a non-negative amount; ``amount`` is the ``INCREMENT``,
    ``MINVALUE`` or ``MAXVALUE`` given (None: ``NO MINVALUE``/``NO MAXVALUE``); ``enabled``
    tells ``CYCLE`` from ``NO CYCLE``."""

    op: SequenceOp
    sequence: ObjName | None = None
    table: ObjName | None = None
    column: str | None = None
    next_value: int | None = None
    ahead: bool = False
    amount: int | None = None
    enabled: bool = True
    via: str = ""

    def target(self) -> str:
        """The sequence as the statement names it."""
        if self.sequence is not None:
            return ".".join(p for p in self.sequence if p)
        if self.table is not None:
            return f"the sequence of {'.'.join(p for p in self.table if p)}.{self.column}"
        return "a sequence named at run time"

    def describe(self) -> str:
        what = self.target()
        if self.op == "setval":
            if self.ahead:
                how = "a value derived from max() or the sequence's own position"
            elif self.next_value is not None:
                how = f"next value {self.next_value}"
            else:
                how = "a run-time value"
            return f"setval() of {what} ({how})"
        if self.op == "restart":
            if self.next_value is None:
                return f"{self.via} RESTART of {what} (back to its start value)"
            return f"{self.via} RESTART WITH {self.next_value} of {what}"
        if self.op == "cycle":
            return f"{self.via} {'CYCLE' if self.enabled else 'NO CYCLE'} on {what}"
        if self.op == "as":
            return f"{self.via} AS <type> on {what}"
        word = "INCREMENT BY" if self.op == "increment" else self.op.upper()
        setting = f"NO {word}" if self.amount is None else f"{word} {self.amount}"
        return f"{self.via} {setting} on {what}"


class SequenceOwner(NamedTuple):
    """``CREATE/ALTER SEQUENCE ... OWNED BY table.column``."""

    sequence: ObjName
    table: ObjName
    column: str


@dataclass(frozen=True)
class FunctionCall:
    """A call of a function: its name (last component, as the statement writes it after case
    folding: ``pg_catalog.pg_terminate_backend`` -> ``pg_terminate_backend``) and its
    arguments as constants (:data:`~dbaops.evaluation.safety.values.NOT_CONST` where not)."""

    name: str
    args: tuple[Value, ...] = ()


class CopyTarget(NamedTuple):
    """Where ``COPY`` writes or reads on the server: a ``program``, a ``file`` it writes
    (``COPY ... TO``) or a ``file_from`` it reads (``COPY ... FROM``)."""

    kind: Literal["program", "file", "file_from"]
    target: str


ObjectKind = Literal[
    "index",
    "table",
    "view",
    "materialized_view",
    "sequence",
    "schema",
    "function",
    "procedure",
    "extension",
    "trigger",
    "publication",
    "subscription",
    "database",
    "role",
]


@dataclass(frozen=True)
class DroppedObject:
    """An object a ``DROP`` removes: its kind and its name as written, split at dots."""

    kind: ObjectKind
    names: tuple[str, ...]


class RelationSource(NamedTuple):
    """A relation through which a statement reaches others: a view (``kind='view'``) and
    the relations its query reads, or a partition or inheritance child (``'parent'``) and
    its parents; names as written."""

    kind: Literal["view", "parent"]
    relation: ObjName
    sources: tuple[ObjName, ...]


@dataclass(frozen=True)
class Facts:
    """What one executed statement does, read off its parse tree once.

    Operations are listed in the order the statement's tree holds them; subtrees the
    statement does not execute (a function body at ``CREATE FUNCTION``, a prepared query at
    ``PREPARE``, a plain ``EXPLAIN``) contribute none. ``signal_targets`` covers the calls of
    the signal functions the trace was parsed for; ``no_where`` marks an ``UPDATE`` /
    ``DELETE`` (a statement that can have a ``WHERE`` clause) without one."""

    table_ops: tuple[TableOp, ...] = ()
    setting_changes: tuple[SettingChange, ...] = ()
    privilege_changes: tuple[PrivilegeChange, ...] = ()
    role_attribute_changes: tuple[RoleAttributeChange, ...] = ()
    sequence_changes: tuple[SequenceChange, ...] = ()
    sequence_owners: tuple[SequenceOwner, ...] = ()
    function_calls: tuple[FunctionCall, ...] = ()
    copy_targets: tuple[CopyTarget, ...] = ()
    signal_targets: tuple[SignalTarget, ...] = ()
    dropped: tuple[DroppedObject, ...] = ()
    created_extensions: tuple[str, ...] = ()
    relation_sources: tuple[RelationSource, ...] = ()
    no_where: bool = False
