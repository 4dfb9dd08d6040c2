"""Check parts: the predicates of preconditions, manifestation, alerts and evaluation.

Each part is a pydantic model with a ``check`` discriminator, so a scenario file that names an
unknown check fails at load time with the known alternatives.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from dbaops.dbms.metric_spec import MetricSpec
from dbaops.scenario.faults import Server
from dbaops.workloads.spec import StrictModel

# Every check has a ``name`` (its key in the verdict), a ``description`` and, except the report
# check, ``by_s`` (terminal checks: must also hold at that scenario time). Checks evaluated by
# the harness during the run write a CheckRecord; the report check is judged at scoring time.
Comparison = Literal["==", "!=", ">", ">=", "<", "<="]


def _by_s() -> Any:
    return Field(
        default=None, ge=0, description="terminal checks: must also hold at this scenario time"
    )


def _valid_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


Regex = Annotated[str, AfterValidator(_valid_regex)]


class SqlCheck(StrictModel):
    """A SQL query returning one value compared with ``expect`` (default: true)."""

    check: Literal["sql"] = "sql"
    server: Server = "primary"
    name: str
    sql: str
    role: str = "postgres"
    login: bool = Field(
        default=False,
        description="TiDB: log in as ``role`` (its own limits apply) instead of the harness's "
        "session limits; PostgreSQL probes always log in as their role",
    )
    database: str | None = None
    op: Comparison = "=="
    expect: Any = True
    by_s: float | None = _by_s()
    description: str = ""


class BaselineWindow(StrictModel):
    """A scenario-time window over which a check's statistic is also measured; the check's
    ``value`` is then a ratio to it (``relative_to: baseline``). Persistent scenarios: before
    the first fault. Bounded ones: at or before t = 0 (the warm-up shows the faulty system, so
    ``p95_ms < 0.2`` reads "at most a fifth of what it was while broken"; the workload history
    shows the system before the fault)."""

    since_s: float
    until_s: float

    @model_validator(mode="after")
    def _ordered(self) -> BaselineWindow:
        if self.until_s <= self.since_s:
            raise ValueError(f"until_s ({self.until_s}) must be after since_s ({self.since_s})")
        return self


class _Relative(StrictModel):
    """A statistic compared with ``value`` directly, or (``relative_to: baseline``) as its
    ratio to the same statistic over the ``baseline`` window: ``p95_ms <= 2`` then means "at
    most twice the pre-fault p95". 0 / 0 counts as a ratio of 1, x / 0 as infinite. A
    latency ratio that must be small (``<``, ``<=``) counts the baseline's units the client
    gave up on at the time they waited (a lower bound: the broken system was at least that
    slow), so a baseline that timed out whole still judges."""

    relative_to: Literal["baseline"] | None = Field(
        default=None, description="'baseline': value is a ratio to the baseline statistic"
    )
    baseline: BaselineWindow | None = Field(
        default=None,
        validate_default=True,
        description="the pre-fault window of the baseline (scenario seconds)",
    )

    @field_validator("baseline")
    @classmethod
    def _baseline_declared(
        cls, baseline: BaselineWindow | None, info: ValidationInfo
    ) -> BaselineWindow | None:
        relative = info.data.get("relative_to")
        if relative == "baseline" and baseline is None:
            raise ValueError("relative_to: baseline needs this window {since_s, until_s}")
        if baseline is not None and relative is None:
            raise ValueError("a baseline window needs relative_to: baseline")
        return baseline


WorkloadStat = Literal[
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "on_time_ratio",
    "error_ratio",
    "server_error_ratio",
    "drop_ratio",
    "miss_ratio",
    "sqlstate_ratio",
    "count",
]


class WorkloadCheck(_Relative):
    """A statistic of a workload's recent SLO samples compared with a value.

    ``stat``: p50_ms, p95_ms, p99_ms (over completed units: on time or late; errors and drops
    are separate statistics), on_time_ratio, error_ratio, server_error_ratio (errors other
    than the client giving up on a unit after its timeout: a slow answer is a miss, not a
    refusal), drop_ratio, miss_ratio (anything not on time), sqlstate_ratio (units whose
    error SQLSTATE is ``sqlstate``; a two-character ``sqlstate`` is a class, e.g. ``40``),
    count. ``over_s``: the trailing scenario-time window
    the statistic covers (units *scheduled* in it). ``min_units``: the fewest units the window
    must hold for the check to judge at all (fewer: the check fails, saying so); a ratio
    threshold must then tolerate one bad unit out of ``min_units`` (a strict zero excepted).
    """

    check: Literal["workload"] = "workload"
    name: str
    workload: str
    stat: WorkloadStat
    sqlstate: str | None = Field(
        default=None,
        validate_default=True,
        pattern=r"^[0-9A-Z]{2}([0-9A-Z]{3})?$",
        description="sqlstate_ratio: the SQLSTATE (5 characters) or its class (2 characters)",
    )
    op: Comparison
    value: float
    over_s: float = Field(default=10.0, gt=0)
    min_units: int | None = Field(
        default=None,
        ge=1,
        description="the fewest units the window must hold for the check to judge (fewer: "
        "it fails, saying so); a ratio threshold must tolerate one bad unit out of them",
    )
    by_s: float | None = _by_s()
    description: str = ""

    @model_validator(mode="after")
    def _one_unit_does_not_flip(self) -> WorkloadCheck:
        """With ``min_units``, one late or failed unit of that many must not decide the check
        (``error_ratio <= 0``, every unit must succeed, is a deliberate exception)."""
        n = self.min_units
        if n is None or self.relative_to is not None:
            return self
        if self.stat == "on_time_ratio" and self.op in (">=", ">"):
            slack = (1.0 - self.value) * n
        elif self.stat.endswith("_ratio") and self.op in ("<=", "<") and self.value > 0:
            slack = self.value * n
        else:
            return self
        strict = self.op in (">", "<")  # one bad unit of exactly the slack still flips it
        if slack < 1.0 - 1e-9 or (strict and slack <= 1.0 + 1e-9):
            raise ValueError(
                f"{self.stat} {self.op} {self.value:g} over at least {n} units: one bad unit "
                "decides it; raise min_units (or over_s) or loosen the threshold"
            )
        return self

    @field_validator("sqlstate")
    @classmethod
    def _sqlstate_with_its_stat(cls, sqlstate: str | None, info: ValidationInfo) -> str | None:
        stat = info.data.get("stat")
        if stat == "sqlstate_ratio" and sqlstate is None:
            raise ValueError("stat sqlstate_ratio needs the SQLSTATE to count")
        if sqlstate is not None and stat is not None and stat != "sqlstate_ratio":
            raise ValueError(f"only stat sqlstate_ratio uses a SQLSTATE (stat is {stat})")
        return sqlstate


#: Node types as ``EXPLAIN (FORMAT JSON)`` names them ("Node Type"). Aggregates are all
#: "Aggregate" (with a "Strategy"), writes "ModifyTable" (with an "Operation").
PLAN_NODE_TYPES = frozenset(
    {
        "Result", "ProjectSet", "ModifyTable", "Append", "Merge Append", "Recursive Union",
        "BitmapAnd", "BitmapOr", "Nested Loop", "Merge Join", "Hash Join", "Seq Scan",
        "Sample Scan", "Gather", "Gather Merge", "Index Scan", "Index Only Scan",
        "Bitmap Index Scan", "Bitmap Heap Scan", "Tid Scan", "Tid Range Scan", "Subquery Scan",
        "Function Scan", "Table Function Scan", "Values Scan", "CTE Scan",
        "Named Tuplestore Scan", "WorkTable Scan", "Foreign Scan", "Custom Scan", "Materialize",
        "Memoize", "Sort", "Incremental Sort", "Group", "Aggregate", "WindowAgg", "Unique",
        "SetOp", "LockRows", "Limit", "Hash",
    }
)  # fmt: skip


def _known_node_types(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in PLAN_NODE_TYPES]
    if unknown:
        hints = []
        for n in unknown:
            close = difflib.get_close_matches(n, sorted(PLAN_NODE_TYPES), n=3, cutoff=0.5)
            hints.append(f"{n!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise ValueError(f"unknown plan node type {'; '.join(hints)}")
    return names


NodeTypes = Annotated[list[str], AfterValidator(_known_node_types)]


class PlanCheck(StrictModel):
    """Predicates over the plan of ``sql`` (``EXPLAIN (FORMAT JSON)``), planned as ``role``.

    ``has_node``: some node is of one of these types (any of); ``lacks_node``: no node is of
    any of them. With ``relation`` both look only at nodes on that table (unqualified name; a
    Bitmap Index Scan counts for its heap's table). ``has_index`` / ``lacks_index``: the plan
    uses one of / none of these index names. ``max_row_misestimate`` (needs ``analyze``): on
    every executed node (on ``relation`` when given), estimated and actual rows per loop are
    within this factor of each other. ``min_estimated_rows`` / ``max_estimated_rows`` (need
    ``relation``): every node on that table estimates at least / at most that many rows (a
    planner that sees fresh statistics, or no longer overestimates). ``scan_direction``: some
    index scan (on ``relation`` when given) reads its index in that direction (``Backward``:
    an ``ORDER BY … DESC`` served by the index). ``analyze`` runs the query, in a transaction
    that is rolled back. Every predicate given must hold.
    """

    check: Literal["plan"] = "plan"
    server: Server = "primary"
    name: str
    sql: str = Field(description="the query to explain (no parameters, no EXPLAIN prefix)")
    role: str = "postgres"
    login: bool = Field(
        default=False,
        description="TiDB: log in as ``role`` (its own limits apply) instead of the harness's "
        "session limits; PostgreSQL probes always log in as their role",
    )
    database: str | None = None
    analyze: bool = Field(default=False, description="EXPLAIN ANALYZE (rolled back)")
    relation: str | None = Field(default=None, description="restrict node predicates to a table")
    has_node: NodeTypes = Field(default_factory=list, description="some node is one of these")
    lacks_node: NodeTypes = Field(default_factory=list, description="no node is any of these")
    has_index: list[str] = Field(default_factory=list, description="one of these indexes is used")
    lacks_index: list[str] = Field(default_factory=list, description="none of these is used")
    max_row_misestimate: float | None = Field(
        default=None, ge=1, description="bound on max(est/actual, actual/est) rows (ANALYZE)"
    )
    min_estimated_rows: float | None = Field(
        default=None, ge=0, description="every node on relation estimates at least this many"
    )
    max_estimated_rows: float | None = Field(
        default=None, ge=0, description="every node on relation estimates at most this many"
    )
    scan_direction: Literal["Forward", "Backward"] | None = Field(
        default=None, description="some index scan reads its index in this direction"
    )

    by_s: float | None = _by_s()
    description: str = ""

    @field_validator("sql")
    @classmethod
    def _no_explain(cls, sql: str) -> str:
        if sql.lstrip().lower().startswith("explain"):
            raise ValueError("give the query itself; the check adds EXPLAIN")
        return sql

    @field_validator("max_row_misestimate")
    @classmethod
    def _needs_analyze(cls, bound: float | None, info: ValidationInfo) -> float | None:
        if bound is not None and info.data.get("analyze") is False:
            raise ValueError("actual rows need analyze: true")
        return bound

    @model_validator(mode="after")
    def _has_a_predicate(self) -> PlanCheck:
        if not (
            self.has_node
            or self.lacks_node
            or self.has_index
            or self.lacks_index
            or self.max_row_misestimate is not None
            or self.min_estimated_rows is not None
            or self.max_estimated_rows is not None
            or self.scan_direction is not None
        ):
            raise ValueError(
                "a plan check needs a predicate: has_node, lacks_node, has_index, lacks_index, "
                "max_row_misestimate, min_estimated_rows, max_estimated_rows or scan_direction"
            )
        estimated = self.min_estimated_rows is not None or self.max_estimated_rows is not None
        if estimated and self.relation is None:
            raise ValueError("min_estimated_rows / max_estimated_rows need the relation")
        return self


class ServerLogCheck(StrictModel):
    """The number of server-log lines matching ``pattern`` (a Python regular expression,
    searched in the whole line) in a scenario-time window, compared with ``value``.

    The window is the trailing ``over_s``, or ``since_s`` up to ``until_s`` (default: now). It
    reads the run directory's copy of the log; a line without a timestamp (a continued
    statement) belongs to the time of the line before it.
    """

    check: Literal["server_log"] = "server_log"
    name: str
    pattern: Regex
    since_s: float | None = None
    until_s: float | None = None
    over_s: float | None = Field(default=None, gt=0)
    op: Comparison
    value: int = Field(ge=0)
    by_s: float | None = _by_s()
    description: str = ""

    @model_validator(mode="after")
    def _one_window(self) -> ServerLogCheck:
        if (self.over_s is None) == (self.since_s is None):
            raise ValueError("give a window: over_s (trailing) or since_s [until_s], not both")
        if self.until_s is not None:
            if self.since_s is None:
                raise ValueError("until_s: needs since_s (over_s always ends now)")
            if self.until_s <= self.since_s:
                raise ValueError(f"until_s ({self.until_s}) must be after since_s")
        return self


MetricStat = Literal["increase", "rate_per_s", "rate_per_min", "mean", "min", "max", "last"]
_COUNTING_STATS = ("increase", "rate_per_s", "rate_per_min")


class MetricCheck(_Relative):
    """A statistic of a sampled metric (the run's metric samples, ``dbaops.dbms.postgres.sampler``)
    over the trailing ``over_s``, compared with ``value``.

    ``metric``: a registered metric name (``db.temp_bytes``); ``label``: one series
    (``table=public.orders``; default: the sum over all series of the metric). Counters and
    deltas take ``increase`` (over the increments between samples that end in the window),
    ``rate_per_s`` or ``rate_per_min``; gauges ``mean``, ``min``, ``max`` or ``last``.
    """

    check: Literal["metric"] = "metric"
    name: str
    metric: str
    label: str | None = None
    stat: MetricStat
    op: Comparison
    value: float
    over_s: float = Field(default=60.0, gt=0)
    by_s: float | None = _by_s()
    description: str = ""


def metric_check_problems(
    check: MetricCheck, where: str, registry: Mapping[str, MetricSpec], engine: str
) -> list[str]:
    """What is wrong with ``check`` (at ``where`` in the file) against the metrics ``engine``'s
    sampler records (``registry``): an unknown metric, a label it does not have, a statistic
    of the other kind."""
    spec = registry.get(check.metric)
    if spec is None:
        close = difflib.get_close_matches(check.metric, sorted(registry), n=4)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        return [f"{where}.metric: unknown metric {check.metric!r} on {engine}{hint}"]
    problems: list[str] = []
    if check.label is not None:
        keys = [k for k in spec.label.split(",") if k]
        if not keys:
            problems.append(f"{where}.label: {spec.name} has no labels")
        elif not any(check.label.startswith(f"{k}=") for k in keys):
            problems.append(
                f"{where}.label: {spec.name} labels look like {keys[0]}=..., not {check.label!r}"
            )
    counting = spec.kind in ("counter", "delta")
    if counting != (check.stat in _COUNTING_STATS):
        fits = _COUNTING_STATS if counting else ("mean", "min", "max", "last")
        problems.append(
            f"{where}.stat: {spec.name} is a {spec.kind}; its statistics are {', '.join(fits)}"
        )
    return problems


class ReportCheck(StrictModel):
    """A predicate over a field of the agent's structured report (``submit_report``).

    Judged at scoring time from the recorded reports, so it belongs in ``evaluation.terminal``
    only; a run without a (matching) report fails it. ``field`` is a key of the report, dotted
    for nested objects. ``task_id`` restricts to the reports for one task; ``reports``: judge
    the ``last`` of them (default) or pass if ``any`` does.

    Predicates (every one given must hold): ``contains_all`` / ``contains_any`` /
    ``contains_none``: items of a list field (compared as case-folded text), or whole words of
    a text field; ``matches``: a regular expression searched in the field's text; ``op`` with
    ``value``: the field as a number.
    """

    check: Literal["report"] = "report"
    name: str
    field: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    task_id: str | None = None
    reports: Literal["last", "any"] = "last"
    contains_all: list[str | int | float] | None = None
    contains_any: list[str | int | float] | None = None
    contains_none: list[str | int | float] | None = None
    matches: Regex | None = None
    op: Comparison | None = None
    value: float | None = None
    description: str = ""

    @property
    def by_s(self) -> None:
        """Report checks have no live deadline: they are judged once, at scoring."""
        return None

    @model_validator(mode="after")
    def _has_a_predicate(self) -> ReportCheck:
        if (self.op is None) != (self.value is None):
            raise ValueError("op and value: a numeric predicate needs both")
        if all(
            x is None
            for x in (
                self.contains_all,
                self.contains_any,
                self.contains_none,
                self.matches,
                self.op,
            )
        ):
            raise ValueError(
                "a report check needs a predicate: contains_all, contains_any, contains_none, "
                "matches or op/value"
            )
        return self


class LedgerCheck(StrictModel):
    """State Integrity against the driver ledger: a SQL measure of the state (one number)
    changes by what the workload clients committed.

    The harness measures ``sql`` once on the prepared state, before any workload starts (the
    baseline), and again when the check runs; the change must lie between what the clients
    had committed before the measure and what they had committed, left in doubt or still had
    in flight after it (``units``: transaction template -> change per committed unit; an
    empty map means the measure must not change, and then it may be any value, not only a
    number). Evaluation sections only (``evaluation.terminal`` / ``evaluation.integrity``).

    The measure is ``sql`` (one value), or with ``count_rows_of`` the rows stored in the
    tables that query lists (``schema, name`` per row, read when the check runs, so a table
    the agent moved is still counted), each counted by the harness with a qualified
    ``count(*)`` of that table alone, all in one statement (one snapshot): rows wherever the
    agent moved them, with no routine outside the catalog (an extension's lives where the
    agent's code can).
    """

    check: Literal["ledger"] = "ledger"
    name: str
    sql: str | None = None
    count_rows_of: str | None = None
    units: dict[str, float] = Field(default_factory=dict)
    by_s: float | None = _by_s()
    description: str = ""

    @model_validator(mode="after")
    def _one_measure(self) -> LedgerCheck:
        if (self.sql is None) == (self.count_rows_of is None):
            raise ValueError(
                "a ledger check measures either sql (one value) or count_rows_of (a query "
                "listing the tables whose rows it counts): give exactly one"
            )
        return self


#: Checks the harness evaluates during the run (preconditions, manifestation, alert ``when``,
#: terminal, integrity).
LiveCheckSpec = Annotated[
    SqlCheck | WorkloadCheck | PlanCheck | ServerLogCheck | MetricCheck,
    Field(discriminator="check"),
]
#: Every check; the report check is judged at scoring time (evaluation.terminal only).
CheckSpec = Annotated[
    SqlCheck | WorkloadCheck | PlanCheck | ServerLogCheck | MetricCheck | ReportCheck | LedgerCheck,
    Field(discriminator="check"),
]


def check_placement_problems(scenario: Any) -> list[str]:
    """Where checks stand in a scenario that their parts alone cannot validate: report checks
    only in ``evaluation.terminal``; a persistent scenario's baseline window ends at or before
    the first event that injects a fault; a bounded scenario's ends at or before t = 0 (its
    fault is in place before the warm-up, so a window in the warm-up measures the faulty
    system, and one in the workload history the system before the fault)."""
    sections: list[tuple[str, Any]] = [
        *((f"preparation.preconditions[{i}]", c) for i, c in
          enumerate(scenario.preparation.preconditions)),
        *((f"preparation.manifestation[{i}]", c) for i, c in
          enumerate(scenario.preparation.manifestation)),
        *((f"events[{i}].alert.when", e.alert.when) for i, e in enumerate(scenario.events)
          if e.alert is not None and e.alert.when is not None),
        *((f"evaluation.terminal[{i}]", c) for i, c in enumerate(scenario.evaluation.terminal)),
        *((f"evaluation.integrity[{i}]", c) for i, c in
          enumerate(scenario.evaluation.integrity)),
    ]  # fmt: skip
    fault_times = [e.at for e in scenario.events if e.fault is not None]
    first_fault = min(fault_times) if fault_times else None
    problems: list[str] = []
    for where, c in sections:
        if isinstance(c, ReportCheck) and not where.startswith("evaluation.terminal"):
            problems.append(
                f"{where}: a report check is judged at scoring from the agent's report; only "
                "evaluation.terminal may hold it"
            )
        if isinstance(c, LedgerCheck) and not where.startswith("evaluation."):
            problems.append(
                f"{where}: a ledger check compares the state with its baseline on the prepared "
                "state and the clients' commits since; only evaluation.terminal and "
                "evaluation.integrity may hold it"
            )
        baseline = getattr(c, "baseline", None)
        if baseline is None:
            continue
        if scenario.mode != "persistent":
            if baseline.until_s > 0:
                problems.append(
                    f"{where}.baseline: a bounded scenario's baseline ends at or before t = 0 "
                    f"(the warm-up or the history), not at {baseline.until_s} s"
                )
        elif first_fault is None:
            problems.append(f"{where}.baseline: no event injects a fault to measure before")
        elif baseline.until_s > first_fault:
            problems.append(
                f"{where}.baseline: the window ends at {baseline.until_s} s, after the first "
                f"fault (t = {first_fault} s)"
            )
    return problems


def compare(observed: Any, op: Comparison, expected: Any) -> bool:
    """Apply a comparison; None never satisfies an ordering."""
    if op == "==":
        return bool(observed == expected)
    if op == "!=":
        return bool(observed != expected)
    if observed is None or expected is None:
        return False
    if op == ">":
        return bool(observed > expected)
    if op == ">=":
        return bool(observed >= expected)
    if op == "<":
        return bool(observed < expected)
    return bool(observed <= expected)
