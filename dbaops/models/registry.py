"""The model registry: named OpenAI-compatible endpoints with reasoning options and prices.

Entries come from the shipped ``default_models.toml`` (package data) and are overridden or
extended by name from a user file: an explicit path, else ``$DBAOPS_MODELS``, else
``$XDG_CONFIG_HOME/dbaops/models.toml`` (``~/.config/dbaops/models.toml``) when it exists.
Tables merge key by key, so a user entry may change a single field of a shipped one.

File layout::

    [roles]
    judge = "qwen-judge"          # role name -> model name

    [models.gpt]
    base_url = "https://api.openai.com/v1"
    model = "gpt-5.5"
    api_key_env = "OPENAI_API_KEY"  # the key itself is read from the environment only
    reasoning_effort = "high"
    extra_body = { }                # merged into every request body (thinking, max_tokens, ...)
    context_window = 262144
    supports_tools = true
    [models.gpt.prices]             # USD per million tokens; omit for cost N/A
    input = 1.25
    cached_input = 0.125
    output = 10.0
    placeholder = false             # true: unchecked prices, costs are marked as placeholders

API keys never live in a ``ModelSpec``: ``resolve_api_key`` reads the named variable when a
client is built and returns a ``SecretStr``.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from dbaops.models.errors import ModelConfigError, UnknownModelError

DEFAULTS_RESOURCE = "default_models.toml"
ENV_MODELS_FILE = "DBAOPS_MODELS"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TOP_LEVEL_KEYS = {"models", "roles"}


class Prices(BaseModel):
    """Token prices in USD per million tokens (paper §5.3: p_in, p_cache, p_out).

    ``placeholder`` marks prices nobody has checked against the provider's official price
    page (the shipped defaults): every cost computed from them carries the mark, so a report
    never passes them off as the paper's Token Cost. When ``placeholder`` is not given, a
    ``note`` containing "placeholder" sets it (older registry files); an explicit
    ``placeholder = false`` clears it whatever the note says.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)  # None: same as input
    output: float = Field(ge=0)
    placeholder: bool = False
    note: str = ""

    @model_validator(mode="before")
    @classmethod
    def _placeholder_from_note(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "placeholder" not in data:
            note = data.get("note")
            if isinstance(note, str) and "placeholder" in note.lower():
                return {**data, "placeholder": True}
        return data

    @property
    def cache_price(self) -> float:
        return self.input if self.cached_input is None else self.cached_input


class ModelSpec(BaseModel):
    """One named model endpoint. Holds the *name* of the key variable, never the key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    base_url: str
    model: str
    api_key_env: str | None = None
    reasoning_effort: str | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    context_window: int = Field(default=262_144, gt=0)
    prices: Prices | None = None
    supports_tools: bool = True
    echo_reasoning: bool = Field(
        default=False,
        description="send a tool-call turn's reasoning_content back with it (DeepSeek's "
        "thinking mode with tools needs it; other servers may reject the field)",
    )
    timeout_s: float = Field(default=180.0, gt=0)  # per HTTP attempt
    description: str = ""

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"invalid model name {v!r} (letters, digits, '.', '_', '-')")
        return v

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {v!r}")
        return v.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _check_env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError(f"api_key_env must be an environment variable name, got {v!r}")
        return v

    def resolve_api_key(self, env: Mapping[str, str] | None = None) -> SecretStr | None:
        """Read the key from the environment; None when the entry needs no key."""
        if self.api_key_env is None:
            return None
        value = (os.environ if env is None else env).get(self.api_key_env, "")
        if not value:
            raise ModelConfigError(
                f"model {self.name!r} needs an API key in environment variable "
                f"{self.api_key_env} (not set)"
            )
        return SecretStr(value)


class ModelRegistry(BaseModel):
    """Models by name plus role mappings (e.g. ``judge``); ``sources`` lists files loaded."""

    model_config = ConfigDict(frozen=True)

    models: dict[str, ModelSpec]
    roles: dict[str, str] = Field(default_factory=dict)
    sources: list[str] = Field(default_factory=list)

    def names(self) -> list[str]:
        return sorted(self.models)

    def get(self, name: str) -> ModelSpec:
        """The model called ``name``, or the model a role of that name maps to."""
        if name in self.models:
            return self.models[name]
        if name in self.roles:
            return self.models[self.roles[name]]
        known = self.names() + [f"{r} (role)" for r in sorted(self.roles)]
        raise UnknownModelError(name, known)

    def role(self, role: str) -> ModelSpec:
        if role not in self.roles:
            raise ModelConfigError(
                f"unknown role {role!r}; known roles: {', '.join(sorted(self.roles)) or '(none)'}"
            )
        return self.models[self.roles[role]]

    def __contains__(self, name: object) -> bool:
        return name in self.models or name in self.roles


def default_user_path() -> Path:
    """``$XDG_CONFIG_HOME/dbaops/models.toml``, defaulting to ``~/.config/dbaops/models.toml``."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "dbaops" / "models.toml"


def _read_toml_text(text: str, source: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ModelConfigError(f"{source}: invalid TOML: {e}") from e
    unknown = sorted(set(data) - _TOP_LEVEL_KEYS)
    if unknown:
        hints = [
            f"{k!r}: did you mean {c[0]!r}?"
            for k in unknown
            if (c := difflib.get_close_matches(k, sorted(_TOP_LEVEL_KEYS), n=1))
        ]
        raise ModelConfigError(
            f"{source}: unknown top-level key(s) {', '.join(unknown)} (expected [models.<name>] "
            "tables and a [roles] table)" + ("; " + "; ".join(hints) if hints else "")
        )
    models = data.get("models", {})
    if not isinstance(models, dict) or any(not isinstance(v, dict) for v in models.values()):
        raise ModelConfigError(f"{source}: 'models' must be tables [models.<name>]")
    roles = data.get("roles", {})
    if not isinstance(roles, dict) or any(not isinstance(v, str) for v in roles.values()):
        raise ModelConfigError(f"{source}: 'roles' must map role names to model names")
    return data


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _unknown_key(key: str, valid: list[str]) -> str:
    """An unknown key's message: the valid keys, and the close one when there is one."""
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {key!r} (valid: {', '.join(valid)}){hint}"


def _format_validation(source: str, name: str, err: ValidationError, merged: bool) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        field = f"models.{name}.{loc}" if loc else f"models.{name}"
        message = e["msg"]
        if e["type"] == "extra_forbidden":
            owner = Prices if len(e["loc"]) > 1 and e["loc"][0] == "prices" else ModelSpec
            valid = [k for k in owner.model_fields if k != "name"]
            message = _unknown_key(str(e["loc"][-1]), valid)
        lines.append(f"{source}: {field}: {message}")
    note = " (entry merged over the shipped defaults)" if merged else ""
    return f"invalid model entry {name!r}{note}:\n  " + "\n  ".join(lines)


def _user_file(path: str | os.PathLike[str] | None, use_user_file: bool) -> Path | None:
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise ModelConfigError(f"{p}: model registry file not found")
        return p
    if not use_user_file:
        return None
    env_path = os.environ.get(ENV_MODELS_FILE)
    if env_path:
        p = Path(env_path).expanduser()
        if not p.is_file():
            raise ModelConfigError(f"{p}: model registry file not found (from ${ENV_MODELS_FILE})")
        return p
    p = default_user_path()
    return p if p.is_file() else None


def load_registry(
    path: str | os.PathLike[str] | None = None,
    *,
    use_user_file: bool = True,
    include_defaults: bool = True,
) -> ModelRegistry:
    """Load the shipped defaults, then the user file (explicit ``path`` > $DBAOPS_MODELS >
    ``~/.config/dbaops/models.toml``) over them. ``use_user_file=False`` ignores the implicit
    user files (an explicit ``path`` is always read)."""
    layers: list[tuple[str, dict[str, Any]]] = []
    if include_defaults:
        res = resources.files("dbaops.models").joinpath(DEFAULTS_RESOURCE)
        src = f"<dbaops.models/{DEFAULTS_RESOURCE}>"
        layers.append((src, _read_toml_text(res.read_text(encoding="utf-8"), src)))
    user = _user_file(path, use_user_file)
    if user is not None:
        layers.append((str(user), _read_toml_text(user.read_text(encoding="utf-8"), str(user))))

    raw: dict[str, dict[str, Any]] = {}
    last_source: dict[str, str] = {}
    merged_flag: dict[str, bool] = {}
    roles: dict[str, str] = {}
    role_source: dict[str, str] = {}
    for source, data in layers:
        for name, entry in data.get("models", {}).items():
            merged_flag[name] = name in raw
            raw[name] = _deep_merge(raw.get(name, {}), entry)
            last_source[name] = source
        for role, target in data.get("roles", {}).items():
            roles[role] = target
            role_source[role] = source

    models: dict[str, ModelSpec] = {}
    for name, entry in raw.items():
        if "name" in entry:
            raise ModelConfigError(
                f"{last_source[name]}: models.{name}.name: the name is the table key; remove it"
            )
        try:
            models[name] = ModelSpec.model_validate({"name": name, **entry})
        except ValidationError as e:
            raise ModelConfigError(
                _format_validation(last_source[name], name, e, merged_flag[name])
            ) from e
    for role, target in roles.items():
        if target not in models:
            raise ModelConfigError(
                f"{role_source[role]}: roles.{role}: unknown model {target!r}; "
                f"known models: {', '.join(sorted(models))}"
            )
        if role in models and models[role] != models[target]:
            raise ModelConfigError(
                f"{role_source[role]}: roles.{role}: a model is also named {role!r}; "
                "rename the role or the model"
            )
    return ModelRegistry(models=models, roles=roles, sources=[s for s, _ in layers])


def get_model(name: str, path: str | os.PathLike[str] | None = None) -> ModelSpec:
    """Shortcut: ``load_registry(path).get(name)``."""
    return load_registry(path).get(name)
