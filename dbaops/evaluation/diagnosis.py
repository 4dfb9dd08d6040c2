"""The diagnosis judge: Diagnosis Pass A_s(a) of DBA-Bench §5.1.

A scenario's ``evaluation.diagnosis`` declares required conditions H and contradictory
conditions B (``DiagnosisSpec``). For each condition a judge model is asked, with the fixed
prompt ``PROMPT_VERSION`` (``diagnosis_prompt``), whether the agent's report(s) establish it
(required) or assert it as a cause (contradictory): one call per condition, answered as strict
JSON ``{"verdict": "yes"|"no"|"unknown", "rationale": ...}`` and parsed defensively. The pass
rule and the handling of unresolved (``unknown``) judgments are defined in
``diagnosis_models``; the judgment cache in ``diagnosis_store``.

Entry points:

* ``judge_diagnosis(spec, reports, client, store)`` - judge (asking the model only for
  judgments not already in the store or the optional global ``cache``) and aggregate;
* ``verdict_from_store(spec, reports, store, judge)`` - the verdict from stored judgments
  alone (no model; missing ones are unknown), for offline re-scoring;
* ``open_judge_client()`` - a ``ModelClient`` for the registry's ``judge`` role.

Failure handling: an ``InfraError`` (endpoint unreachable after retries) or a
``ModelRequestError`` (refused request) makes the judgment ``unknown`` with reason
``"judge unavailable"`` / ``"judge refused the request"``; the line is written with
``final = false``, so it is never served from the cache and the next scoring asks again.
An answer that cannot be parsed, or an explicit ``"unknown"``, is the judge's final answer:
recorded ``unknown`` and cached (``retry_unknown=True`` asks again; a later resolved answer
then takes precedence).

With no report text at all (nothing submitted), the judge is not called: every condition is
``no`` (paper §6.1.1: "Without a submission, criteria requiring submitted evidence are
false"), so a scenario with required conditions fails; these judgments are not stored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread

from dbaops.evaluation.diagnosis_models import (
    REASON_NO_REPORT,
    REASON_NOT_JUDGED,
    REASON_REFUSED,
    REASON_UNAVAILABLE,
    ConditionJudgment,
    ConditionKind,
    DiagnosisSpec,
    DiagnosisVerdict,
    aggregate_verdict,
)
from dbaops.evaluation.diagnosis_prompt import (
    PROMPT_SHA256,
    PROMPT_VERSION,
    RAW_RESPONSE_CAP,
    Report,
    build_messages,
    condition_hash,
    parse_answer,
    render_reports,
    sha256_text,
)
from dbaops.evaluation.diagnosis_store import (
    JudgeSelector,
    JudgmentStore,
    judge_matches,
    judgment_key,
    load_judgments,
    select_final,
)
from dbaops.models.client import ModelClient
from dbaops.models.errors import InfraError, ModelCallError, ModelRequestError
from dbaops.models.registry import ModelSpec, load_registry
from dbaops.record.kinds import Usage

__all__ = [
    "PROMPT_SHA256",
    "PROMPT_VERSION",
    "ConditionJudgment",
    "DiagnosisSpec",
    "DiagnosisVerdict",
    "JudgmentStore",
    "aggregate_verdict",
    "judge_diagnosis",
    "load_judgments",
    "open_judge_client",
    "render_reports",
    "verdict_from_store",
]

JUDGE_ROLE = "judge"
StoreLike = JudgmentStore | str | os.PathLike[str]


def open_judge_client(
    registry_path: str | os.PathLike[str] | None = None, **kwargs: Any
) -> ModelClient:
    """A ``ModelClient`` for the registry's ``judge`` role (``kwargs`` go to the client)."""
    return ModelClient(load_registry(registry_path).role(JUDGE_ROLE), **kwargs)


def _coerce_spec(spec: DiagnosisSpec | Mapping[str, Any] | None) -> DiagnosisSpec:
    return spec if isinstance(spec, DiagnosisSpec) else DiagnosisSpec.from_evaluation(spec)


def _base(
    kind: ConditionKind, condition: str, report_hash: str, judge_name: str, judge_id: str
) -> dict[str, Any]:
    ch = condition_hash(condition)
    return {
        "key": judgment_key(
            report_hash=report_hash,
            condition_hash=ch,
            kind=kind,
            judge_model=judge_name,
            judge_model_id=judge_id,
            prompt_version=PROMPT_VERSION,
        ),
        "condition": condition,
        "kind": kind,
        "judge_model": judge_name,
        "judge_model_id": judge_id,
        "prompt_version": PROMPT_VERSION,
        "prompt_sha256": PROMPT_SHA256,
        "report_hash": report_hash,
        "condition_hash": ch,
    }


def _no_report(spec: DiagnosisSpec, report_hash: str, name: str, model: str) -> DiagnosisVerdict:
    judgments = [
        ConditionJudgment(
            **_base(kind, cond, report_hash, name, model),
            verdict="no",
            rationale=REASON_NO_REPORT,
            final=False,
        )
        for kind, cond in spec.conditions()
    ]
    return aggregate_verdict(
        spec,
        judgments,
        judge_model=name,
        judge_model_id=model,
        prompt_version=PROMPT_VERSION,
        report_hash=report_hash,
    )


def _request_extra(
    spec: ModelSpec, temperature: float | None, json_mode: bool | None
) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    # Temperature 0 where it is supported: reasoning models reject it, and a registry entry
    # that sets its own temperature keeps it.
    if temperature is not None and spec.reasoning_effort is None:
        if "temperature" not in spec.extra_body:
            extra["temperature"] = temperature
    if json_mode is None:
        json_mode = bool(getattr(spec, "supports_json_mode", False))
    if json_mode and "response_format" not in spec.extra_body:
        extra["response_format"] = {"type": "json_object"}
    return extra


async def _ask(
    client: ModelClient,
    base: dict[str, Any],
    rendered: str,
    extra: dict[str, Any],
) -> ConditionJudgment:
    messages = build_messages(base["kind"], base["condition"], rendered)
    try:
        comp = await client.complete(messages, extra_body=extra or None)
    except (InfraError, ModelRequestError) as e:
        reason = REASON_UNAVAILABLE if isinstance(e, InfraError) else REASON_REFUSED
        return _failed(base, reason, e)
    content = comp.content or ""
    parsed = parse_answer(content)
    return ConditionJudgment(
        **base,
        verdict=parsed.verdict,
        rationale=parsed.rationale,
        unknown_reason=parsed.unknown_reason,
        final=True,
        request_hash=comp.request_hash,
        response_id=comp.response_id,
        raw_response=content[:RAW_RESPONSE_CAP],
        raw_response_sha256=sha256_text(content),
        finish_reason=comp.finish_reason,
        usage=comp.usage,
        cost_usd=comp.cost_usd,
        latency_ms=comp.latency_ms,
        retries=comp.retries,
    )


def _failed(base: dict[str, Any], reason: str, e: ModelCallError) -> ConditionJudgment:
    rec = e.record
    return ConditionJudgment(
        **base,
        verdict="unknown",
        rationale="",
        unknown_reason=reason,
        final=False,
        error=e.message,
        request_hash=rec.request_sha256 if rec else None,
        usage=rec.usage if rec else Usage(),
        cost_usd=rec.cost_usd if rec else None,
        latency_ms=rec.latency_ms if rec else 0.0,
        retries=rec.retries if rec else 0,
    )


async def judge_diagnosis(
    spec: DiagnosisSpec | Mapping[str, Any] | None,
    reports: Sequence[Report] | Report | None,
    client: ModelClient,
    store: StoreLike | None,
    *,
    cache: StoreLike | None = None,
    max_concurrency: int = 4,
    temperature: float | None = 0.0,
    json_mode: bool | None = None,
    retry_unknown: bool = False,
) -> DiagnosisVerdict:
    """Judge every condition of ``spec`` against ``reports`` with ``client``'s model.

    ``store`` (the run's ``judgments.jsonl``, or its directory; None: nothing is persisted)
    is read first, then the optional global ``cache``; a judgment found in neither is asked
    for (at most ``max_concurrency`` calls at a time) and appended to both (judgments found
    only in ``cache`` are copied into ``store`` so the run directory is self-contained; a
    non-final judgment goes to ``store`` only). ``temperature`` is sent unless the model is a
    reasoning model or its registry entry sets one (None: never sent); ``json_mode`` asks for
    ``response_format = json_object`` (None: only if the model spec declares
    ``supports_json_mode``). ``retry_unknown`` asks again for cached final ``unknown``s.
    """
    dspec = _coerce_spec(spec)
    judge = client.spec
    rendered = render_reports(reports)
    rh = sha256_text(rendered)
    meta: dict[str, Any] = {
        "judge_model": judge.name,
        "judge_model_id": judge.model,
        "prompt_version": PROMPT_VERSION,
        "report_hash": rh,
    }
    if not dspec.applicable:
        return aggregate_verdict(dspec, [], **meta)
    if not rendered:
        return _no_report(dspec, rh, judge.name, judge.model)

    run_store = JudgmentStore.of(store) if store is not None else None
    global_store = JudgmentStore.of(cache) if cache is not None else None
    run_final = (
        await anyio.to_thread.run_sync(run_store.final, judge) if run_store is not None else {}
    )
    cache_final = (
        await anyio.to_thread.run_sync(global_store.final, judge)
        if global_store is not None
        else {}
    )

    extra = _request_extra(judge, temperature, json_mode)
    limiter = anyio.CapacityLimiter(max(1, max_concurrency))
    results: dict[int, ConditionJudgment] = {}
    n_called = 0

    async def _persist(j: ConditionJudgment, to_run: bool, to_cache: bool) -> None:
        if to_run and run_store is not None:
            await anyio.to_thread.run_sync(run_store.append, j)
        if to_cache and global_store is not None:
            await anyio.to_thread.run_sync(global_store.append, j)

    async def _one(i: int, kind: ConditionKind, cond: str) -> None:
        nonlocal n_called
        base = _base(kind, cond, rh, judge.name, judge.model)
        key = base["key"]
        hit = run_final.get(key)
        from_cache_only = False
        if hit is None:
            hit = cache_final.get(key)
            from_cache_only = hit is not None
        if hit is not None and (hit.resolved or not retry_unknown):
            if from_cache_only:
                await _persist(hit, to_run=True, to_cache=False)
            results[i] = hit
            return
        async with limiter:
            n_called += 1
            j = await _ask(client, base, rendered, extra)
        await _persist(j, to_run=True, to_cache=j.final)
        results[i] = j

    async with anyio.create_task_group() as tg:
        for i, (kind, cond) in enumerate(dspec.conditions()):
            tg.start_soon(_one, i, kind, cond)

    judgments = [results[i] for i in sorted(results)]
    return aggregate_verdict(dspec, judgments, n_called=n_called, **meta)


def verdict_from_store(
    spec: DiagnosisSpec | Mapping[str, Any] | None,
    reports: Sequence[Report] | Report | None,
    store: StoreLike,
    judge: str | ModelSpec,
) -> DiagnosisVerdict:
    """The verdict from stored judgments of ``judge`` alone (no model call): a condition
    without a final stored judgment for these reports and this prompt version is unknown
    (``"not judged"``). ``judge`` is a ``ModelSpec`` or a string (registry name, model id,
    or ``"name:model_id"``)."""
    dspec = _coerce_spec(spec)
    rendered = render_reports(reports)
    rh = sha256_text(rendered)
    if isinstance(judge, ModelSpec):
        name, model = judge.name, judge.model
    else:
        name, model = judge, ""
    meta: dict[str, Any] = {"prompt_version": PROMPT_VERSION, "report_hash": rh}
    if not dspec.applicable:
        return aggregate_verdict(dspec, [], judge_model=name, **meta)
    if not rendered:
        return _no_report(dspec, rh, name, model)
    sel: JudgeSelector = judge
    lines = [
        j
        for j in JudgmentStore.of(store).read()
        if judge_matches(j, sel) and j.report_hash == rh and j.prompt_version == PROMPT_VERSION
    ]
    by_slot: dict[tuple[str, str], ConditionJudgment] = {}
    for j in select_final(lines).values():
        by_slot.setdefault((j.kind, j.condition_hash), j)
    judgments: list[ConditionJudgment] = []
    for kind, cond in dspec.conditions():
        found = by_slot.get((kind, condition_hash(cond)))
        if found is None:
            found = ConditionJudgment(
                **_base(kind, cond, rh, name, model),
                verdict="unknown",
                unknown_reason=REASON_NOT_JUDGED,
                final=False,
                t_wall=None,  # a verdict is a pure function of the record: no scoring time
            )
        judgments.append(found)
    ids = {(j.judge_model, j.judge_model_id) for j in judgments if j.cached}
    if len(ids) == 1:
        name, model = next(iter(ids))
    return aggregate_verdict(dspec, judgments, judge_model=name, judge_model_id=model, **meta)
