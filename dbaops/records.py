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
    observation: str = ""
    error: str | None = None
    t_scn_end: float | None = None
    wall_ms: float = 0.0
    detail: dict[str, Any] = Field(default_factory=dict)


class VerdictRecord(Record):
    """Verdicts computed at the end of a run (also stored in verdict.json)."""

    kind: Literal["verdict"] = "verdict"
    verdict: dict[str, Any]


class RunEnd(Record):
    """Last record of a run that ended in an orderly way (a killed run has none)."""

    kind: Literal["run_end"] = "run_end"
    status: str  # "completed" | "interrupted" | "failed" | "infra_error" | "not_manifested"
    reason: str | None = None
    duration_s: float | None = None


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
    | VerdictRecord
    | RunEnd,
    Field(discriminator="kind"),
]

_KNOWN_KINDS = {
    "run_header",
    "phase",
    "check",
    "event",
    "actor",
    "tool_call",
    "verdict",
    "run_end",
}
_ADAPTER: TypeAdapter[Any] = TypeAdapter(TraceRecord)


def parse_record(line: str) -> Record:
    """Parse one JSON line into its record type (unknown kinds become GenericRecord)."""
    data = json.loads(line)
    if data.get("kind") in _KNOWN_KINDS:
        return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    return GenericRecord.model_validate(data)
