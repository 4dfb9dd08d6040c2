"""Token accounting for model calls: usage, the paper's Token Cost and per-call trace records.

Token Cost follows DBA-Bench §5.3 (Equation 1)::

    Cost = [p_in * (N_in - N_cache) + p_cache * N_cache + p_out * N_out] / 1e6

with N_in the prompt tokens (cached ones included, as providers report them), N_cache the cached
prompt tokens and N_out the completion tokens (reasoning tokens included, as providers bill
them). A model without prices has cost N/A (``None``), as in the paper. A cost computed from
prices marked ``placeholder`` in the registry (unchecked, e.g. the shipped defaults) carries
``price_placeholder = True`` on its record and in every total built from it.

A ``CallRecord`` is what a run trace stores per model call. It holds hashes of the request and
its messages (plus an optional pointer to where the messages were stored), the response, usage,
cost, latency, retries and error, and never the API key: keys are not part of any model the
records are built from.
"""

from __future__ import annotations

from typing import Any, Literal, overload

from pydantic import BaseModel, Field

from dbaops.models.registry import Prices
from dbaops.records import Record


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


@overload
def cost_usd(usage: Usage, prices: Prices) -> float: ...
@overload
def cost_usd(usage: Usage, prices: None) -> None: ...
@overload
def cost_usd(usage: Usage, prices: Prices | None) -> float | None: ...
def cost_usd(usage: Usage, prices: Prices | None) -> float | None:
    """Token Cost in USD (paper Eq. 1); ``None`` (N/A) when the model has no prices.
    Whether the result is a placeholder cost is ``price_is_placeholder(prices)``."""
    if prices is None:
        return None
    n_cache = min(usage.cached_input_tokens, usage.input_tokens)
    return (
        prices.input * (usage.input_tokens - n_cache)
        + prices.cache_price * n_cache
        + prices.output * usage.output_tokens
    ) / 1e6


def price_is_placeholder(prices: Prices | None) -> bool:
    """True when a cost from ``prices`` must carry the placeholder mark (False when N/A)."""
    return prices is not None and prices.placeholder


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


class ModelTotals(BaseModel):
    """Aggregates of calls to one model."""

    calls: int = 0
    failed_calls: int = 0
    retries: int = 0
    unpriced_calls: int = 0
    placeholder_priced_calls: int = 0  # priced calls whose prices are placeholders
    usage: Usage = Field(default_factory=Usage)
    priced_cost_usd: float = 0.0
    latency_ms: float = 0.0

    @property
    def cost_usd(self) -> float | None:
        """Total cost, or None (N/A) when any call was to a model without prices."""
        return None if self.unpriced_calls else self.priced_cost_usd

    @property
    def price_placeholder(self) -> bool:
        """True when some priced call used placeholder prices (the cost carries the mark)."""
        return self.placeholder_priced_calls > 0

    def add(self, record: CallRecord) -> None:
        self.calls += 1
        self.failed_calls += 0 if record.ok else 1
        self.retries += record.retries
        self.usage = self.usage + record.usage
        self.latency_ms += record.latency_ms
        if record.cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.priced_cost_usd += record.cost_usd
            self.placeholder_priced_calls += 1 if record.price_placeholder else 0


class CostMeter(BaseModel):
    """Running totals over the calls of a run, overall and per model name."""

    total: ModelTotals = Field(default_factory=ModelTotals)
    by_model: dict[str, ModelTotals] = Field(default_factory=dict)

    def add(self, record: CallRecord) -> None:
        self.total.add(record)
        self.by_model.setdefault(record.model_name, ModelTotals()).add(record)

    @property
    def cost_usd(self) -> float | None:
        return self.total.cost_usd

    @property
    def price_placeholder(self) -> bool:
        return self.total.price_placeholder

    @property
    def usage(self) -> Usage:
        return self.total.usage

    def efficiency(self) -> tuple[int, int, int, float | None]:
        """Paper §5.3 Eff_s = (N_in, N_cache, N_out, Cost)."""
        u = self.total.usage
        return (u.input_tokens, u.cached_input_tokens, u.output_tokens, self.cost_usd)
