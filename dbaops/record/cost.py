"""Token Cost of a run (paper §5.3), summed once from its model_call records.

The one place priced, unpriced and placeholder-priced calls are told apart: ``cost_usd`` is
None (N/A) when there were no model calls or any call had no price (``unpriced_calls``), since
a partial sum is not the run's Token Cost; ``price_placeholder`` is True when some priced call
used placeholder (unchecked) registry prices. The live meter of an agent
(:class:`dbaops.models.accounting.ModelTotals`) and the scorer both add calls here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from dbaops.record.kinds import CallRecord, GenericRecord, Record, Usage


class CostSummary(BaseModel):
    """Model-token expenditure of a run or of one model's calls."""

    calls: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    unpriced_calls: int = 0
    placeholder_priced_calls: int = Field(
        default=0, description="priced calls whose prices are placeholders"
    )
    price_placeholder: bool = False

    @property
    def usage(self) -> Usage:
        return Usage(
            input_tokens=self.input_tokens,
            cached_input_tokens=self.cached_input_tokens,
            output_tokens=self.output_tokens,
            reasoning_tokens=self.reasoning_tokens,
        )

    def add(self, call: CallRecord) -> None:
        """Count one call: its tokens always, its price only while every call has one."""
        priced_so_far = 0.0 if self.cost_usd is None else self.cost_usd
        self.calls += 1
        self.input_tokens += call.usage.input_tokens
        self.cached_input_tokens += call.usage.cached_input_tokens
        self.output_tokens += call.usage.output_tokens
        self.reasoning_tokens += call.usage.reasoning_tokens
        if call.cost_usd is None:
            self.unpriced_calls += 1
            self.cost_usd = None
            return
        if call.price_placeholder:
            self.placeholder_priced_calls += 1
            self.price_placeholder = True
        if not self.unpriced_calls:
            self.cost_usd = priced_so_far + call.cost_usd


def call_record(record: Record) -> CallRecord | None:
    """The model call a trace record is, also for a generic line of an older schema."""
    if isinstance(record, CallRecord):
        return record
    if isinstance(record, GenericRecord) and record.kind == "model_call":
        # parse_record already failed to validate it: an older schema, read what cost needs
        data: dict[str, Any] = record.model_dump()
        raw = data.get("usage")
        usage: dict[str, Any] = raw if isinstance(raw, dict) else {}
        cost = data.get("cost_usd")
        return CallRecord.model_construct(
            usage=Usage.model_validate(
                {k: v for k, v in usage.items() if k in Usage.model_fields and isinstance(v, int)}
            ),
            cost_usd=float(cost) if isinstance(cost, int | float) else None,
            price_placeholder=data.get("price_placeholder") is True,
            model_name=str(data.get("model_name") or data.get("model") or ""),
            model=str(data.get("model") or ""),
            base_url=str(data.get("base_url") or ""),
            request_sha256=str(data.get("request_sha256") or ""),
            messages_sha256=str(data.get("messages_sha256") or ""),
        )
    return None


def summarize_cost(records: Iterable[Record]) -> CostSummary:
    """The Token Cost of the model calls among ``records``."""
    out = CostSummary()
    for r in records:
        call = call_record(r)
        if call is not None:
            out.add(call)
    return out
