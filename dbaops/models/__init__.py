"""The model layer: a TOML registry of OpenAI-compatible endpoints, an async chat client with
tools, retries and exact token accounting, and the paper's Token Cost (DBA-Bench §5.3)."""

from dbaops.models.accounting import (
    AttemptRecord,
    CallError,
    CallRecord,
    CostMeter,
    ModelTotals,
    ResponsePayload,
    ToolCall,
    Usage,
    cost_usd,
)
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
    "AttemptRecord",
    "CallError",
    "CallRecord",
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
    "ResponsePayload",
    "RetryPolicy",
    "ToolCall",
    "UnknownModelError",
    "Usage",
    "canonical_json",
    "cost_usd",
    "default_user_path",
    "get_model",
    "load_registry",
    "open_client",
    "sha256_json",
]
