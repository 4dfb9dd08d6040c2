"""The model layer: a TOML registry of OpenAI-compatible endpoints, an async chat client with
tools, retries and exact token accounting, and the paper's Token Cost (DBA-Bench §5.3)."""

from dbaops.models.accounting import CostMeter, ModelTotals, cost_usd
from dbaops.models.client import (
    Completion,
    ModelClient,
    RetryPolicy,
    canonical_json,
    open_client,
    sha256_json,
)
from dbaops.models.errors import (
    InfraError,
    ModelCallError,
    ModelConfigError,
    ModelError,
    ModelRequestError,
    UnknownModelError,
)
from dbaops.models.registry import (
    ModelRegistry,
    ModelSpec,
    Prices,
    default_user_path,
    get_model,
    load_registry,
)

__all__ = [
    "Completion",
    "CostMeter",
    "InfraError",
    "ModelCallError",
    "ModelClient",
    "ModelConfigError",
    "ModelError",
    "ModelRegistry",
    "ModelRequestError",
    "ModelSpec",
    "ModelTotals",
    "Prices",
    "RetryPolicy",
    "UnknownModelError",
    "canonical_json",
    "cost_usd",
    "default_user_path",
    "get_model",
    "load_registry",
    "open_client",
    "sha256_json",
]
