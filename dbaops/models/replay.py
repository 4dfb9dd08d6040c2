"""Replay recorded model calls: a model client that answers from a run's trace.

``ReplayModelClient(run_dir)`` reads the run's ``model_call`` records (``CallRecord``) and serves
their responses, in order, from ``complete(...)`` — the same interface as ``ModelClient`` — so
an agent run against the same tools reproduces the recorded actions without a model.

Matching: each request's messages hash (sha256 of the canonical JSON of the messages, exactly
as ``ModelClient`` records it) and, when the ``spec`` of the original model is given, its
request hash (model, messages, tools, tool_choice, reasoning and extra body) are compared with
the next recorded call. A request that matches a later recorded call skips to it; otherwise
the next recorded response is served anyway. Either way the mismatch is a divergence: kept in
``divergences`` and emitted as a ``ReplayDivergence`` trace record (kind
``replay_divergence``) through ``on_record`` (``strict=True`` raises ``ReplayDivergenceError``
instead). When the recording is used up, ``complete`` raises ``ReplayExhausted``.

A recorded failed call is replayed as the same error (``InfraError`` or ``ModelRequestError``).
Every served call is emitted as a new ``CallRecord`` (with the recorded response, usage,
cost and price mark, and ``replay_of_seq`` naming the recorded call) and added to ``meter``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dbaops.models.accounting import CostMeter
from dbaops.models.client import Completion, ModelClient, canonical_json, sha256_json
from dbaops.models.errors import InfraError, ModelError, ModelRequestError
from dbaops.models.registry import ModelSpec
from dbaops.models.text_tools import normalize_tools
from dbaops.record.kinds import CallRecord, Record, ReplayDivergence, Usage
from dbaops.record.load import RunData, load_run


class ReplayExhausted(ModelError):
    """More model calls were made than the recording holds."""


class ReplayDivergenceError(ModelError):
    """``strict`` replay: the request differs from the recording."""

    def __init__(self, divergence: ReplayDivergence) -> None:
        super().__init__(divergence.note)
        self.divergence = divergence


def load_call_records(run: str | os.PathLike[str] | RunData) -> list[CallRecord]:
    """The ``model_call`` records of a run (a directory, or one already loaded), in trace
    order."""
    data = run if isinstance(run, RunData) else load_run(Path(run))
    calls = data.model_calls
    partial = [c.seq for c in calls if not c.request_sha256]
    if partial:
        raise ValueError(
            f"{data.path}: model calls {partial} are of an older record schema and cannot be "
            "replayed (they still count for the run's cost)"
        )
    return calls


def request_sha256(
    spec: ModelSpec,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None = None,
    tool_choice: Any = None,
    extra_body: Mapping[str, Any] | None = None,
) -> str:
    """The request hash ``ModelClient`` would record for these arguments (no key needed)."""
    shell = ModelClient.__new__(ModelClient)  # build_request reads only ``spec``
    shell.spec = spec
    return sha256_json(shell.build_request(messages, tools, tool_choice, extra_body))


class ReplayModelClient:
    """Serves a run's recorded model responses; see the module docstring.

    ``run_dir`` is a run directory (its ``trace.jsonl``); ``records`` may be given instead.
    ``model_name`` keeps only the calls of that registry name (e.g. to leave out other clients'
    calls). ``spec`` is the original ``ModelSpec``: it enables request-hash comparison and is
    what ``spec`` returns (otherwise a spec is rebuilt from the first record's name, model and
    base URL). ``blob_root`` resolves ``messages_ref`` (default: ``run_dir``).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        *,
        records: Iterable[CallRecord] | None = None,
        model_name: str | None = None,
        spec: ModelSpec | None = None,
        on_record: Callable[[Record], Any] | None = None,
        meter: CostMeter | None = None,
        strict: bool = False,
        blob_root: str | os.PathLike[str] | None = None,
    ) -> None:
        if records is None:
            if run_dir is None:
                raise ValueError("give a run directory or records")
            records = load_call_records(run_dir)
        recs = [r for r in records if model_name is None or r.model_name == model_name]
        self.source = str(run_dir) if run_dir is not None else "<records>"
        if not recs:
            raise ReplayExhausted(f"replay of {self.source}: no recorded model calls")
        self.recorded = recs
        self._spec_given = spec is not None
        self._spec = spec or ModelSpec(
            name=recs[0].model_name, base_url=recs[0].base_url, model=recs[0].model
        )
        self.on_record = on_record
        self.meter = meter if meter is not None else CostMeter()
        self.strict = strict
        root = blob_root if blob_root is not None else run_dir
        self._blob_root = Path(root) if root is not None else None
        self.divergences: list[ReplayDivergence] = []
        self._pos = 0
        self._served = 0

    @property
    def spec(self) -> ModelSpec:
        return self._spec

    @property
    def remaining(self) -> int:
        return len(self.recorded) - self._pos

    def __repr__(self) -> str:
        return f"ReplayModelClient({self.source!r}, {self.remaining}/{len(self.recorded)} left)"

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> ReplayModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def _emit(self, record: Record) -> None:
        if self.on_record is not None:
            self.on_record(record)

    def _recorded_messages(self, rec: CallRecord) -> list[Any] | None:
        if not rec.messages_ref:
            return None
        ref = Path(rec.messages_ref)
        path = ref if ref.is_absolute() or self._blob_root is None else self._blob_root / ref
        try:
            data = path.read_bytes()
            if path.suffix == ".gz":
                data = gzip.decompress(data)
            loaded = json.loads(data)
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, list) else None

    def _first_difference(self, rec: CallRecord, messages: list[dict[str, Any]]) -> int | None:
        recorded = self._recorded_messages(rec)
        if recorded is None:
            return None
        mine = json.loads(canonical_json(messages))
        for i, (a, b) in enumerate(zip(recorded, mine, strict=False)):
            if a != b:
                return i
        return min(len(recorded), len(mine)) if len(recorded) != len(mine) else None

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None = None,
        *,
        tool_choice: Any = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Completion:
        """The next recorded response (see the module docstring)."""
        msgs = [dict(m) for m in messages]
        msha = hashlib.sha256(canonical_json(msgs)).hexdigest()
        rsha = (
            request_sha256(self._spec, msgs, tools, tool_choice, extra_body)
            if self._spec_given
            else None
        )
        self._served += 1
        if self._pos >= len(self.recorded):
            raise ReplayExhausted(
                f"replay of {self.source}: the recording has {len(self.recorded)} model "
                f"call(s) and call {self._served} was requested (the run went further than "
                "the recorded one)"
            )

        def matches(rec: CallRecord) -> bool:
            return rec.messages_sha256 == msha and (rsha is None or rec.request_sha256 == rsha)

        idx = self._pos
        if not matches(self.recorded[idx]):
            later = next(
                (j for j in range(idx + 1, len(self.recorded)) if matches(self.recorded[j])),
                None,
            )
            expected = self.recorded[idx]
            if later is not None:
                note = (
                    f"replay call {self._served}: request matches recorded call "
                    f"{self.recorded[later].seq}; skipped {later - idx} recorded call(s)"
                )
            else:
                note = (
                    f"replay call {self._served}: request differs from recorded call "
                    f"{expected.seq}; serving its recorded response anyway"
                )
            div = ReplayDivergence(
                position=self._served,
                recorded_seq=self.recorded[later if later is not None else idx].seq,
                skipped=0 if later is None else later - idx,
                expected_messages_sha256=expected.messages_sha256,
                actual_messages_sha256=msha,
                expected_request_sha256=expected.request_sha256 if rsha is not None else None,
                actual_request_sha256=rsha,
                first_differing_message=self._first_difference(expected, msgs),
                note=note,
            )
            self.divergences.append(div)
            self._emit(div)
            if self.strict:
                raise ReplayDivergenceError(div)
            if later is not None:
                idx = later
        self._pos = idx + 1
        rec = self.recorded[idx]
        replayed = rec.model_copy(
            update={
                "seq": self._served,
                "t_scn": None,
                "messages_sha256": msha,
                "messages_ref": None,
                "n_messages": len(msgs),
                "n_tools": len(normalize_tools(tools)),
                "request_sha256": rsha or rec.request_sha256,
                "t_wall": time.time(),
                # A replay costs nothing and waits for nothing: what the recorded call spent
                # stays in the extra recorded_* fields, never in this run's totals.
                "usage": Usage(),
                "cost_usd": 0.0,
                "price_placeholder": False,
                "latency_ms": 0.0,
                "elapsed_ms": 0.0,
                "retries": 0,
                "attempts": [],
                "replay_of_seq": rec.seq,  # extra fields: which recorded call was served
                "recorded_usage": rec.usage.model_dump(),
                "recorded_cost_usd": rec.cost_usd,
            }
        )
        self.meter.add(replayed)
        self._emit(replayed)
        if rec.error is not None:
            cls = InfraError if rec.error.type == "infra_error" else ModelRequestError
            raise cls(
                f"(replayed) {rec.error.message}",
                status_code=rec.error.status_code,
                attempts=len(rec.attempts) or 1,
                record=replayed,
            )
        resp = rec.response
        if resp is None:
            raise ReplayExhausted(f"replay of {self.source}: call {rec.seq} has no response")
        return Completion(
            model_name=rec.model_name,
            model=rec.model,
            content=resp.content,
            reasoning_content=resp.reasoning_content,
            tool_calls=list(resp.tool_calls),
            finish_reason=resp.finish_reason,
            usage=rec.usage,
            cost_usd=rec.cost_usd,
            price_placeholder=rec.price_placeholder,
            latency_ms=rec.latency_ms,
            elapsed_ms=rec.elapsed_ms,
            retries=rec.retries,
            request_hash=rsha or rec.request_sha256,
            response_id=resp.response_id,
            tool_mode=rec.tool_mode,
        )


__all__ = [
    "ReplayDivergenceError",
    "ReplayExhausted",
    "ReplayModelClient",
    "load_call_records",
    "request_sha256",
]
