"""Declarative workload library: schema, seeded data, roles, transaction and job templates.

A library file (``workloads/<id>.yaml``) describes one database fixture and the units of work
that run against it; scenarios pick templates from it and give them rates, deadlines and
retry policies.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dbaops.dbms.dialect import registered_engine


class StrictModel(BaseModel):
    """Base for spec models: unknown fields are errors, so typos fail at load time."""

    model_config = ConfigDict(extra="forbid")


Bound = int | str  # an int, or the name of a library parameter (e.g. "customers")


class UniformArg(StrictModel):
    """A uniformly drawn integer in [lo, hi]."""

    uniform: tuple[Bound, Bound]


class HotArg(StrictModel):
    """With probability ``share`` an integer from the hot range, else from the whole range."""

    class Spec(StrictModel):
        range: tuple[Bound, Bound]
        hot: tuple[Bound, Bound]
        share: float = Field(ge=0, le=1)

    hot: Spec


class ChoiceArg(StrictModel):
    """One of the listed values."""

    choice: list[Any] = Field(min_length=1)


class ConstArg(StrictModel):
    """A fixed value."""

    const: Any


class PreviousArg(StrictModel):
    """The first column of the first row returned by an earlier statement of the same unit."""

    previous: int = Field(ge=0, description="index of the earlier statement")


ArgSpec = UniformArg | HotArg | ChoiceArg | ConstArg | PreviousArg


class StatementTemplate(StrictModel):
    """One SQL statement with ``$n`` placeholders and their generators."""

    sql: str
    args: list[ArgSpec] = Field(default_factory=list)


class TransactionTemplate(StrictModel):
    """A unit of OLTP work: statements run in one transaction as ``role``."""

    role: str = "app_rw"
    isolation: Literal["read_committed", "repeatable_read", "serializable"] = "read_committed"
    statements: list[StatementTemplate] = Field(min_length=1)


class JobTemplate(StrictModel):
    """A unit of OLAP work: one query whose result can be checked.

    The expected result is the job's own ``sql`` on the prepared state, or, with
    ``reference_sql``, that query's result computed by the harness at the time the job runs
    (on the state when the job starts or when it ends: either is correct), for a job whose
    right answer changes during the run or that must not be taken from a stale derived table.
    """

    role: str = "reporting"
    sql: str
    check_result: bool = True
    reference_sql: str | None = None


class RoleSpec(StrictModel):
    """A role of the fixture. ``dba: true`` makes it the agent's cloud-DBA role (see
    :mod:`dbaops.dbms.postgres.agent_role`): no superuser, no server file or program access."""

    name: str
    superuser: bool = False
    login: bool = True
    connection_limit: int | None = None
    dba: bool = False

    @model_validator(mode="after")
    def _dba_is_not_superuser(self) -> RoleSpec:
        if self.dba and self.superuser:
            raise ValueError(f"role {self.name!r}: a dba role is never a superuser")
        return self


class WorkloadLibrary(StrictModel):
    """A database fixture and its transaction and job templates."""

    id: str
    description: str = ""
    engine: str = Field(
        default="postgres",
        description="the engine whose SQL dialect the library is written in (a registered "
        "engine's name)",
    )
    database: str
    params: dict[str, int] = Field(default_factory=dict)
    roles: list[RoleSpec] = Field(default_factory=list)
    owner: str | None = Field(
        default=None,
        description="role (created NOLOGIN) that owns the business schema's objects; dba "
        "roles are members of it, so they can ALTER, index, VACUUM and ANALYZE them",
    )
    schema_sql: str = Field(alias="schema")
    data_sql: str = Field(alias="data", default="")
    post_sql: str = Field(alias="post", default="")
    transactions: dict[str, TransactionTemplate] = Field(default_factory=dict)
    jobs: dict[str, JobTemplate] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("engine")
    @classmethod
    def _a_registered_engine(cls, value: str) -> str:
        return registered_engine(value)

    @model_validator(mode="after")
    def _bounds_name_params(self) -> WorkloadLibrary:
        for tname, t in self.transactions.items():
            for i, st in enumerate(t.statements):
                for j, arg in enumerate(st.args):
                    for b in _bounds(arg):
                        if isinstance(b, str) and b not in self.params:
                            raise ValueError(
                                f"transactions.{tname}.statements.{i}.args.{j}: unknown "
                                f"parameter {b!r} (known: {', '.join(sorted(self.params))})"
                            )
                    if isinstance(arg, PreviousArg) and arg.previous >= i:
                        raise ValueError(
                            f"transactions.{tname}.statements.{i}.args.{j}: previous="
                            f"{arg.previous} must name an earlier statement"
                        )
        return self

    def render(self, sql: str, params: dict[str, int], seed: int, date: str = "") -> str:
        """Substitute ``{param}``, ``{seed}`` and ``{date}`` (the scenario date) in fixture SQL."""
        return render_sql(sql, {**self.params, **params, "seed": seed, "date": date})

    def extended(self, ext: LibraryExtension) -> WorkloadLibrary:
        """This library with a scenario's local parts added (never replaced): its SQL runs after
        the library's in each phase (schema, data, post), its roles, parameters and templates
        join the library's under names of their own."""
        clashes = [
            f"{what}.{name}"
            for what, mine, theirs in (
                ("roles", {r.name for r in self.roles}, {r.name for r in ext.roles}),
                ("params", set(self.params), set(ext.params)),
                ("transactions", set(self.transactions), set(ext.transactions)),
                ("jobs", set(self.jobs), set(ext.jobs)),
            )
            for name in sorted(mine & theirs)
        ]
        if clashes:
            raise ValueError(
                f"already defined by library {self.id!r}: {', '.join(clashes)} (a scenario adds "
                "parts under names of its own; it does not replace the shared library's)"
            )
        return self.model_copy(
            update={
                "params": {**self.params, **ext.params},
                "roles": [*self.roles, *ext.roles],
                "schema_sql": _join_sql(self.schema_sql, ext.schema_sql),
                "data_sql": _join_sql(self.data_sql, ext.data_sql),
                "post_sql": _join_sql(self.post_sql, ext.post_sql),
                "transactions": {**self.transactions, **ext.transactions},
                "jobs": {**self.jobs, **ext.jobs},
            }
        )

    def fixture_part(self) -> dict[str, Any]:
        """What the fixture database is built from (templates run later, at run time). The
        engine counts when it is not the default, so keys made before libraries named their
        engine stay current."""
        exclude = {"transactions", "jobs"} | ({"engine"} if self.engine == "postgres" else set())
        return self.model_dump(mode="json", by_alias=True, exclude=exclude)


class LibraryExtension(StrictModel):
    """A scenario's own fixture parts, added to the shared library's without touching it."""

    params: dict[str, int] = Field(default_factory=dict)
    roles: list[RoleSpec] = Field(default_factory=list)
    schema_sql: str = Field(alias="schema", default="")
    data_sql: str = Field(alias="data", default="")
    post_sql: str = Field(alias="post", default="")
    transactions: dict[str, TransactionTemplate] = Field(default_factory=dict)
    jobs: dict[str, JobTemplate] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def render_sql(sql: str, values: dict[str, Any]) -> str:
    """Replace ``{name}`` for the names in ``values`` only, so SQL literals such as
    ``'{autovacuum_enabled=false}'`` pass through untouched."""
    return _PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), sql)


def _join_sql(first: str, second: str) -> str:
    if not second.strip():
        return first
    if not first.strip():
        return second
    head = first.rstrip()
    return (head if head.endswith(";") else head + ";") + "\n" + second


def _bounds(arg: ArgSpec) -> list[Bound]:
    if isinstance(arg, UniformArg):
        return list(arg.uniform)
    if isinstance(arg, HotArg):
        return [*arg.hot.range, *arg.hot.hot]
    return []


#: Draws one argument from a unit's seeded stream.
Drawer = Callable[[random.Random], Any]


def arg_drawer(arg: ArgSpec, params: dict[str, int]) -> Drawer | None:
    """A generator compiled once per template (bounds resolved), so a unit's draws cost only
    the random numbers; None for a :class:`PreviousArg`, filled at execution time."""

    def span(bounds: tuple[Bound, Bound]) -> tuple[int, int]:
        """(low, count) of an inclusive integer range whose bounds may name parameters."""
        lo, hi = (params[x] if isinstance(x, str) else x for x in bounds)
        if hi < lo:
            raise ValueError(f"empty range [{lo}, {hi}] {bounds!r}")
        return lo, hi - lo + 1

    # integers as lo + floor(u * count) from one 53-bit uniform: randint's rejection sampling
    # costs several times more, and the bias (count / 2**53) is far below anything measured
    if isinstance(arg, UniformArg):
        lo, count = span(arg.uniform)
        return lambda rng: lo + int(rng.random() * count)
    if isinstance(arg, HotArg):
        share, whole, hot = arg.hot.share, span(arg.hot.range), span(arg.hot.hot)

        def draw_hot(rng: random.Random) -> int:
            low, n = hot if rng.random() < share else whole
            return low + int(rng.random() * n)

        return draw_hot
    if isinstance(arg, ChoiceArg):
        values = list(arg.choice)
        return lambda rng: rng.choice(values)
    if isinstance(arg, ConstArg):
        value = arg.const
        return lambda rng: value
    return None


def template_drawers(
    template: TransactionTemplate, params: dict[str, int]
) -> list[list[Drawer | None]]:
    """Every statement's compiled argument generators, in order."""
    return [[arg_drawer(a, params) for a in st.args] for st in template.statements]
