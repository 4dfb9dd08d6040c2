"""Models of the diagnosis judge (DBA-Bench §5.1, Diagnosis Pass) and the pass rule.

A scenario declares required conditions H and contradictory conditions B::

    evaluation:
      diagnosis:
        required: [str, ...]        # must each be established by the report(s)
        contradictory: [str, ...]   # must none be asserted (as a cause) by the report(s)

The judge decides each condition c against the reports r: e(c, r) in {yes, no, unknown}.
``unknown`` is an unresolved judgment (the judge was unreachable, its answer could not be
parsed, or it answered "unknown" itself).

Pass rule (``aggregate_verdict``), in this order:

1. no conditions declared: ``applicable = False``, ``passed = None`` (scenario has no
   diagnostic criteria, excluded from Diagnosis Pass);
2. some contradictory condition judged ``yes`` (asserted): ``passed = False``;
3. some required condition judged ``no`` (not established): ``passed = False``;
4. some condition (required or contradictory) still ``unknown``: ``passed = None`` - the run
   is not judged and is excluded from the Diagnosis Pass denominator D_a (paper §6.1.1);
5. otherwise (every required ``yes``, every contradictory ``no``): ``passed = True``.

So an unknown judgment only withholds the verdict when the resolved judgments do not already
decide it: a resolved failure is a failure whatever the unknown ones would have said. Callers
that want the paper's strictest reading (exclude every run with any unknown judgment) can test
``n_unknown > 0``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dbaops.record.kinds import Usage
from dbaops.scenario.specs import ConditionKind, DiagnosisSpec, normalize_condition

JudgeAnswer = Literal["yes", "no", "unknown"]

JUDGMENT_SCHEMA_VERSION = 1

# Reasons recorded with unknown (and synthetic) judgments.
REASON_UNAVAILABLE = "judge unavailable"
REASON_REFUSED = "judge refused the request"
REASON_UNPARSEABLE = "unparseable answer"
REASON_MODEL_UNKNOWN = "judge answered unknown"
REASON_NOT_JUDGED = "not judged"
REASON_NO_REPORT = "no report submitted"


class ConditionJudgment(BaseModel):
    """One judgment e(c, r), with its provenance. One line of the judgment store.

    ``final`` is False for judgments that must be asked again on the next scoring (the judge
    was unavailable or refused the request); those lines are kept for the record but never
    served from the cache. ``cached`` is not stored: it is True when the judgment was read
    from a store instead of being asked for in this scoring.
    """

    model_config = ConfigDict(extra="allow")

    v: int = JUDGMENT_SCHEMA_VERSION
    key: str = Field(description="cache key, see diagnosis_store.judgment_key")
    condition: str
    kind: ConditionKind
    verdict: JudgeAnswer
    rationale: str = ""
    unknown_reason: str | None = None  # why verdict is unknown (REASON_*), else None
    judge_model: str = Field(description="registry name of the judge model")
    judge_model_id: str = Field(description="provider model id of the judge")
    prompt_version: str
    prompt_sha256: str = ""
    report_hash: str
    condition_hash: str
    final: bool = True
    cached: bool = Field(default=False, exclude=True)
    t_wall: float | None = Field(
        default_factory=time.time,
        description="when the judge answered (None: not judged, a placeholder of a scoring)",
    )
    request_hash: str | None = None
    response_id: str | None = None
    raw_response: str | None = None  # the judge's answer text (capped)
    raw_response_sha256: str | None = None  # of the whole answer text
    raw_response_ref: str | None = None  # where the whole answer was stored, if anywhere
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    latency_ms: float = 0.0
    retries: int = 0
    error: str | None = None

    @property
    def resolved(self) -> bool:
        return self.verdict != "unknown"


class DiagnosisVerdict(BaseModel):
    """Diagnosis Pass A_s(a) of one run with the judgments behind it."""

    applicable: bool
    passed: bool | None = Field(
        description="None: not applicable, or not judged (unresolved judgments decide it)"
    )
    judgments: list[ConditionJudgment] = Field(default_factory=list)
    n_required: int = 0
    n_contradictory: int = 0
    n_resolved: int = 0
    n_unknown: int = 0
    n_cached: int = 0  # judgments served from a store
    n_called: int = 0  # judge calls made for this verdict
    reason: str
    judge_model: str | None = None
    judge_model_id: str | None = None
    prompt_version: str | None = None
    report_hash: str | None = None


def _short(conds: Iterable[str]) -> str:
    return "; ".join(repr(c) for c in conds)


def aggregate_verdict(
    spec: DiagnosisSpec,
    judgments: list[ConditionJudgment],
    **meta: Any,
) -> DiagnosisVerdict:
    """Apply the pass rule of this module's docstring to one judgment per condition of
    ``spec`` (matched by kind and normalized condition; a missing one counts as unknown)."""
    by_cond = {(j.kind, normalize_condition(j.condition)): j for j in judgments}
    ordered = [by_cond[kc] for kc in spec.conditions() if kc in by_cond]
    missing = [kc for kc in spec.conditions() if kc not in by_cond]

    def verdict_of(kind: ConditionKind, cond: str) -> JudgeAnswer:
        j = by_cond.get((kind, cond))
        return "unknown" if j is None else j.verdict

    n_unknown = sum(1 for j in ordered if not j.resolved) + len(missing)
    common: dict[str, Any] = {
        "applicable": spec.applicable,
        "judgments": ordered,
        "n_required": len(spec.required),
        "n_contradictory": len(spec.contradictory),
        "n_resolved": len(ordered) - sum(1 for j in ordered if not j.resolved),
        "n_unknown": n_unknown,
        "n_cached": sum(1 for j in ordered if j.cached),
        **meta,
    }
    if not spec.applicable:
        return DiagnosisVerdict(passed=None, reason="no diagnosis criteria", **common)
    asserted = [c for c in spec.contradictory if verdict_of("contradictory", c) == "yes"]
    if asserted:
        return DiagnosisVerdict(
            passed=False, reason=f"contradictory condition asserted: {_short(asserted)}", **common
        )
    absent = [c for c in spec.required if verdict_of("required", c) == "no"]
    if absent:
        return DiagnosisVerdict(
            passed=False, reason=f"required condition not established: {_short(absent)}", **common
        )
    if n_unknown:
        return DiagnosisVerdict(
            passed=None,
            reason=f"not judged: {n_unknown} unresolved judgment(s) could decide the verdict",
            **common,
        )
    return DiagnosisVerdict(
        passed=True,
        reason="all required conditions established, no contradictory condition asserted",
        **common,
    )
