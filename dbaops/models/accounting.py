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

from typing import overload

from pydantic import BaseModel, Field

from dbaops.models.registry import Prices
from dbaops.record.cost import CostSummary
from dbaops.record.kinds import CallRecord, Usage


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


class ModelTotals(CostSummary):
    """Aggregates of calls to one model: the run's cost summary plus failures and latency."""

    failed_calls: int = 0
    retries: int = 0
    latency_ms: float = 0.0

    def add(self, call: CallRecord) -> None:
        super().add(call)
        self.failed_calls += 0 if call.ok else 1
        self.retries += call.retries
        self.latency_ms += call.latency_ms


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
