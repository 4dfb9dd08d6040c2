"""An async chat-completions client with tools, exact accounting and bounded retries.

``ModelClient.complete`` sends one chat-completions request (native tool calling, or the
text-mode fallback of ``dbaops.models.text_tools`` for ``supports_tools = false``), retries 429,
408, 5xx, timeouts and connection errors with exponential backoff and jitter (bounded attempts
and total time; the openai client's own retries are off so every HTTP attempt is counted), and
returns a ``Completion``. Every call, failed or not, yields a ``CallRecord`` that is added to
the client's ``CostMeter`` and handed to ``on_record``.

Failures: ``InfraError`` when retries are exhausted or the endpoint is unreachable (the run ends
as ``infra_error``); ``ModelRequestError`` for any other 4xx (not retried).

The request hash is the sha256 of the canonical JSON (sorted keys, no spaces, UTF-8) of the
exact request body sent: model, messages, tools, tool_choice, reasoning_effort and the entry's
``extra_body`` merged with the call's ``extra_body``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import anyio
import openai
from pydantic import BaseModel, Field

from dbaops.models.accounting import CostMeter, cost_usd, price_is_placeholder
from dbaops.models.errors import InfraError, ModelConfigError, ModelRequestError
from dbaops.models.registry import ModelSpec, load_registry
from dbaops.models.text_tools import normalize_tools, parse_text_tool_calls, to_text_mode_messages
from dbaops.record.kinds import (
    AttemptRecord,
    CallError,
    CallRecord,
    ResponsePayload,
    ToolCall,
    Usage,
)

NO_KEY_PLACEHOLDER = "EMPTY"  # sent as the bearer token to endpoints that need no key
RETRYABLE_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, compact separators, UTF-8, no NaN."""

    def _default(o: Any) -> Any:
        if isinstance(o, BaseModel):
            return o.model_dump(mode="json")
        raise TypeError(f"not JSON serializable: {type(o).__name__}")

    return json.dumps(
        obj,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_default,
    ).encode("utf-8")


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj)).hexdigest()


class RetryPolicy(BaseModel):
    """Exponential backoff with jitter, bounded in attempts and total time."""

    max_attempts: int = Field(default=6, ge=1)
    base_delay_s: float = Field(default=1.0, ge=0)
    max_delay_s: float = Field(default=30.0, ge=0)
    max_total_s: float = Field(default=600.0, gt=0)  # attempts + backoff of one call
    jitter: float = Field(default=0.25, ge=0, le=1)  # delay scaled by 1 +/- jitter
    honor_retry_after: bool = True  # use Retry-After (capped at max_delay_s) when larger

    def delay(self, retry: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Sleep before retry number ``retry`` (1-based)."""
        d = min(self.max_delay_s, self.base_delay_s * (2 ** (retry - 1)))
        d *= 1 + self.jitter * (2 * rng.random() - 1)
        if self.honor_retry_after and retry_after is not None:
            d = max(d, min(retry_after, self.max_delay_s))
        return max(0.0, d)


class Completion(BaseModel):
    """The result of one successful call."""

    model_name: str
    model: str  # provider model id requested
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    price_placeholder: bool = False  # cost_usd computed from placeholder (unchecked) prices
    latency_ms: float = 0.0  # the successful attempt
    elapsed_ms: float = 0.0  # all attempts and backoff
    retries: int = 0
    request_hash: str
    response_id: str | None = None
    tool_mode: Literal["native", "text"] = "native"
    tool_parse_errors: list[str] = Field(default_factory=list)  # text mode: unparsable blocks

    def assistant_message(self) -> dict[str, Any]:
        """The assistant turn in native OpenAI format, to append to the history (works for
        both tool modes: text-mode clients rewrite it on the next call)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": tc.id,
                    "type": "function",
                    "function": {"name": tc.name, "arguments": tc.raw_arguments},
                }
                for tc in self.tool_calls
            ]
        return msg


def _retry_after_s(err: openai.APIStatusError) -> float | None:
    headers = err.response.headers
    for name, div in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            v = float(value) / div
        except ValueError:
            continue
        if math.isfinite(v) and v >= 0:
            return v
    return None


def _status_message(err: openai.APIStatusError) -> str:
    body = err.body
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            return f"HTTP {err.status_code}: {inner['message']}"
    return f"HTTP {err.status_code}: {err.message}"


def _parse_native_tool_calls(message: Any) -> list[ToolCall]:
    out: list[ToolCall] = []
    for i, tc in enumerate(getattr(message, "tool_calls", None) or []):
        fn = getattr(tc, "function", None)
        if fn is None:  # custom (non-function) tool calls are not used by dbaops
            continue
        raw = fn.arguments or ""
        call_id = tc.id or f"call_{i}"
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as e:
            out.append(ToolCall(id=call_id, name=fn.name, raw_arguments=raw, parse_error=str(e)))
            continue
        if not isinstance(parsed, dict):
            out.append(
                ToolCall(
                    id=call_id,
                    name=fn.name,
                    raw_arguments=raw,
                    parse_error="arguments not a JSON object",
                )
            )
            continue
        out.append(ToolCall(id=call_id, name=fn.name, arguments=parsed, raw_arguments=raw))
    return out


class ModelClient:
    """Chat completions with tools against one registry entry.

    ``retry`` bounds retries; ``timeout_s`` (default: the entry's) bounds each attempt;
    ``meter`` collects costs (a fresh ``CostMeter`` by default); ``on_record`` receives every
    ``CallRecord``; ``blob_sink(sha256, canonical_json_bytes)`` may store the request messages
    and return a pointer kept in ``CallRecord.messages_ref``; ``env`` replaces ``os.environ``
    for reading the key; ``rng`` makes jitter reproducible.
    """

    def __init__(
        self,
        spec: ModelSpec,
        *,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
        meter: CostMeter | None = None,
        on_record: Callable[[CallRecord], Any] | None = None,
        blob_sink: Callable[[str, bytes], str | None] | None = None,
        env: Mapping[str, str] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.spec = spec
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s if timeout_s is not None else spec.timeout_s
        self.meter = meter if meter is not None else CostMeter()
        self.on_record = on_record
        self.blob_sink = blob_sink
        self._rng = rng or random.Random()
        self._seq = 0
        key = spec.resolve_api_key(env)
        self._openai = openai.AsyncOpenAI(
            api_key=key.get_secret_value() if key is not None else NO_KEY_PLACEHOLDER,
            base_url=spec.base_url,
            max_retries=0,
            timeout=self.timeout_s,
        )

    def _scrub(self, text: str) -> str:
        """Remove the API key from text bound for records and errors (some servers echo it)."""
        key = self._openai.api_key
        if key and key != NO_KEY_PLACEHOLDER and key in text:
            text = text.replace(key, "[REDACTED]")
        return text

    def __repr__(self) -> str:
        return (
            f"ModelClient(name={self.spec.name!r}, model={self.spec.model!r}, "
            f"base_url={self.spec.base_url!r})"
        )

    async def aclose(self) -> None:
        await self._openai.close()

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def build_request(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The exact JSON body ``complete`` sends for these arguments."""
        spec = self.spec
        norm_tools = normalize_tools(tools)
        body: dict[str, Any] = {"model": spec.model}
        if spec.supports_tools:
            body["messages"] = [dict(m) for m in messages]
            if norm_tools:
                body["tools"] = norm_tools
                if tool_choice is not None:
                    body["tool_choice"] = tool_choice
        else:
            body["messages"] = to_text_mode_messages(messages, norm_tools, tool_choice)
        if spec.reasoning_effort is not None:
            body["reasoning_effort"] = spec.reasoning_effort
        body.update(spec.extra_body)
        if extra_body:
            body.update(extra_body)
        return body

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None = None,
        *,
        tool_choice: Any = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Completion:
        """One chat completion. ``messages`` are OpenAI-format dicts (assistant ``tool_calls``
        and ``role: tool`` results included); ``tools`` are OpenAI tool dicts, bare
        ``{name, description, parameters}`` dicts or ``ToolSpec`` objects; ``tool_choice`` is
        ``"auto"``, ``"required"``, ``"none"`` or a named-function dict."""
        spec = self.spec
        body = self.build_request(messages, tools, tool_choice, extra_body)
        request_hash = sha256_json(body)
        messages_bytes = canonical_json([dict(m) for m in messages])
        messages_sha = hashlib.sha256(messages_bytes).hexdigest()
        messages_ref = self.blob_sink(messages_sha, messages_bytes) if self.blob_sink else None
        self._seq += 1
        tool_mode: Literal["native", "text"] = "native" if spec.supports_tools else "text"
        base = {
            "seq": self._seq,
            "model_name": spec.name,
            "model": spec.model,
            "base_url": spec.base_url,
            "tool_mode": tool_mode,
            "request_sha256": request_hash,
            "messages_sha256": messages_sha,
            "messages_ref": messages_ref,
            "n_messages": len(messages),
            "n_tools": len(normalize_tools(tools)),
            "price_placeholder": price_is_placeholder(spec.prices),
        }
        send_extra = {k: v for k, v in body.items() if k not in ("model", "messages")}

        policy = self.retry
        attempts: list[AttemptRecord] = []
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            remaining = policy.max_total_s - (time.monotonic() - start)
            t0 = time.perf_counter()
            err_msg: str
            status: int | None = None
            retry_after: float | None = None
            try:
                resp = await self._openai.chat.completions.create(
                    model=body["model"],
                    messages=body["messages"],
                    extra_body=send_extra,
                    timeout=max(0.05, min(self.timeout_s, remaining)),
                )
                latency_ms = (time.perf_counter() - t0) * 1000
                if not resp.choices:
                    raise _EmptyResponse("response has no choices")
            except openai.APIStatusError as e:
                latency_ms = (time.perf_counter() - t0) * 1000
                status = e.status_code
                err_msg = self._scrub(_status_message(e))
                if status not in RETRYABLE_STATUS:
                    attempts.append(
                        AttemptRecord(
                            attempt=attempt,
                            outcome="fatal",
                            status_code=status,
                            error=err_msg,
                            latency_ms=latency_ms,
                        )
                    )
                    record = self._finish_failed(
                        base, attempts, start, "request_error", err_msg, status
                    )
                    raise ModelRequestError(
                        f"model {spec.name!r} refused the request: {err_msg}",
                        status_code=status,
                        attempts=attempt,
                        record=record,
                    ) from e
                retry_after = _retry_after_s(e)
            except openai.APITimeoutError:
                latency_ms = (time.perf_counter() - t0) * 1000
                err_msg = "request timed out"
            except openai.APIConnectionError as e:
                latency_ms = (time.perf_counter() - t0) * 1000
                cause = e.__cause__
                err_msg = self._scrub(f"connection error: {cause or e.message}")
            except (openai.APIError, _EmptyResponse) as e:
                latency_ms = (time.perf_counter() - t0) * 1000
                err_msg = self._scrub(f"invalid response: {e}")
            else:
                attempts.append(
                    AttemptRecord(
                        attempt=attempt, outcome="ok", status_code=200, latency_ms=latency_ms
                    )
                )
                return self._finish_ok(base, attempts, start, resp, latency_ms, request_hash)

            elapsed = time.monotonic() - start
            delay = policy.delay(attempt, self._rng, retry_after)
            give_up = attempt >= policy.max_attempts or elapsed + delay >= policy.max_total_s
            attempts.append(
                AttemptRecord(
                    attempt=attempt,
                    outcome="retryable",
                    status_code=status,
                    error=err_msg,
                    latency_ms=latency_ms,
                    backoff_s=0.0 if give_up else delay,
                )
            )
            if give_up:
                why = (
                    f"{attempt} attempt(s)"
                    if attempt >= policy.max_attempts
                    else f"time budget {policy.max_total_s:g}s"
                )
                message = (
                    f"model {spec.name!r} at {spec.base_url} unavailable after {why}: {err_msg}"
                )
                record = self._finish_failed(base, attempts, start, "infra_error", message, status)
                raise InfraError(message, status_code=status, attempts=attempt, record=record)
            await anyio.sleep(delay)

    def _emit(self, record: CallRecord) -> CallRecord:
        self.meter.add(record)
        if self.on_record is not None:
            self.on_record(record)
        return record

    def _finish_failed(
        self,
        base: dict[str, Any],
        attempts: list[AttemptRecord],
        start: float,
        kind: Literal["infra_error", "request_error"],
        message: str,
        status: int | None,
    ) -> CallRecord:
        record = CallRecord(
            **base,
            usage=Usage(),
            cost_usd=cost_usd(Usage(), self.spec.prices),
            latency_ms=attempts[-1].latency_ms,
            elapsed_ms=(time.monotonic() - start) * 1000,
            retries=len(attempts) - 1,
            attempts=attempts,
            error=CallError(type=kind, message=message, status_code=status),
        )
        return self._emit(record)

    def _finish_ok(
        self,
        base: dict[str, Any],
        attempts: list[AttemptRecord],
        start: float,
        resp: Any,
        latency_ms: float,
        request_hash: str,
    ) -> Completion:
        spec = self.spec
        choice = resp.choices[0]
        message = choice.message
        extra = message.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        content: str | None = message.content
        parse_errors: list[str] = []
        if spec.supports_tools:
            tool_calls = _parse_native_tool_calls(message)
        else:
            content, tool_calls, parse_errors = parse_text_tool_calls(
                content, f"call_{request_hash[:8]}_"
            )
        finish_reason = choice.finish_reason
        if tool_calls and not spec.supports_tools and finish_reason == "stop":
            finish_reason = "tool_calls"
        usage = Usage.from_provider(resp.usage)
        cost = cost_usd(usage, spec.prices)
        elapsed_ms = (time.monotonic() - start) * 1000
        payload = ResponsePayload(
            content=content,
            reasoning_content=reasoning if isinstance(reasoning, str) else None,
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            response_id=resp.id,
            response_model=resp.model,
        )
        self._emit(
            CallRecord(
                **base,
                response=payload,
                usage=usage,
                cost_usd=cost,
                latency_ms=latency_ms,
                elapsed_ms=elapsed_ms,
                retries=len(attempts) - 1,
                attempts=attempts,
            )
        )
        return Completion(
            model_name=spec.name,
            model=spec.model,
            content=content,
            reasoning_content=payload.reasoning_content,
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            usage=usage,
            cost_usd=cost,
            price_placeholder=base["price_placeholder"],
            latency_ms=latency_ms,
            elapsed_ms=elapsed_ms,
            retries=len(attempts) - 1,
            request_hash=request_hash,
            response_id=resp.id,
            tool_mode=base["tool_mode"],
            tool_parse_errors=parse_errors,
        )


class _EmptyResponse(Exception):
    pass


def open_client(
    name: str,
    *,
    registry_path: str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> ModelClient:
    """A ``ModelClient`` for the registry entry (or role) ``name``."""
    return ModelClient(load_registry(registry_path).get(name), **kwargs)


async def check_endpoint(spec: ModelSpec, timeout_s: float = 10.0) -> None:
    """One cheap request (``GET /models``, no retries) before any database work: the endpoint
    answers and does not refuse the key. Raises :class:`InfraError` (unreachable) or
    :class:`ModelConfigError` (no key, or the key refused); any other answer passes (some
    OpenAI-compatible servers have no model list)."""
    key = spec.resolve_api_key()
    client = openai.AsyncOpenAI(
        base_url=spec.base_url,
        api_key=key.get_secret_value() if key else "none",
        max_retries=0,
        timeout=timeout_s,
    )
    try:
        await client.models.list()
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        source = f" from {spec.api_key_env}" if spec.api_key_env else ""
        raise ModelConfigError(
            f"model {spec.name!r}: {spec.base_url} refused the API key{source} "
            f"(HTTP {exc.status_code})"
        ) from None
    except openai.APIConnectionError as exc:  # includes timeouts
        raise InfraError(
            f"model {spec.name!r}: cannot reach {spec.base_url} ({type(exc).__name__}: {exc})"
        ) from None
    except openai.APIStatusError:
        pass  # it answered: reachable, and the key was not refused
    finally:
        await client.close()
