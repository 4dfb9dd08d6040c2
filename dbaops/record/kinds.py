"""Typed, versioned records of a run (the lines of ``trace.jsonl``).

Every record carries a ``kind``, the schema version ``v``, scenario time ``t_scn`` (None before
the timeline starts) and Unix wall time ``t_wall``. Anything a verdict depends on is recorded
here, so a run can be scored again without a database or a model.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from dbaops import TRACE_SCHEMA_VERSION


class Record(BaseModel):
    """Common fields of all trace records."""

    model_config = ConfigDict(extra="allow")

    v: int = TRACE_SCHEMA_VERSION
    t_scn: float | None = None
    t_wall: float = Field(default_factory=time.time)


class KnowledgeCorpus(BaseModel):
    """What a run's ``query_knowledge_base`` searches, or why it has nothing to search."""

    available: bool
    source: str | None = Field(default=None, description="e.g. postgresql-manual")
    version: str | None = Field(default=None, description="the documentation's version")
    doc_dir: str | None = None
    pages: int = Field(default=0, description="HTML pages in the corpus")
    content_sha256: str | None = Field(
        default=None, description="hash of every page's name and bytes, in name order"
    )
    reason: str | None = Field(default=None, description="why there is no corpus")

    def summary(self) -> str:
        """One line for a verdict or a report."""
        if not self.available:
            return f"none ({self.reason or 'unavailable'})"
        digest = (self.content_sha256 or "")[:12]
        return f"{self.source} {self.version} ({self.pages} pages, sha256 {digest})"


class RunHeader(Record):
    """First record: what ran, with which versions, seeds and settings."""

    kind: Literal["run_header"] = "run_header"
    run_id: str
    scenario_id: str
    scenario_mode: str  # "bounded" | "persistent"
    scenario_sha256: str
    horizon_s: float | None  # persistent: the event program's length; bounded: None
    time_scale: float
    agent: str
    agent_kind: str = "agent"  # "agent" | "oracle" (scripted reference/shallow) | "model"
    budget: dict[str, Any] = Field(default_factory=dict)  # turns, time_s (scenario seconds)
    seed: int
    backend: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    knowledge_base: KnowledgeCorpus | None = Field(
        default=None, description="the corpus the knowledge tool searched (None: not recorded)"
    )


class PhaseRecord(Record):
    """A step of preparation or teardown, with its duration."""

    kind: Literal["phase"] = "phase"
    phase: str
    duration_s: float | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class CheckRecord(Record):
    """A predicate evaluated by the harness (manifestation, precondition, probe, invariant)."""

    kind: Literal["check"] = "check"
    purpose: str  # "precondition" | "manifestation" | "terminal" | "integrity" | ...
    name: str
    passed: bool | None
    observed: Any = None
    expected: Any = None
    error: str | None = None


class EventRecord(Record):
    """An entry of the event program that fired (fault, alert, inspection)."""

    kind: Literal["event"] = "event"
    event_id: str
    at_s: float
    fault: str | None = None
    alert: str | None = None
    inspection: str | None = None
    status: str = "fired"  # "fired" | "skipped" | "failed"
    detail: dict[str, Any] = Field(default_factory=dict)


#: An actor record's detail key: a crash of this session is the scenario's fault (an OOM kill
#: of a load the scenario runs), not the agent's; scoring leaves its crash lines out.
CRASH_EXPECTED = "crash_expected"


class ActorRecord(Record):
    """A live actor (held session, load, ...) started or finished by the harness."""

    kind: Literal["actor"] = "actor"
    actor: str
    status: str  # "started" | "finished" | "failed" | "cancelled"
    role: str | None = None
    application_name: str | None = None
    protected: bool = False
    pid: int | None = None
    pids: list[int] = Field(default_factory=list)  # every session an actor holds (pools)
    backend_start: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class ToolCallRecord(Record):
    """One call across the agent boundary, with its observation and timing."""

    kind: Literal["tool_call"] = "tool_call"
    call_id: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    ok: bool = True
    status: str = "completed"  # "completed" | "cancelled" (in flight at the end) | "refused"
    # (after the session ended) | "rejected" (malformed arguments or an unknown tool: not run)
    observation: str = ""
    error: str | None = None
    t_scn_end: float | None = None
    wall_ms: float = 0.0
    detail: dict[str, Any] = Field(default_factory=dict)


class RunEnd(Record):
    """Last record of a run that ended in an orderly way (a killed run has none)."""

    kind: Literal["run_end"] = "run_end"
    status: str  # "completed" | "interrupted" | "failed" | "infra_error" | "not_manifested"
    reason: str | None = None
    duration_s: float | None = None
    traceback: str | None = None  # of the harness error that failed the run (its last 8 kB)


# --- the agent's model calls (written by dbaops.models.client) ---


class Usage(BaseModel):
    """Token counts of one call (or a sum of calls)."""

    input_tokens: int = 0  # N_in: all prompt tokens, cached included
    cached_input_tokens: int = 0  # N_cache: prompt tokens served from the provider's cache
    output_tokens: int = 0  # N_out: completion tokens, reasoning included
    reasoning_tokens: int = 0  # the part of output_tokens spent on reasoning (when reported)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    @classmethod
    def from_provider(cls, usage: Any) -> Usage:
        """Read an OpenAI-style ``usage`` (object or dict). Cached tokens come from
        ``prompt_tokens_details.cached_tokens`` (or DeepSeek's ``prompt_cache_hit_tokens``),
        reasoning tokens from ``completion_tokens_details.reasoning_tokens``."""
        if usage is None:
            return cls()
        d: dict[str, Any] = usage if isinstance(usage, dict) else usage.model_dump()

        def _int(v: Any) -> int:
            return int(v) if isinstance(v, int | float) and v > 0 else 0

        ptd = d.get("prompt_tokens_details") or {}
        ctd = d.get("completion_tokens_details") or {}
        cached = _int(ptd.get("cached_tokens")) or _int(d.get("prompt_cache_hit_tokens"))
        n_in = _int(d.get("prompt_tokens"))
        return cls(
            input_tokens=n_in,
            cached_input_tokens=min(cached, n_in) if n_in else cached,
            output_tokens=_int(d.get("completion_tokens")),
            reasoning_tokens=_int(ctd.get("reasoning_tokens")),
        )


class ToolCall(BaseModel):
    """A tool call requested by the model."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)  # parsed JSON object
    raw_arguments: str = ""  # exactly as the model produced it
    parse_error: str | None = None  # set when raw_arguments is not a JSON object


class ResponsePayload(BaseModel):
    """What the model answered (content, reasoning text when exposed, tool calls)."""

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    response_id: str | None = None
    response_model: str | None = None


class AttemptRecord(BaseModel):
    """One HTTP attempt of a call."""

    attempt: int
    outcome: Literal["ok", "retryable", "fatal"]
    status_code: int | None = None
    error: str | None = None
    latency_ms: float = 0.0
    backoff_s: float = 0.0  # sleep after this attempt before the next one


class CallError(BaseModel):
    """Why a call failed: ``infra_error`` (endpoint) or ``request_error`` (refused 4xx)."""

    type: Literal["infra_error", "request_error"]
    message: str
    status_code: int | None = None


class CallRecord(Record):
    """One model call as stored in the run trace (no API key, ever)."""

    kind: Literal["model_call"] = "model_call"
    seq: int = 0  # per-client call number
    model_name: str  # registry name, e.g. "gpt"
    model: str  # provider model id requested
    base_url: str
    tool_mode: Literal["native", "text"] = "native"
    request_sha256: str  # sha256 of the canonical JSON request body sent
    messages_sha256: str  # sha256 of the canonical JSON of the request messages (as given)
    messages_ref: str | None = None  # where those messages were stored, if anywhere
    n_messages: int = 0
    n_tools: int = 0
    response: ResponsePayload | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None  # None: model has no prices (cost N/A)
    price_placeholder: bool = False  # cost_usd computed from placeholder (unchecked) prices
    latency_ms: float = 0.0  # the final attempt
    elapsed_ms: float = 0.0  # all attempts and backoff
    retries: int = 0
    attempts: list[AttemptRecord] = Field(default_factory=list)
    error: CallError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# --- the agent loop (dbaops.agents.react) and replays (dbaops.models.replay) ---


class CompactionRecord(Record):
    """The middle of the agent's conversation was replaced by a model-written summary."""

    kind: Literal["compaction"] = "compaction"
    agent: str
    turn: int  # model turns taken when compacting
    reason: Literal["threshold", "context_overflow"] = "threshold"
    rounds_total: int
    summarised_rounds: list[int]  # [start, end) 0-based indices of the rounds now summarised
    est_tokens_before: int
    est_tokens_after: int
    threshold_tokens: int
    summary: str
    summary_request_sha256: str


class AgentEventRecord(Record):
    """A control decision of the agent loop (budget exhausted, self-suspend, fallback report)."""

    kind: Literal["agent_event"] = "agent_event"
    agent: str
    event: str
    turn: int
    detail: dict[str, Any] = Field(default_factory=dict)


class ReplayDivergence(Record):
    """A replayed request that differs from the recorded one at that position."""

    kind: Literal["replay_divergence"] = "replay_divergence"
    position: int  # 1-based number of the replayed call
    recorded_seq: int  # seq of the recorded call whose response was served
    skipped: int = 0  # recorded calls skipped to reach a matching one
    expected_messages_sha256: str
    actual_messages_sha256: str
    expected_request_sha256: str | None = None
    actual_request_sha256: str | None = None  # only when the original spec is known
    first_differing_message: int | None = None  # index, when the recorded messages are stored
    note: str


class ClientLagRecord(Record):
    """The workload client fell behind its own timetable (its event loop, not the server):
    in a window of the run, the units it issued late by more than the bound. Their latency and
    deadlines already leave the lag out, but the server saw a different load than the
    scenario offers, so the run's figures carry this warning."""

    kind: Literal["client_lag"] = "client_lag"
    since_s: float  # scenario time the window starts
    window_s: float  # its scenario length
    units: int  # units issued in the window
    over_bound: int  # of which the client issued this many late by more than bound_ms
    p99_ms: float
    max_ms: float
    bound_ms: float
    workloads: list[str] = Field(default_factory=list)


class StateRecord(Record):
    """The database's catalog fingerprint, read by the harness once the run's state is restored,
    when the agent starts, before and after each fault injected while it works, and when it
    ends (``label``: ``prepared``, ``agent_start``, ``fault_before``, ``fault_after``,
    ``agent_end``). ``state`` maps class -> key -> digest;
    None with ``error`` when it could not be read (the judge then fails closed)."""

    kind: Literal["state"] = "state"
    label: str
    event_id: str | None = None
    state: dict[str, dict[str, str]] | None = None
    error: str | None = None


class SurveyProbe(BaseModel):
    """One query of the observation surface and the rows it returned (each as text)."""

    query: str
    rows: list[str] = Field(default_factory=list)
    error: str | None = None


class MetricSeriesCount(BaseModel):
    """How many points of one metric series the agent could read when it started: those of
    the incident (the warm-up, the fault already in place) and those of the history."""

    series: str  # "metric label"
    incident_points: int = 0
    history_points: int = 0


class SurveyRecord(Record):
    """The observation surface the environment presented when the agent started, read by the
    harness (not by the agent) for the scenario's declared modalities: the rows of its SQL
    probes, the server-log lines so far and the metric series (paper §4.2's C_s is counted
    over these, whatever the agent then reads)."""

    kind: Literal["survey"] = "survey"
    sql: dict[str, SurveyProbe] = Field(default_factory=dict)
    log_lines: list[str] = Field(default_factory=list)
    log_lines_total: int = 0
    metric_series: list[MetricSeriesCount] = Field(default_factory=list)


class GenericRecord(Record):
    """A record of a kind this version does not know; kept, not interpreted."""

    kind: str


TraceRecord = Annotated[
    RunHeader
    | PhaseRecord
    | CheckRecord
    | EventRecord
    | ActorRecord
    | ToolCallRecord
    | RunEnd
    | CallRecord
    | CompactionRecord
    | AgentEventRecord
    | ReplayDivergence
    | ClientLagRecord
    | StateRecord
    | SurveyRecord,
    Field(discriminator="kind"),
]

_KNOWN_KINDS = {
    "run_header",
    "phase",
    "check",
    "event",
    "actor",
    "tool_call",
    "run_end",
    "client_lag",
    "state",
    "survey",
}
#: Kinds whose schema grew over versions: a line that does not validate is kept generic.
_LENIENT_KINDS = {"model_call", "compaction", "agent_event", "replay_divergence"}
_ADAPTER: TypeAdapter[Any] = TypeAdapter(TraceRecord)


def parse_record(line: str) -> Record:
    """Parse one JSON line into its record type (unknown kinds become GenericRecord)."""
    data = json.loads(line)
    kind = data.get("kind")
    if kind in _KNOWN_KINDS:
        return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    if kind in _LENIENT_KINDS:
        try:
            return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]
        except ValueError:
            pass
    return GenericRecord.model_validate(data)
