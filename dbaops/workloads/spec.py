"""Declarative workload library: schema, seeded data, roles, transaction and job templates.

A library file (``workloads/<id>.yaml``) describes one database fixture and the units of work
that run against it; scenarios pick templates from it and give them rates, deadlines and
retry policies.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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
    """A unit of OLAP work: one query whose result can be checked."""

    role: str = "reporting"
    sql: str
    check_result: bool = True


class RoleSpec(StrictModel):
    """A role of the fixture. ``dba: true`` makes it the agent's cloud-DBA role (see
    :mod:`dbaops.engine.agent_role`): no superuser, no server file or program access."""

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

    def render(self, sql: str, params: dict[str, int], seed: int) -> str:
        """Substitute ``{param}`` and ``{seed}`` placeholders in fixture SQL."""
        values: dict[str, Any] = {**self.params, **params, "seed": seed}
        return sql.format(**values)


def _bounds(arg: ArgSpec) -> list[Bound]:
    if isinstance(arg, UniformArg):
        return list(arg.uniform)
    if isinstance(arg, HotArg):
        return [*arg.hot.range, *arg.hot.hot]
    return []


class ArgSampler:
    """Draws statement arguments from their generators with a seeded RNG."""

    def __init__(self, params: dict[str, int], rng: random.Random) -> None:
        self._params = params
        self._rng = rng

    def _b(self, b: Bound) -> int:
        return self._params[b] if isinstance(b, str) else b

    def draw(self, arg: ArgSpec, previous: list[Any]) -> Any:
        if isinstance(arg, UniformArg):
            return self._rng.randint(self._b(arg.uniform[0]), self._b(arg.uniform[1]))
        if isinstance(arg, HotArg):
            lo, hi = arg.hot.hot if self._rng.random() < arg.hot.share else arg.hot.range
            return self._rng.randint(self._b(lo), self._b(hi))
        if isinstance(arg, ChoiceArg):
            return self._rng.choice(arg.choice)
        if isinstance(arg, ConstArg):
            return arg.const
        return previous[arg.previous]
