"""The scenario: database spec, workloads, preparation, event program, evaluation contract.

A bounded scenario is a single-event timeline (one task at t = 0 with a time budget); a
persistent scenario is a timed program of faults, alerts and inspections (paper §3.1).
All times are scenario seconds; ``--time-scale`` compresses them, deadlines in ms do not scale.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from dbaops.containers.resources import ServerResources
from dbaops.dbms.dialect import registered_engine
from dbaops.evaluation.safety import SafetyContract
from dbaops.scenario.checks import CheckSpec, WorkloadCheck
from dbaops.scenario.faults import FaultSpec, Server
from dbaops.scenario.specs import DiagnosisSpec, DifficultySpec, ServiceObjective
from dbaops.workloads.spec import LibraryExtension, StrictModel

#: The scenario file format this code reads; older files are migrated on load
#: (:func:`dbaops.scenario.loader.migrate`).
FORMAT_VERSION = 2

#: The date a scenario's fixture is built against when it declares none (never the machine's).
DEFAULT_SCENARIO_DATE = dt.date(2026, 1, 1)

#: A bounded run's time budget when the scenario names none: generous for one ticket.
DEFAULT_BOUNDED_TIME_BUDGET_S = 1800.0


class RetryPolicy(StrictModel):
    """Client-side retries by SQLSTATE; retries and backoff count inside the deadline."""

    sqlstates: list[str] = Field(default_factory=lambda: ["40001", "40P01", "55P03"])
    max_retries: int = Field(default=2, ge=0, le=20)
    backoff_ms: float = Field(default=50, ge=0)


class _Workload(StrictModel):
    """What every workload has: a name, and the name its client gives itself in
    ``pg_stat_activity`` (default ``<name>-<client_suffix>``, as a real application's)."""

    client_suffix: ClassVar[str] = "service"
    name: str
    application_name: str | None = Field(
        default=None,
        description="what the client calls itself (default: <name>-service, "
        "<name>-reports for OLAP, <name>-worker for background noise)",
    )
    server: Server = Field(
        default="primary", description="standby: the workload reads from the replica"
    )

    @property
    def app_name(self) -> str:
        return self.application_name or f"{self.name.replace('_', '-')}-{self.client_suffix}"


class ConnectionLeak(StrictModel):
    """The application opens connections it never closes, ``per_s`` per scenario second, up to
    ``max`` (a leak that ramps), each idle or idle in a transaction it never ends."""

    per_s: float = Field(gt=0, le=100)
    max: int = Field(ge=1, le=1000)
    state: Literal["idle", "idle_in_transaction"] = "idle"
    role: str | None = Field(default=None, description="default: the first template's role")
    start_s: float = Field(default=0.0, ge=0, description="scenario time the leak starts")


class ClientBehaviour(StrictModel):
    """How the application's client behaves when things go wrong: faults that live in the
    client, so the server and the agent see them only through their effects."""

    attempt_timeout_ms: float | None = Field(
        default=None,
        gt=0,
        description="the client gives up on an attempt after this many wall ms (like a "
        "deadline, it does not scale with --time-scale)",
    )
    on_attempt_timeout: Literal["abandon", "cancel"] = Field(
        default="abandon",
        description="abandon: drop the connection without a cancel request, so the server "
        "keeps running the query; cancel: send a cancel request first",
    )
    immediate_retries: int = Field(
        default=0, ge=0, le=50, description="attempts re-issued at once after an attempt timeout"
    )
    recycle_after_queries: int | None = Field(
        default=None,
        ge=1,
        description="the pool replaces a connection after it has run this many statements "
        "(connection churn: every new session pays authentication and per-role settings)",
    )
    prefill: bool = Field(
        default=False,
        description="the pool opens all its connections when the workload starts (a pool "
        "whose minimum idle is its size), not each at its first unit; for faults that live "
        "in sessions opened before them (a session copies global settings when it connects)",
    )
    leak: ConnectionLeak | None = None


class _TemplateWorkload(_Workload):
    """A workload that runs transaction templates: their mix, and the wire protocol."""

    mix: dict[str, float] = Field(min_length=1, description="transaction template -> weight")
    protocol: Literal["prepared", "simple"] = Field(
        default="prepared",
        description="prepared: each statement is prepared once per connection and executed "
        "with parameters (an application using a driver's statement cache, as pgbench -M "
        "prepared); simple: the arguments are written into the SQL text and every statement "
        "is parsed and planned on each run (pgbench -M simple), for faults that need custom "
        "plans or literal query texts",
    )


class OltpWorkload(_TemplateWorkload):
    """Open-loop arrivals of transactions with deadlines from their scheduled start."""

    type: Literal["oltp"] = "oltp"
    rate_per_s: float = Field(gt=0, le=20000, description="arrivals per wall second")
    arrival: Literal["poisson", "fixed"] = "poisson"
    deadline_ms: float = Field(gt=0)
    timeout_ms: float | None = Field(
        default=None, gt=0, description="client gives up; default 4x deadline"
    )
    connections: int = Field(default=8, ge=1, le=200)
    max_inflight: int = Field(default=256, ge=1)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    start_s: float | None = None
    stop_s: float | None = None
    connect_per_unit: bool = Field(
        default=False, description="open a new connection per unit (clients without a pool)"
    )
    client: ClientBehaviour = Field(default_factory=ClientBehaviour)

    @model_validator(mode="after")
    def _a_pool_to_prefill(self) -> OltpWorkload:
        if self.client.prefill and self.connect_per_unit:
            raise ValueError("client.prefill needs a pool; connect_per_unit has none")
        return self


class OlapJob(StrictModel):
    """A job run at given times or periodically; on time if done by its deadline or due time."""

    template: str
    name: str | None = None
    at_s: list[float] = Field(default_factory=list)
    every_s: float | None = Field(default=None, gt=0)
    offset_s: float = Field(
        default=0.0,
        description="scenario time of a periodic job's first run (negative: in the warm-up, "
        "no earlier than -preparation.warmup_s)",
    )
    deadline_ms: float | None = Field(default=None, gt=0)
    due_s: float | None = None
    attempt_timeout_ms: float | None = Field(
        default=None,
        gt=0,
        description="the scheduler cancels an attempt after this many wall ms (a cancel "
        "request: the server stops the query); like a deadline, it does not scale",
    )
    resubmit: bool = Field(
        default=False,
        description="the scheduler resubmits a failed, cancelled or timed-out attempt until "
        "the job's deadline or due time (a report scheduler's retries); the unit is judged "
        "on its last attempt",
    )
    resubmit_pause_ms: float = Field(
        default=1000, ge=0, le=60000, description="wall ms between a failure and the resubmission"
    )

    @model_validator(mode="after")
    def _has_schedule(self) -> OlapJob:
        if not self.at_s and self.every_s is None:
            raise ValueError("a job needs at_s or every_s")
        if self.deadline_ms is None and self.due_s is None:
            raise ValueError("a job needs deadline_ms (wall) or due_s (scenario time)")
        if self.due_s is not None and any(t >= self.due_s for t in self.at_s):
            raise ValueError(f"due_s {self.due_s:g} is not after every at_s {self.at_s}")
        return self


class OlapWorkload(_Workload):
    """Scheduled analytical jobs with result checks."""

    type: Literal["olap"] = "olap"
    jobs: list[OlapJob] = Field(min_length=1)
    connections: int = Field(default=2, ge=1, le=50)
    client_suffix: ClassVar[str] = "reports"


class BackgroundWorkload(_TemplateWorkload):
    """Closed-loop noise so observations are not clean (competing queries, vacuum-heavy jobs)."""

    type: Literal["background"] = "background"
    sessions: int = Field(default=1, ge=1, le=50)
    pause_ms: float = Field(default=100, ge=0)
    client_suffix: ClassVar[str] = "worker"


WorkloadSpec = Annotated[
    OltpWorkload | OlapWorkload | BackgroundWorkload, Field(discriminator="type")
]


class ReplicaSpec(StrictModel):
    """A real streaming standby (the replica profile): the harness makes it with
    ``pg_basebackup -R`` once the primary is prepared, keeps it in the dirty snapshot, and
    starts it with the primary on every run, on its own port. Parts, checks, workloads and the
    agent's tools reach it with ``server: standby``."""

    application_name: str = Field(
        default="standby1", pattern=r"^[a-z0-9_]+$", description="its name in pg_stat_replication"
    )
    settings: dict[str, str] = Field(
        default_factory=dict, description="the standby's own postgresql.conf additions"
    )
    slot: str | None = Field(
        default=None, pattern=r"^[a-z0-9_]+$", description="a physical replication slot"
    )
    synchronous: bool = Field(
        default=False, description="the primary names it in synchronous_standby_names"
    )
    scaled_settings: dict[str, float] = Field(
        default_factory=dict,
        description="the standby's server timers, in scenario seconds (see "
        "database.scaled_settings)",
    )


class DatabaseSpec(StrictModel):
    """Which fixture to build and how."""

    library: str = Field(description="workload library id (workloads/<id>.yaml)")
    params: dict[str, int] = Field(default_factory=dict)
    settings: dict[str, str] = Field(default_factory=dict, description="extra postgresql.conf")
    scaled_settings: dict[str, float] = Field(
        default_factory=dict,
        description="server timers the scenario relies on, in scenario seconds (e.g. "
        "max_standby_streaming_delay: 30): every run writes each into postgresql.conf as the "
        "value × --time-scale, in milliseconds, and reloads, so a compressed run's server waits "
        "as long in scenario time as a real one (a run at 0.05 shows 1500ms for 30)",
    )
    seed: int = 42
    date: dt.date = Field(
        default=DEFAULT_SCENARIO_DATE,
        description="the scenario's 'today': fixture and construction SQL see it as {date}, so "
        "date-relative objects (partitions, retention) never depend on the machine's date",
    )
    replica: ReplicaSpec | None = Field(
        default=None, description="a streaming standby of the primary (the replica profile)"
    )
    extend: LibraryExtension = Field(
        default_factory=LibraryExtension,
        description="the scenario's own tables, data, roles, parameters and templates, added "
        "to the shared library's (which stays untouched)",
    )


class History(StrictModel):
    """Workload history before the incident (see :mod:`dbaops.execution.history`): the
    scenario's OLTP and background workloads run on the clean fixture, before construction,
    for ``duration_s`` scenario seconds at ``scale`` wall seconds per scenario second."""

    duration_s: float = Field(gt=0, le=7 * 86400, description="scenario seconds of history")
    scale: float = Field(
        default=0.01, gt=0, le=1, description="wall seconds per history second (compression)"
    )
    sample_every_s: float = Field(
        default=60.0, gt=0, description="scenario seconds between metric samples in history"
    )


class Preparation(StrictModel):
    """Construction operations, preconditions, live activation actors, manifestation predicates."""

    construction: list[FaultSpec] = Field(
        default_factory=list,
        description="steps that leave the dirty state, run once and kept in the snapshot; a "
        "held transaction among them stays for the steps after it and ends with "
        "construction; every other step runs to its end",
    )
    preconditions: list[CheckSpec] = Field(default_factory=list)
    activation: list[FaultSpec] = Field(default_factory=list)
    manifestation: list[CheckSpec] = Field(default_factory=list)
    warmup_s: float = Field(default=10.0, ge=0, description="scenario seconds before t=0")
    history: History | None = Field(
        default=None,
        description="workload history before the fault (metrics, statistics and "
        "pg_stat_statements have a past); --history-s overrides its length",
    )


class Alert(StrictModel):
    title: str
    text: str = ""
    when: CheckSpec | None = Field(default=None, description="raise only if this check holds")


class Inspection(StrictModel):
    title: str
    text: str = ""


class Event(StrictModel):
    """One entry of the event program: fault with alert, silent fault, or inspection."""

    id: str
    at: float = Field(ge=0)
    fault: FaultSpec | None = None
    alert: Alert | None = None
    inspection: Inspection | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> Event:
        if self.fault is None and self.alert is None and self.inspection is None:
            raise ValueError(f"event {self.id!r} has no fault, alert or inspection")
        return self


class ReferenceStep(StrictModel):
    """One action of the reference remediation, issued through the agent tools."""

    event: str | None = None
    after_s: float = 0.0
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    retry_until_ok_s: float | None = None
    for_each: str | None = Field(
        default=None,
        description="a query run first through execute_sql (as an agent lists, then acts): "
        "the step then runs once per result row, each ``{column}`` in its string arguments "
        "replaced by that row's value (e.g. KILL each session of an application user)",
    )


class ReferenceSolution(StrictModel):
    """A declared remediation, run by a scripted oracle through the ordinary tools."""

    name: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9_-]*$",
        description="alternatives and blunt fixes: the solution's name (run as agent "
        "reference:<name> or blunt:<name>)",
    )
    description: str = ""
    steps: list[ReferenceStep] = Field(default_factory=list)
    report: dict[str, Any] = Field(default_factory=dict)


class Evaluation(StrictModel):
    """The success contract: which dimensions apply and their predicates."""

    service_compliance: dict[str, ServiceObjective] = Field(default_factory=dict)
    terminal: list[CheckSpec] = Field(default_factory=list)
    integrity: list[CheckSpec] = Field(default_factory=list)
    integrity_every_s: float | None = Field(
        default=None, gt=0, description="also probe the integrity checks during the run"
    )
    verification_s: float = Field(
        default=60.0,
        gt=0,
        description="bounded runs: scenario seconds the workloads keep running after the agent "
        "ends; terminal checks are evaluated over this window",
    )
    safety: SafetyContract = Field(default_factory=SafetyContract)
    diagnosis: DiagnosisSpec = Field(default_factory=DiagnosisSpec)
    difficulty: DifficultySpec | None = None
    may_heal: bool = Field(
        default=False,
        description="bounded runs: the environment could heal the fault within the agent's "
        "budget with nobody acting (autovacuum, a timeout, a retry, a job that ends), so the "
        "no-op waits out the whole budget at every time scale; otherwise it does so only "
        "under compression (time scale below 0.5) and ends at once at the speed of use",
    )


class ElevatedPrivileges(StrictModel):
    """A scenario whose task truly needs a superuser agent says so, with a reason. dbaops then
    runs it only where the server's OS user cannot read any harness file (as root, with the
    server under its own service user); otherwise it refuses."""

    superuser: Literal[True] = True
    reason: str = Field(min_length=10)


class AgentSettings(StrictModel):
    """How the agent reaches the database, and its budgets.

    ``time_budget_s`` (bounded runs; scenario seconds, stated in the task) ends the agent's
    session if it has not reported by then; ``turn_budget`` is what the agent is told it may
    spend (the ReAct agent enforces it, then gets one final report round). ``final_round_s``
    (wall seconds) is how long the harness waits for the agent's final report round once the
    session has ended, so a slow model is not cut off mid-turn.
    """

    role: str = "dba_agent"
    sql_timeout_s: float = Field(default=60.0, gt=0)
    max_rows: int = Field(default=200, ge=1)
    time_budget_s: float | None = Field(default=None, gt=0)
    turn_budget: int | None = Field(default=None, ge=1)
    final_round_s: float = Field(default=300.0, ge=0)
    elevated: ElevatedPrivileges | None = None


class Scenario(StrictModel):
    """A complete scenario file."""

    format: Literal[2] = Field(description="scenario file format version")
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    mode: Literal["bounded", "persistent"]
    engine: str = Field(
        default="postgres",
        description="the database engine the scenario runs on: a registered engine's name "
        "(dbaops' own: postgres, tidb; others by the dbaops.engines entry point)",
        examples=["postgres", "tidb"],
    )
    topology: Literal["standalone", "cluster"] = Field(
        default="standalone",
        description="TiDB: cluster when the scenario needs PD, TiKV or TiFlash (placement "
        "that stores satisfy, resource-group refills, TiFlash replicas); such a scenario runs "
        "only against a user's cluster (--dsn) and is refused with a clear message on the "
        "embedded tidb-server",
    )

    backend: Literal["embedded", "docker"] | None = Field(
        default=None,
        description="the server backend the scenario needs (docker: its faults need a "
        "container, and it is skipped with a clear message where no Docker daemon runs); "
        "default: any (embedded unless --backend docker)",
    )
    resources: ServerResources = Field(
        default_factory=ServerResources,
        description="the server container's CPU and memory limits (docker backend)",
    )
    domain: str = ""
    difficulty: Literal["easy", "hard"] | None = None
    description: str = ""
    horizon_s: float | None = Field(
        default=None,
        gt=0,
        description="persistent runs: the length of the event program (scenario seconds); "
        "bounded runs have none: they end on the agent's report or budget",
    )
    database: DatabaseSpec
    workloads: list[WorkloadSpec] = Field(default_factory=list)
    preparation: Preparation = Field(default_factory=Preparation)
    events: list[Event] = Field(default_factory=list)
    evaluation: Evaluation = Field(default_factory=Evaluation)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    reference: ReferenceSolution | None = Field(
        default=None, description="the reference solution (it also defines the difficulty path)"
    )
    alternatives: list[ReferenceSolution] = Field(
        default_factory=list,
        description="other correct fixes the ticket allows; each must pass like the reference",
    )
    shallow: ReferenceSolution | None = Field(
        default=None, description="the reflex fix that must fail Outcome (required when Hard)"
    )
    blunt: list[ReferenceSolution] = Field(
        default_factory=list,
        description="fixes a hurried operator would try that break what the ticket asks to "
        "keep (a cap removed, durability given up, a bound exceeded); each must fail Safe "
        "Pass: Outcome fails or the judge finds a violation",
    )

    @field_validator("engine")
    @classmethod
    def _a_registered_engine(cls, value: str) -> str:
        return registered_engine(value)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [w.name for w in self.workloads]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"duplicate workload names: {sorted(dupes)}")
        ids = [e.id for e in self.events]
        if len(set(ids)) != len(ids):
            raise ValueError("event ids must be unique")
        if self.mode == "persistent":
            if self.horizon_s is None:
                raise ValueError("horizon_s: a persistent scenario needs its horizon")
            if self.agent.time_budget_s is not None:
                raise ValueError(
                    "agent.time_budget_s: a persistent run lasts its horizon; give horizon_s"
                )
            for e in self.events:
                if e.at > self.horizon_s:
                    raise ValueError(
                        f"event {e.id!r} at {e.at}s is after the horizon {self.horizon_s}s"
                    )
            for c in self.evaluation.terminal:
                if c.by_s is not None and c.by_s > self.horizon_s:
                    raise ValueError(
                        f"evaluation.terminal {c.name!r}: by_s {c.by_s} is after the horizon"
                    )
        if self.mode == "bounded":
            if self.horizon_s is not None:
                raise ValueError(
                    "horizon_s: a bounded run has no horizon (it ends on the agent's report or "
                    "budget); give agent.time_budget_s and evaluation.verification_s"
                )
            if len(self.events) != 1 or self.events[0].at != 0:
                raise ValueError("a bounded scenario has exactly one event, at t = 0 (its task)")
            for c in self.evaluation.terminal:
                if c.by_s is not None:
                    raise ValueError(
                        f"evaluation.terminal {c.name!r}: by_s needs a persistent scenario"
                    )
                over = getattr(c, "over_s", None)
                if over is not None and over > self.evaluation.verification_s:
                    raise ValueError(
                        f"evaluation.terminal {c.name!r}: over_s {over} is longer than the "
                        f"verification window ({self.evaluation.verification_s} s)"
                    )
        self._jobs_start_in_the_run()
        self._surface_probes_exist()
        self._scaled_settings_are_setting_names()
        alt_names = [a.name for a in self.alternatives]
        if None in alt_names:
            raise ValueError("alternatives: every alternative solution needs a name")
        if len(set(alt_names)) != len(alt_names):
            raise ValueError(f"alternatives: duplicate names {sorted(map(str, alt_names))}")
        if self.alternatives and self.reference is None:
            raise ValueError("alternatives: declare the reference solution first")
        blunt_names = [b.name for b in self.blunt]
        if None in blunt_names:
            raise ValueError("blunt: every blunt fix needs a name (it runs as blunt:<name>)")
        if len(set(blunt_names)) != len(blunt_names):
            raise ValueError(f"blunt: duplicate names {sorted(map(str, blunt_names))}")
        for wname in self.evaluation.service_compliance:
            if wname not in names:
                raise ValueError(
                    f"evaluation.service_compliance names unknown workload {wname!r} "
                    f"(workloads: {', '.join(names) or 'none'})"
                )
        return self

    def _scaled_settings_are_setting_names(self) -> None:
        """Scaled settings are setting names, each either plain or scaled (whether the engine
        has scaled server timers at all is its capabilities' to say)."""
        timers = dict(self.database.scaled_settings)
        replica = self.database.replica
        if replica is not None:
            timers.update(replica.scaled_settings)
        if not timers:
            return
        bad = [n for n in timers if not re.fullmatch(r"[a-z_][a-z0-9_.]*", n)]
        if bad:
            raise ValueError(f"database.scaled_settings: {bad} are not setting names")
        both = set(self.database.settings) & set(self.database.scaled_settings)
        if replica is not None:
            both |= set(replica.settings) & set(replica.scaled_settings)
        if both:
            raise ValueError(f"database: {sorted(both)} are both settings and scaled_settings")

    def _surface_probes_exist(self) -> None:
        """A survey probe the engine does not have is refused (names, not guesses)."""
        from dbaops.dbms.dialect import survey_probes
        from dbaops.scenario.specs import STANDARD, is_probe_name, split_server

        spec = self.evaluation.difficulty
        sql = spec.modalities.get("sql") if spec is not None else None
        if sql is None or sql.surface is None:
            return
        known = survey_probes(self.engine)
        entries = [split_server(e) for e in sql.surface]
        if any(server == "standby" for server, _ in entries) and self.database.replica is None:
            raise ValueError(
                "evaluation.difficulty.modalities.sql.surface: a standby: entry needs "
                "database.replica (the scenario has no standby)"
            )
        unknown = [e for _, e in entries if is_probe_name(e) and e != STANDARD and e not in known]
        if unknown:
            raise ValueError(
                f"evaluation.difficulty.modalities.sql.surface: {self.engine} has no probes "
                f"{unknown} (its probes: {', '.join(known)}; or give a query)"
            )

    def _jobs_start_in_the_run(self) -> None:
        """A job time before the warm-up's start would silently never run: refused."""
        earliest = -self.preparation.warmup_s
        for w in self.workloads:
            if not isinstance(w, OlapWorkload):
                continue
            for j in w.jobs:
                early = [t for t in j.at_s if t < earliest]
                if j.every_s is not None and j.offset_s < earliest:
                    early.append(j.offset_s)
                if early:
                    raise ValueError(
                        f"workload {w.name!r} job {j.name or j.template!r}: times {early} are "
                        f"before the warm-up starts (t = {earliest:g}, -preparation.warmup_s): "
                        "the job would never run"
                    )

    @property
    def time_budget_s(self) -> float:
        """The agent's time budget in scenario seconds (a persistent run's is its horizon)."""
        if self.mode == "persistent":
            assert self.horizon_s is not None
            return self.horizon_s
        return self.agent.time_budget_s or DEFAULT_BOUNDED_TIME_BUDGET_S

    @property
    def turn_budget(self) -> int:
        """Model turns the agent may spend: 50 for bounded runs (paper §6.1), one per 20
        scenario seconds (at least 50) for a persistent run."""
        if self.agent.turn_budget is not None:
            return self.agent.turn_budget
        if self.mode == "persistent":
            return max(50, int(self.time_budget_s // 20))
        return 50

    @property
    def first_event_id(self) -> str | None:
        """The event a reference step without ``event`` answers (the earliest)."""
        return min(self.events, key=lambda e: e.at).id if self.events else None

    def history_workloads(self) -> list[WorkloadSpec]:
        """The workloads a history runs (``preparation.history``): OLTP, background and
        periodic OLAP ones on the primary (the standby does not exist yet), for the whole
        history (no start or stop times), except workloads that start after t = 0 and
        one-off jobs: those are part of the incident's timeline (a new panel's release, the
        month-end reports), not of the past."""
        out: list[WorkloadSpec] = []
        for w in self.workloads:
            if w.server != "primary":
                continue
            if isinstance(w, OltpWorkload):
                if (w.start_s or 0.0) <= 0:
                    out.append(w.model_copy(update={"start_s": None, "stop_s": None}))
            elif isinstance(w, OlapWorkload):
                periodic = [j.model_copy(update={"at_s": []}) for j in w.jobs if j.every_s]
                if periodic:
                    out.append(w.model_copy(update={"jobs": periodic}))
            else:
                out.append(w)
        return out

    def solutions(self) -> dict[str, ReferenceSolution]:
        """The oracle solutions by agent name: ``reference``, ``reference:<name>`` for each
        alternative, ``shallow``, ``blunt:<name>`` for each blunt fix."""
        out: dict[str, ReferenceSolution] = {}
        if self.reference is not None:
            out["reference"] = self.reference
        for alt in self.alternatives:
            out[f"reference:{alt.name}"] = alt
        if self.shallow is not None:
            out["shallow"] = self.shallow
        for fix in self.blunt:
            out[f"blunt:{fix.name}"] = fix
        return out

    def checks(self) -> list[CheckSpec]:
        """Every check the scenario declares: preconditions, manifestation, alert conditions,
        terminal and integrity checks."""
        alerts = [e.alert.when for e in self.events if e.alert is not None and e.alert.when]
        return [
            *self.preparation.preconditions,
            *self.preparation.manifestation,
            *alerts,
            *self.evaluation.terminal,
            *self.evaluation.integrity,
        ]

    def longest_workload_window_s(self) -> float:
        """The longest trailing window (``over_s``) a workload check of the scenario reads, in
        scenario seconds (0 without workload checks): the run keeps at least that much."""
        return max((c.over_s for c in self.checks() if isinstance(c, WorkloadCheck)), default=0.0)

    def workload(self, name: str) -> WorkloadSpec:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)
