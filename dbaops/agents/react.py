"""The ReAct agent: one Think-Act-Observe loop over any OpenAI-compatible model (DBA-Bench §6.1).

``ReactAgent`` keeps one continuing conversation per run. Each model turn may call tools from
``session.tools`` (native tool calling; the model layer falls back to text-mode tool calls for
servers without tools); every result goes back as a ``role: tool`` message paired with its call.

Bounded runs end when the model's ``submit_report`` succeeds. Persistent runs never end on a
report: when the model replies without a tool call the agent calls ``suspend`` itself and
appends the wake-up as a user message, so the same conversation continues across events until
``session.ended``.

Turn budget (paper §6.1): at most ``turn_budget`` model turns per run (compaction summaries
are not turns). When it is spent, one extra final round offers only ``submit_report``; then a
bounded run stops and a persistent run waits for ``session.ended``. If that final reply is
plain text instead of a call, the text is submitted as the report's summary (recorded as an
``agent_event`` "fallback_report").

Context compaction (paper §6.1): before each call the prompt size is estimated (chars/4 of
the messages and tools, or the last reported ``prompt_tokens`` plus chars/4 of what was added
since, whichever is larger). Above ``compact_at`` x context window, the system prompt, the
kickoff message, the first two rounds and the two most recent rounds are kept and the rounds in
between are replaced by a summary written by the same model (a separate call with a fixed
prompt). A round is one assistant message with its tool results (and any user message that
followed it), so tool results always stay with their tool calls. Each compaction is a
``CompactionRecord`` (kind ``compaction``) in the trace.

Every model call reaches ``record`` as a ``CallRecord`` (kind ``model_call``); with
``blob_dir`` the request messages are stored gzipped by hash. ``InfraError`` propagates
unchanged out of ``run`` (the runner ends the run as ``infra_error``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio

from dbaops.agents import react_prompts as P
from dbaops.agents.base import AgentSession
from dbaops.models.accounting import CostMeter
from dbaops.models.client import Completion, ModelClient, RetryPolicy, check_endpoint
from dbaops.models.errors import ModelRequestError
from dbaops.models.registry import ModelSpec, load_registry
from dbaops.models.text_tools import normalize_tools
from dbaops.record.kinds import (
    AgentEventRecord,
    CompactionRecord,
    Record,
    ToolCall,
    ToolCallRecord,
    Usage,
)
from dbaops.tools.base import Tool, ToolResult, ToolSpec

Message = dict[str, Any]
Round = list[Message]

SUBMIT_REPORT = "submit_report"
SUSPEND = "suspend"
#: What a summary is expected to cost in the context (its prompt asks for a short one).
_SUMMARY_TOKENS = 600
_OVERFLOW_RE = re.compile(r"context|too long|too many tokens|maximum.*tokens|length", re.I)


class ChatClient(Protocol):
    """What the agent needs of a model client (``ModelClient`` or ``ReplayModelClient``)."""

    @property
    def spec(self) -> ModelSpec: ...

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None = None,
        *,
        tool_choice: Any = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Completion: ...


def blob_sink_for(blob_dir: Path) -> Callable[[str, bytes], str]:
    """A ``ModelClient.blob_sink`` storing request messages as ``<blob_dir>/<sha256>.json.gz``
    (written once, atomically). The returned ref is ``<blob_dir name>/<sha256>.json.gz``, i.e.
    relative to the run directory when ``blob_dir`` is a direct child of it."""
    blob_dir.mkdir(parents=True, exist_ok=True)

    def sink(sha: str, data: bytes) -> str:
        name = f"{sha}.json.gz"
        target = blob_dir / name
        if not target.exists():
            tmp = blob_dir / f".{name}.{os.getpid()}.tmp"
            tmp.write_bytes(gzip.compress(data, mtime=0))
            os.replace(tmp, target)
        return f"{blob_dir.name}/{name}"

    return sink


def _chars(obj: Any) -> int:
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str))


def _flatten(rounds: Sequence[Round]) -> list[Message]:
    return [m for r in rounds for m in r]


def _clip(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    head = int(limit * 0.8)
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n... ({omitted} characters omitted) ...\n{text[-tail:]}"


class ReactAgent:
    """ReAct over ``session.tools`` with one model; see the module docstring.

    ``model`` is a registry name (or role) or a ``ModelSpec``. ``record`` receives every trace
    record the agent produces (``CallRecord``, ``CompactionRecord``, ``AgentEventRecord`` and,
    with a replay client, ``ReplayDivergence``). ``client`` replaces the ``ModelClient`` the agent
    would build (e.g. a ``ReplayModelClient``); its ``on_record`` is wired to ``record`` when
    unset. ``context_tokens`` overrides the model's ``context_window`` for compaction.
    ``blob_dir`` stores request messages by hash (see ``blob_sink_for``); ``retry`` is the
    client's retry policy; ``extra_body`` is merged into every request. ``echo_reasoning`` sends
    a tool-call turn's ``reasoning_content`` back with it (required by DeepSeek's thinking mode
    with tools; some servers reject the field); default: the model entry's ``echo_reasoning``.
    ``fallback_report`` submits a plain-text final-round answer as the report's summary.
    """

    def __init__(
        self,
        model: str | ModelSpec,
        *,
        registry_path: str | os.PathLike[str] | None = None,
        turn_budget: int = 50,
        context_tokens: int | None = None,
        record: Callable[[Record], None] | None = None,
        client: ChatClient | None = None,
        blob_dir: str | os.PathLike[str] | None = None,
        retry: RetryPolicy | None = None,
        compact_at: float = 0.75,
        max_observation_chars: int = 20_000,
        extra_body: Mapping[str, Any] | None = None,
        fallback_report: bool = True,
        echo_reasoning: bool | None = None,
    ) -> None:
        if turn_budget < 1:
            raise ValueError("turn_budget must be at least 1")
        if not 0 < compact_at <= 1:
            raise ValueError("compact_at must be in (0, 1]")
        if isinstance(model, ModelSpec):
            spec = model
        elif client is not None:
            spec = client.spec
        else:
            spec = load_registry(registry_path).get(model)
        if client is None:
            spec.resolve_api_key()  # a missing key fails here, before any run starts
        self.spec = spec
        self.name = f"react:{model if isinstance(model, str) else spec.name}"
        self.turn_budget = turn_budget
        self.context_tokens = context_tokens or spec.context_window
        self.compact_at = compact_at
        self.max_observation_chars = max_observation_chars
        self.extra_body = dict(extra_body) if extra_body else None
        self.fallback_report = fallback_report
        self.echo_reasoning = spec.echo_reasoning if echo_reasoning is None else echo_reasoning
        self._record = record
        self._external_client = client
        self._blob_dir = Path(blob_dir) if blob_dir is not None else None
        self._retry = retry
        self._session: AgentSession | None = None
        self._client: ChatClient | None = None
        self.meter = CostMeter()
        self._reset()

    # -- live progress ---------------------------------------------------------------------

    @property
    def usage(self) -> Usage:
        return self.meter.usage

    @property
    def cost_usd(self) -> float | None:
        return self.meter.cost_usd

    @property
    def threshold_tokens(self) -> int:
        return int(self.context_tokens * self.compact_at)

    def progress(self) -> dict[str, Any]:
        """Turns, tokens and cost so far (for a live display)."""
        u = self.usage
        return {
            "turns": self.turns,
            "turn_budget": self.turn_budget,
            "final_round": self.final_round_done,
            "model_calls": self.meter.total.calls,
            "input_tokens": u.input_tokens,
            "cached_input_tokens": u.cached_input_tokens,
            "output_tokens": u.output_tokens,
            "cost_usd": self.cost_usd,
            "compactions": self.compactions,
            "reports": self.reports,
        }

    # -- conversation state ----------------------------------------------------------------

    def _reset(self) -> None:
        self.turns = 0
        self.final_round_done = False
        self.compactions = 0
        self.reports = 0
        self._prefix: list[Message] = []
        self._rounds: list[Round] = []
        self._summary: str | None = None
        self._compacted_upto = 0
        self._skipped_compaction_at = -1
        self._rejections = 0
        self._last_prompt: tuple[int, int] | None = None  # (reported prompt_tokens, chars sent)

    def messages(self) -> list[Message]:
        """The conversation as the next call would send it."""
        out = list(self._prefix)
        out += _flatten(self._rounds[:2])
        if self._summary is not None:
            out.append({"role": "user", "content": P.SUMMARY_MESSAGE.format(summary=self._summary)})
        out += _flatten(self._rounds[max(2, self._compacted_upto) :])
        return out

    def _append_user(self, text: str) -> None:
        msg = {"role": "user", "content": text}
        (self._rounds[-1] if self._rounds else self._prefix).append(msg)

    def _emit(self, rec: Record) -> None:
        if rec.t_scn is None and self._session is not None:
            rec.t_scn = self._session.clock.now()
        if self._record is not None:
            self._record(rec)

    def _event(self, event: str, **detail: Any) -> None:
        self._emit(AgentEventRecord(agent=self.name, event=event, turn=self.turns, detail=detail))

    # -- the loop ---------------------------------------------------------------------------

    async def preflight(self) -> None:
        """Check the model endpoint and key before the run's database work (a replay, which
        calls no endpoint, checks nothing)."""
        if self._external_client is None:
            await check_endpoint(self.spec)

    def _open_client(self) -> tuple[ChatClient, ModelClient | None]:
        if self._external_client is not None:
            client = self._external_client
            if getattr(client, "on_record", "absent") is None:
                setattr(client, "on_record", self._emit)  # noqa: B010
            meter = getattr(client, "meter", None)
            if isinstance(meter, CostMeter):
                self.meter = meter
            return client, None
        self.meter = CostMeter()
        owned = ModelClient(
            self.spec,
            retry=self._retry,
            meter=self.meter,
            on_record=self._emit,
            blob_sink=blob_sink_for(self._blob_dir) if self._blob_dir is not None else None,
        )
        return owned, owned

    async def run(self, session: AgentSession) -> None:
        self._session = session
        self._reset()
        client, owned = self._open_client()
        self._client = client
        try:
            await self._loop(session)
        finally:
            if owned is not None:
                with anyio.CancelScope(shield=True):
                    await owned.aclose()

    async def _loop(self, s: AgentSession) -> None:
        persistent = s.mode == "persistent"
        task = s.task
        specs = [t.spec for t in s.tools.values()]
        self._prefix = [
            {
                "role": "system",
                "content": P.system_prompt(
                    s.mode,
                    task if isinstance(task, str) else None,
                    budget=self.turn_budget,
                    horizon_s=s.budget.time_s,
                    tool_names=s.tools,
                ),
            },
            {"role": "user", "content": P.KICKOFF_PERSISTENT if persistent else P.KICKOFF_BOUNDED},
        ]
        while not s.ended.is_set():
            if self.turns >= self.turn_budget:
                await self._final_round(s)
                if persistent:
                    await s.ended.wait()
                return
            comp = await self._call(specs)
            self.turns += 1
            self._rounds.append([self._assistant_message(comp)])
            if not comp.tool_calls:
                if not persistent:
                    self._append_user(P.NUDGE_BOUNDED)
                elif not await self._self_suspend(s):
                    return
                continue
            finished = ended = False
            for tc in comp.tool_calls:
                text, result = await self._execute(tc, s.tools)
                self._rounds[-1].append({"role": "tool", "tool_call_id": tc.id, "content": text})
                if result is None:
                    continue
                if tc.name == SUBMIT_REPORT and result.ok:
                    self.reports += 1
                    finished = not persistent
                if tc.name == SUSPEND and (s.ended.is_set() or result.detail.get("closed")):
                    ended = True
            if finished or ended:
                return
        if self.reports == 0 and not self.final_round_done:
            # The session ended (time budget or horizon) before any report: the final round
            # still offers submit_report, so a slow model is not cut off without one.
            await self._final_round(s, reason="session_ended")

    async def _final_round(self, s: AgentSession, reason: str = "budget_exhausted") -> None:
        """Budget spent: one more call offering only ``submit_report`` (paper §6.1)."""
        self._event(reason, turn_budget=self.turn_budget)
        tool = s.tools.get(SUBMIT_REPORT)
        if tool is None:
            return
        self._append_user(P.FINAL_ROUND)
        comp = await self._call([tool.spec])
        self.final_round_done = True
        self._rounds.append([self._assistant_message(comp)])
        submitted = False
        for tc in comp.tool_calls:
            if tc.name == SUBMIT_REPORT and not submitted:
                text, result = await self._execute(tc, {SUBMIT_REPORT: tool})
                submitted = result is not None and result.ok
            else:
                text = (
                    "ERROR: not executed: the report was already submitted"
                    if submitted
                    else "ERROR: not executed: only submit_report is available in the final round"
                )
            self._rounds[-1].append({"role": "tool", "tool_call_id": tc.id, "content": text})
        if submitted:
            self.reports += 1
        elif self.fallback_report and (comp.content or "").strip():
            args = _fallback_report_args(tool.spec, (comp.content or "").strip())
            result = await self._invoke(tool, args)
            self._event("fallback_report", ok=result.ok)
            if result.ok:
                self.reports += 1

    async def _self_suspend(self, s: AgentSession) -> bool:
        """Persistent mode, the model replied without a tool call: suspend on its behalf and
        append the wake-up. Returns False when the scenario has ended."""
        tool = s.tools.get(SUSPEND)
        if tool is None:
            await s.ended.wait()
            return False
        self._event("self_suspend")
        result = await self._invoke(tool, {})
        self._append_user(P.SELF_SUSPEND.format(observation=self._render(result)))
        return not (s.ended.is_set() or result.detail.get("closed"))

    # -- tools ------------------------------------------------------------------------------

    async def _invoke(self, tool: Tool, args: dict[str, Any]) -> ToolResult:
        try:
            return await tool.handler(args)
        except Exception as exc:  # a tool bug is the agent's observation, not a crash
            return ToolResult(
                ok=False,
                error=f"{type(exc).__name__}: {exc}",
                observation=f"error: tool failed: {exc}",
            )

    async def _execute(
        self, tc: ToolCall, tools: Mapping[str, Tool]
    ) -> tuple[str, ToolResult | None]:
        if tc.parse_error is not None:
            told = (
                f"ERROR: the arguments of {tc.name} are not a valid JSON object "
                f"({tc.parse_error}); call it again with valid JSON arguments."
            )
            self._rejected(tc, "malformed_arguments", told)
            return told, None
        tool = tools.get(tc.name)
        if tool is None:
            told = (
                f"ERROR: no tool named {tc.name!r} is available; available tools: "
                f"{', '.join(sorted(tools))}."
            )
            self._rejected(tc, "unknown_tool", told)
            return told, None
        result = await self._invoke(tool, dict(tc.arguments))
        return self._render(result), result

    def _rejected(self, tc: ToolCall, reason: str, told: str) -> None:
        """Record a call the harness could not run (``malformed_arguments``, ``unknown_tool``)
        with what the model was told; nothing ran, so no judge counts it."""
        self._rejections += 1
        self._emit(
            ToolCallRecord(
                call_id=f"r{self._rejections:04d}",  # apart from the harness's c-numbers
                tool=tc.name[:200],
                ok=False,
                status="rejected",
                observation=told,
                error=reason,
                detail={"raw_arguments": tc.raw_arguments[:4000], "reason": reason},
            )
        )

    def _render(self, result: ToolResult) -> str:
        text = result.observation or ""
        if not result.ok:
            err = result.error or "the tool call failed"
            head = "ERROR" if err in text else f"ERROR: {err}"
            text = f"{head}\n{text}" if text else head
        return _clip(text, self.max_observation_chars) or "(no output)"

    # -- model calls and compaction ----------------------------------------------------------

    def _assistant_message(self, comp: Completion) -> Message:
        msg = comp.assistant_message()
        if not comp.tool_calls and not msg.get("content"):
            msg["content"] = "(no reply)"
        if self.echo_reasoning and comp.tool_calls and comp.reasoning_content:
            # Thinking models with tools (DeepSeek) require it back on tool-call turns.
            msg["reasoning_content"] = comp.reasoning_content
        return msg

    def _estimate(self, messages: list[Message], tools: Sequence[ToolSpec]) -> tuple[int, int]:
        """(estimated prompt tokens, chars) for sending ``messages`` with ``tools``."""
        chars = _chars(messages) + _chars(normalize_tools(tools))
        est = chars // 4
        if self._last_prompt is not None:
            tokens, sent = self._last_prompt
            est = max(est, tokens + max(0, chars - sent) // 4)
        return est, chars

    async def _call(self, tools: Sequence[ToolSpec]) -> Completion:
        assert self._client is not None
        messages = self.messages()
        est, _ = self._estimate(messages, tools)
        if est > self.threshold_tokens and self._clip_oversized():
            messages = self.messages()
            est, _ = self._estimate(messages, tools)
        if est > self.threshold_tokens and await self._compact(tools, "threshold"):
            messages = self.messages()
        try:
            comp = await self._client.complete(messages, list(tools), extra_body=self.extra_body)
        except ModelRequestError as exc:
            if not _OVERFLOW_RE.search(exc.message) or not await self._compact(
                tools, "context_overflow"
            ):
                raise
            messages = self.messages()
            comp = await self._client.complete(messages, list(tools), extra_body=self.extra_body)
        _, chars = self._estimate(messages, tools)
        if comp.usage.input_tokens:
            self._last_prompt = (comp.usage.input_tokens, chars)
        return comp

    def _clip_oversized(self) -> bool:
        """Clip any message longer than a quarter of the context (a huge reply or tool result
        in a round that compaction keeps): summarising the rounds around it would make no room
        that lasts. True if something was clipped (an ``agent_event`` says what)."""
        limit = self.context_tokens  # chars: a quarter of the window at ~4 chars per token
        clipped, removed = 0, 0
        for m in _flatten(self._rounds):
            content = m.get("content")
            if isinstance(content, str) and len(content) > limit:
                m["content"] = _clip(content, limit)
                clipped, removed = clipped + 1, removed + len(content) - len(m["content"])
        if clipped:
            self._last_prompt = None  # the reported prompt size no longer applies
            self._event("clipped_oversized", messages=clipped, chars_removed=removed)
        return clipped > 0

    async def _compact(self, tools: Sequence[ToolSpec], reason: str) -> bool:
        """Summarise the rounds between the first two and the last two; False if none, or (at
        the threshold) when a summary would not make room that lasts: the context would stay
        above the threshold, or the summary would save less than a tenth of it."""
        assert self._client is not None
        start = max(2, self._compacted_upto)
        end = len(self._rounds) - 2
        if end <= start:
            return False
        before, _ = self._estimate(self.messages(), tools)
        if reason == "threshold":
            expected = before - _chars(_flatten(self._rounds[start:end])) // 4 + _SUMMARY_TOKENS
            if expected > self.threshold_tokens or before - expected < self.threshold_tokens / 10:
                if self._skipped_compaction_at != len(self._rounds):
                    self._skipped_compaction_at = len(self._rounds)
                    self._event(
                        "compaction_skipped", est_tokens=before, expected_after=expected,
                        threshold_tokens=self.threshold_tokens,
                    )  # fmt: skip
                return False
        transcript = self._transcript(self._rounds[start:end])
        previous = P.SUMMARY_PREVIOUS.format(summary=self._summary) if self._summary else ""
        request = [
            {"role": "system", "content": P.SUMMARY_SYSTEM},
            {
                "role": "user",
                "content": P.SUMMARY_USER.format(previous=previous, transcript=transcript),
            },
        ]
        comp = await self._client.complete(request, None, extra_body=self.extra_body)
        summary = (comp.content or "").strip() or "(the summariser returned nothing)"
        self._summary = summary
        self._compacted_upto = end
        self._last_prompt = None
        self.compactions += 1
        after, _ = self._estimate(self.messages(), tools)
        self._emit(
            CompactionRecord(
                agent=self.name,
                turn=self.turns,
                reason="context_overflow" if reason == "context_overflow" else "threshold",
                rounds_total=len(self._rounds),
                summarised_rounds=[start, end],
                est_tokens_before=before,
                est_tokens_after=after,
                threshold_tokens=self.threshold_tokens,
                summary=summary,
                summary_request_sha256=comp.request_hash,
            )
        )
        return True

    def _transcript(self, rounds: Sequence[Round]) -> str:
        """The rounds as plain text for the summariser (bounded to half the context)."""
        per_message = 6_000
        parts: list[str] = []
        for m in _flatten(rounds):
            role = m.get("role")
            content = m.get("content")
            text = (
                content if isinstance(content, str) else ("" if content is None else str(content))
            )
            if role == "assistant":
                if text:
                    parts.append(f"[assistant] {_clip(text, per_message)}")
                for tc in m.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    args = _clip(str(fn.get("arguments", "")), per_message)
                    parts.append(f"[tool call {tc.get('id')}] {fn.get('name')}({args})")
            elif role == "tool":
                parts.append(f"[tool result {m.get('tool_call_id')}] {_clip(text, per_message)}")
            else:
                parts.append(f"[{role}] {_clip(text, per_message)}")
        body = "\n\n".join(parts)
        cap = max(20_000, self.context_tokens * 2)  # ~half the window at 4 chars per token
        if len(body) > cap:
            body = f"(earliest {len(body) - cap} characters omitted)\n" + body[-cap:]
        return body


def _fallback_report_args(spec: ToolSpec, text: str) -> dict[str, Any]:
    """Arguments for submit_report from a plain-text final answer: the text as the summary,
    other required fields empty of their declared type."""
    props = spec.parameters.get("properties") or {}
    args: dict[str, Any] = {"summary": text}
    empty: dict[str, Any] = {"string": "", "array": [], "object": {}}
    for name in spec.parameters.get("required") or []:
        if name not in args:
            kind = (props.get(name) or {}).get("type", "string")
            args[name] = empty.get(kind, "") if isinstance(kind, str) else ""
    return args


__all__ = [
    "ChatClient",
    "ReactAgent",
    "blob_sink_for",
]
