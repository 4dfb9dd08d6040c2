"""The ReAct agent over real HTTP against the scripted OpenAI-compatible server.

The tools are in-memory test doubles (an ``execute_sql`` that records statements and returns
canned text, a mailbox-like ``suspend``, a ``submit_report`` that keeps its arguments); the
model is the local scripted server, so requests, retries and accounting go through the real
client and HTTP stack.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from dbaops.agents import react_prompts as P
from dbaops.agents.base import Agent, AgentSession, Budget
from dbaops.agents.react import ReactAgent, _chars
from dbaops.clock import ScenarioClock
from dbaops.models import InfraError, ModelSpec, Prices, RetryPolicy
from dbaops.models.replay import ReplayExhausted, ReplayModelClient
from dbaops.record.kinds import (
    AgentEventRecord,
    CallRecord,
    CompactionRecord,
    Record,
    ReplayDivergence,
    ToolCallRecord,
)
from dbaops.record.trace import TraceWriter
from dbaops.testing import OpenAITestServer, ScriptedResponse, dead_base_url
from dbaops.testing.openai_server import ScriptedToolCall
from dbaops.tools.base import Tool, ToolResult, ToolSpec

FAST = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05, max_total_s=10.0)
PRICES = Prices(input=2.0, cached_input=0.5, output=8.0)
TASK = "Ticket T-1: checkout latency on shop.orders has tripled since 10:00. Fix it safely."
ALL_TOOLS = ["execute_sql", "read_mailbox", "submit_report", "suspend", "update_task"]


def spec_for(base_url: str, **kw: Any) -> ModelSpec:
    return ModelSpec(name="t", base_url=base_url, model="test-model", prices=PRICES, **kw)


def call(name: str, args: dict[str, Any] | str, call_id: str | None = None) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=args, id=call_id)


def step(*calls: ScriptedToolCall, **kw: Any) -> ScriptedResponse:
    return ScriptedResponse(tool_calls=list(calls), **kw)


REPORT = {
    "summary": "missing index on shop.orders(customer_id)",
    "root_cause": "seq scans of shop.orders",
    "actions": "CREATE INDEX CONCURRENTLY orders_customer_idx ON shop.orders (customer_id)",
    "verification": "p95 back to 12 ms",
}


class FakeEnv:
    """In-memory tool doubles with observable state."""

    def __init__(
        self,
        *,
        wakeups: Sequence[str] = (),
        sql_obs: Callable[[str], str] | None = None,
    ) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.reports: list[dict[str, Any]] = []
        self.wakeups = list(wakeups)
        self.sql_obs = sql_obs or (lambda sql: f"OK: {sql}")
        self.session: AgentSession | None = None
        self.ended = anyio.Event()
        self.reported = anyio.Event()

    def _tool(self, name: str, handler: Callable[[dict[str, Any]], Any], **params: Any) -> Tool:
        props = {k: {"type": v} for k, v in params.items()}
        spec = ToolSpec(
            name=name,
            description=f"test double of {name}",
            parameters={"type": "object", "properties": props, "required": list(params)[:1]},
        )

        async def wrapped(args: dict[str, Any]) -> ToolResult:
            self.calls.append((name, args))
            result: ToolResult = await handler(args)
            return result

        return Tool(spec=spec, handler=wrapped)

    def tools(self) -> dict[str, Tool]:
        async def execute_sql(args: dict[str, Any]) -> ToolResult:
            return ToolResult(observation=self.sql_obs(str(args.get("sql", ""))))

        async def read_mailbox(args: dict[str, Any]) -> ToolResult:
            return ToolResult(observation=f"1 task(s)\n[T-1] ticket: {TASK}")

        async def update_task(args: dict[str, Any]) -> ToolResult:
            return ToolResult(observation=f"task {args.get('id')}: status {args.get('status')}")

        async def suspend(args: dict[str, Any]) -> ToolResult:
            await anyio.sleep(0.01)
            if self.wakeups:
                text = "New in the mailbox:\n\n" + self.wakeups.pop(0)
                return ToolResult(observation=text, detail={"closed": False})
            self.ended.set()
            text = "The scenario has ended; no further tasks will arrive."
            return ToolResult(observation=text, detail={"closed": True})

        async def submit_report(args: dict[str, Any]) -> ToolResult:
            if not args.get("summary"):
                return ToolResult(ok=False, error="summary is required", observation="")
            self.reports.append(args)
            self.reported.set()
            return ToolResult(observation="report recorded")

        tools = [
            self._tool("execute_sql", execute_sql, sql="string"),
            self._tool("read_mailbox", read_mailbox),
            self._tool("update_task", update_task, id="string", status="string", note="string"),
            self._tool("suspend", suspend),
            self._tool(
                "submit_report",
                submit_report,
                summary="string",
                root_cause="string",
                actions="string",
                verification="string",
            ),
        ]
        return {t.spec.name: t for t in tools}

    def session_for(self, mode: str = "bounded", task: str | None = TASK) -> AgentSession:
        s = AgentSession.create(
            task=task or "",
            mode=mode,
            budget=Budget(turns=50, time_s=600.0),
            clock=ScenarioClock(),
            tools=self.tools(),
            ended=self.ended,
        )
        self.session = s
        return s

    @property
    def tool_names(self) -> list[str]:
        return [name for name, _ in self.calls]


async def run_agent(agent: ReactAgent, session: AgentSession) -> None:
    with anyio.fail_after(30):
        await agent.run(session)


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(t["function"]["name"] for t in body.get("tools") or [])


def assert_pairing(messages: list[dict[str, Any]]) -> None:
    """Every tool result follows the assistant message that called it, and every call of an
    assistant message is answered before the next assistant message."""
    pending: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            assert not pending, f"unanswered tool calls {pending}"
            pending = {tc["id"] for tc in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in pending, f"orphan tool result {m['tool_call_id']}"
            pending.discard(m["tool_call_id"])
    assert not pending


def agent_requests(server: OpenAITestServer) -> list[dict[str, Any]]:
    return [
        r.body for r in server.chat_requests if r.body["messages"][0]["content"] != P.SUMMARY_SYSTEM
    ]


# -- bounded ----------------------------------------------------------------------------------

SCRIPTED_SQL = [
    "SELECT pid, state, query FROM pg_stat_activity WHERE datname = current_database()",
    "EXPLAIN SELECT * FROM shop.orders WHERE customer_id = 42",
    "SET lock_timeout = '2s'; CREATE INDEX CONCURRENTLY orders_customer_idx "
    "ON shop.orders (customer_id)",
    "EXPLAIN SELECT * FROM shop.orders WHERE customer_id = 42",
]


@pytest.mark.anyio
async def test_bounded_investigate_fix_report() -> None:
    script = [
        step(call("read_mailbox", {})),
        step(call("execute_sql", {"sql": SCRIPTED_SQL[0]}), content="Look at sessions first."),
        step(call("execute_sql", {"sql": SCRIPTED_SQL[1]})),
        step(call("execute_sql", {"sql": SCRIPTED_SQL[2]})),
        step(
            call("execute_sql", {"sql": SCRIPTED_SQL[3]}),
            call("update_task", {"id": "T-1", "status": "resolved", "note": "index built"}),
        ),
        step(call("submit_report", REPORT)),
    ]
    env = FakeEnv()
    records: list[Record] = []
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), record=records.append)
        assert isinstance(agent, Agent) and agent.name == "react:t"
        await run_agent(agent, env.session_for())
        bodies = agent_requests(server)

    assert env.calls == [
        ("read_mailbox", {}),
        *[("execute_sql", {"sql": sql}) for sql in SCRIPTED_SQL],
        ("update_task", {"id": "T-1", "status": "resolved", "note": "index built"}),
        ("submit_report", REPORT),
    ]
    assert env.reports == [REPORT]
    assert server.remaining == 0 and len(bodies) == 6  # stopped right after the report
    assert agent.turns == 6 and agent.reports == 1

    system = bodies[0]["messages"][0]
    assert system["role"] == "system"
    for needle in (TASK, "lock_timeout", "CONCURRENTLY", "submit_report", "Protected sessions"):
        assert needle in system["content"]
    assert all(tool_names(b) == ALL_TOOLS for b in bodies)
    # Each observation goes back as a tool message paired with its call.
    last = bodies[-1]["messages"]
    assert_pairing(last)
    tool_msgs = [m for m in last if m["role"] == "tool"]
    assert tool_msgs[1]["content"] == f"OK: {SCRIPTED_SQL[0]}"
    assert [m["content"] for m in last if m["role"] == "assistant"][1] == "Look at sessions first."
    calls = [r for r in records if isinstance(r, CallRecord)]
    assert [c.seq for c in calls] == [1, 2, 3, 4, 5, 6]
    assert all(c.t_scn is not None and c.ok for c in calls)


@pytest.mark.anyio
async def test_bad_calls_are_observations_and_text_replies_are_nudged() -> None:
    script = [
        step(call("drop_everything", {})),
        step(call("execute_sql", "{not json")),
        ScriptedResponse.text("I think I am done."),
        step(call("submit_report", {"root_cause": "x"})),  # invalid: no summary
        step(call("submit_report", REPORT)),
    ]
    env = FakeEnv()
    records: list[Record] = []
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), record=records.append)
        await run_agent(agent, env.session_for())
        last = server.chat_requests[-1].body["messages"]
    assert env.tool_names == ["submit_report", "submit_report"]
    assert env.reports == [REPORT]
    tool_texts = [m["content"] for m in last if m["role"] == "tool"]
    assert "no tool named 'drop_everything'" in tool_texts[0]
    assert "not a valid JSON object" in tool_texts[1]
    assert tool_texts[2].startswith("ERROR: summary is required")
    # the two calls the harness could not run are recorded with what the model was told
    rejected = [r for r in records if isinstance(r, ToolCallRecord)]
    assert [(r.tool, r.detail["raw_arguments"], r.error, r.status) for r in rejected] == [
        ("drop_everything", "{}", "unknown_tool", "rejected"),
        ("execute_sql", "{not json", "malformed_arguments", "rejected"),
    ]
    assert [r.observation for r in rejected] == tool_texts[:2]
    assert any(m["role"] == "user" and m["content"] == P.NUDGE_BOUNDED for m in last)
    assert_pairing(last)


@pytest.mark.anyio
async def test_budget_then_one_final_round_with_only_submit_report() -> None:
    script = [step(call("execute_sql", {"sql": f"SELECT {i}"})) for i in range(3)] + [
        step(call("execute_sql", {"sql": "SELECT 99"}), call("submit_report", REPORT))
    ]
    env = FakeEnv()
    records: list[Record] = []
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), turn_budget=3, record=records.append)
        await run_agent(agent, env.session_for())
        bodies = [r.body for r in server.chat_requests]
    assert len(bodies) == 4 and server.remaining == 0
    assert all(tool_names(b) == ALL_TOOLS for b in bodies[:3])
    assert tool_names(bodies[3]) == ["submit_report"]
    assert bodies[3]["messages"][-1] == {"role": "user", "content": P.FINAL_ROUND}
    # The environment call in the final round is not executed; the report is.
    assert env.tool_names == ["execute_sql"] * 3 + ["submit_report"]
    assert env.reports == [REPORT]
    assert agent.turns == 3 and agent.final_round_done
    events = [r.event for r in records if isinstance(r, AgentEventRecord)]
    assert events == ["budget_exhausted"]


@pytest.mark.anyio
async def test_final_round_text_answer_becomes_the_report() -> None:
    script = [
        step(call("execute_sql", {"sql": "SELECT 1"})),
        ScriptedResponse.text("Root cause: a missing index. I could not verify the fix."),
    ]
    env = FakeEnv()
    records: list[Record] = []
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), turn_budget=1, record=records.append)
        await run_agent(agent, env.session_for())
        assert len(server.chat_requests) == 2
    assert env.reports == [{"summary": "Root cause: a missing index. I could not verify the fix."}]
    events = [(r.event, r.detail) for r in records if isinstance(r, AgentEventRecord)]
    assert events == [("budget_exhausted", {"turn_budget": 1}), ("fallback_report", {"ok": True})]


@pytest.mark.anyio
async def test_text_mode_model_and_reasoning_echo() -> None:
    block = '<tool_call>\n{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}\n</tool_call>'
    script = [
        ScriptedResponse.text(f"Checking.\n{block}", reasoning_content="think"),
        ScriptedResponse.text(
            '<tool_call>{"name": "submit_report", "arguments": {"summary": "done"}}</tool_call>'
        ),
    ]
    env = FakeEnv()
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url, supports_tools=False))
        await run_agent(agent, env.session_for())
        bodies = [r.body for r in server.chat_requests]
    assert env.calls == [
        ("execute_sql", {"sql": "SELECT 1"}),
        ("submit_report", {"summary": "done"}),
    ]
    assert all("tools" not in b for b in bodies)  # the catalog is in the system prompt
    assert "execute_sql" in bodies[0]["messages"][0]["content"]
    assert '<tool_response name="execute_sql"' in bodies[1]["messages"][-1]["content"]

    native = [
        step(call("execute_sql", {"sql": "SELECT 1"}), reasoning_content="deliberate"),
        step(call("submit_report", REPORT)),
    ]
    with OpenAITestServer(native) as server:
        echoing = spec_for(server.base_url, echo_reasoning=True)
        await run_agent(ReactAgent(echoing), FakeEnv().session_for())
        assistant = server.chat_requests[1].body["messages"][2]
    assert assistant["role"] == "assistant" and assistant["reasoning_content"] == "deliberate"
    # a per-model setting: by default no server is sent a field it may reject
    with OpenAITestServer(native) as server:
        await run_agent(ReactAgent(spec_for(server.base_url)), FakeEnv().session_for())
        assistant = server.chat_requests[1].body["messages"][2]
    assert assistant["role"] == "assistant" and "reasoning_content" not in assistant


@pytest.mark.anyio
async def test_context_overflow_error_compacts_and_retries() -> None:
    state = {"agent_calls": 0, "overflowed": False}

    def script(body: dict[str, Any]) -> ScriptedResponse:
        if body["messages"][0]["content"] == P.SUMMARY_SYSTEM:
            return ScriptedResponse.text("SUMMARY: ran six queries.")
        state["agent_calls"] += 1
        n = state["agent_calls"]
        if n <= 6:
            return step(call("execute_sql", {"sql": f"SELECT {n}"}))
        if not state["overflowed"]:
            state["overflowed"] = True
            return ScriptedResponse.error(400, "This model's maximum context length is 8192")
        return step(call("submit_report", REPORT))

    env = FakeEnv()
    records: list[Record] = []
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), record=records.append)
        await run_agent(agent, env.session_for())
        last = server.chat_requests[-1].body["messages"]
    assert env.reports == [REPORT] and agent.turns == 7
    (rec,) = [r for r in records if isinstance(r, CompactionRecord)]
    assert rec.reason == "context_overflow" and rec.summarised_rounds == [2, 4]
    assert any("SUMMARY: ran six queries." in str(m["content"]) for m in last)
    assert_pairing(last)


# -- compaction -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_compaction_keeps_first_two_and_last_two_rounds() -> None:
    n_turns = 16
    state = {"agent_calls": 0}

    def script(body: dict[str, Any]) -> ScriptedResponse:
        if body["messages"][0]["content"] == P.SUMMARY_SYSTEM:
            return ScriptedResponse.text(f"SUMMARY-{state['agent_calls']}: found seq scans.")
        state["agent_calls"] += 1
        n = state["agent_calls"]
        if n < n_turns:
            return step(call("execute_sql", {"sql": f"SELECT {n}"}, call_id=f"c{n}"))
        return step(call("submit_report", REPORT, call_id=f"c{n}"))

    env = FakeEnv(sql_obs=lambda sql: f"{sql} -> " + "x" * 1500)
    records: list[Record] = []
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), context_tokens=6000, record=records.append)
        await run_agent(agent, env.session_for())
        bodies = [r.body for r in server.chat_requests]

    assert env.reports == [REPORT] and agent.turns == n_turns
    compactions = [r for r in records if isinstance(r, CompactionRecord)]
    assert len(compactions) >= 2 and agent.compactions == len(compactions)
    first_i = next(
        i for i, b in enumerate(bodies) if b["messages"][0]["content"] == P.SUMMARY_SYSTEM
    )
    summary_req, after = bodies[first_i], bodies[first_i + 1]
    assert "tools" not in summary_req
    k = sum(1 for b in bodies[:first_i] if b["messages"][0]["content"] != P.SUMMARY_SYSTEM)
    assert k - 4 >= 3  # several middle rounds were summarised at once

    def ids(msgs: list[dict[str, Any]]) -> list[str]:
        return [tc["id"] for m in msgs if m["role"] == "assistant" for tc in m["tool_calls"]]

    # Kept: system, kickoff, rounds 1-2, the summary, rounds k-1 and k; the middle is gone.
    msgs = after["messages"]
    assert msgs[0] == bodies[0]["messages"][0] and msgs[1] == bodies[0]["messages"][1]
    assert ids(msgs) == ["c1", "c2", f"c{k - 1}", f"c{k}"]
    summary_msg = msgs[6]
    assert (
        summary_msg["role"] == "user"
        and f"SUMMARY-{k}: found seq scans." in (summary_msg["content"])
    )
    assert [m["role"] for m in msgs[2:6]] == ["assistant", "tool", "assistant", "tool"]
    # The summariser saw exactly the middle rounds.
    transcript = summary_req["messages"][1]["content"]
    for i in range(3, k - 1):
        assert f"[tool call c{i}] execute_sql" in transcript
    for i in (1, 2, k - 1, k):
        assert f"[tool call c{i}]" not in transcript
    rec = compactions[0]
    assert rec.summarised_rounds == [2, k - 2] and rec.summary.startswith(f"SUMMARY-{k}")
    assert rec.est_tokens_after < rec.est_tokens_before
    assert rec.est_tokens_before > rec.threshold_tokens == 4500
    # Every request stays well formed; later ones keep rounds 1-2 and carry a summary.
    for b in bodies:
        assert_pairing(b["messages"])
    for b in agent_requests(server)[k:]:
        assert ids(b["messages"])[:2] == ["c1", "c2"]
        assert any("SUMMARY-" in str(m.get("content")) for m in b["messages"])
    # A later compaction folds the earlier summary in and moves the summarised span on.
    later = [b for b in bodies if b["messages"][0]["content"] == P.SUMMARY_SYSTEM][1]
    assert f"SUMMARY-{k}" in later["messages"][1]["content"]
    assert compactions[1].summarised_rounds[0] == k - 2


@pytest.mark.anyio
async def test_one_huge_reply_does_not_make_compaction_thrash() -> None:
    """A 20,000-character reply in a round that compaction keeps: it is clipped once, and the
    turns after it make no summary call that would save almost nothing."""
    state = {"agent_calls": 0}

    def script(body: dict[str, Any]) -> ScriptedResponse:
        if body["messages"][0]["content"] == P.SUMMARY_SYSTEM:
            return ScriptedResponse.text("SUMMARY: looked around.")
        state["agent_calls"] += 1
        n = state["agent_calls"]
        if n == 4:
            return step(call("execute_sql", {"sql": "SELECT 4"}), content="y" * 20_000)
        if n < 9:
            return step(call("execute_sql", {"sql": f"SELECT {n}"}))
        return step(call("submit_report", REPORT))

    records: list[Record] = []
    env = FakeEnv(sql_obs=lambda sql: f"{sql} -> " + "x" * 300)
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), context_tokens=6000, record=records.append)
        await run_agent(agent, env.session_for())
        bodies = [r.body for r in server.chat_requests]
    assert env.reports == [REPORT]
    summaries = [b for b in bodies if b["messages"][0]["content"] == P.SUMMARY_SYSTEM]
    assert len(summaries) <= 1
    events = [r for r in records if isinstance(r, AgentEventRecord)]
    (clip,) = [e for e in events if e.event == "clipped_oversized"]
    assert clip.detail["messages"] == 1 and clip.detail["chars_removed"] > 10_000
    # every later request carries the clipped reply, not the 20,000 characters
    assert all(_chars(b["messages"]) < 20_000 for b in bodies[4:])


# -- persistent -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_persistent_suspend_and_wake_continue_one_conversation() -> None:
    wake = "[A-1] alert at t=120s: lock waits on shop.orders"
    script = [
        step(call("read_mailbox", {})),
        ScriptedResponse.text("Nothing needs work right now."),  # -> the agent suspends
        step(call("execute_sql", {"sql": "SELECT * FROM pg_locks WHERE NOT granted"})),
        step(call("submit_report", {**REPORT, "task_id": "A-1"})),
        step(call("suspend", {})),  # -> scenario ended
    ]
    env = FakeEnv(wakeups=[wake])
    records: list[Record] = []
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), record=records.append)
        session = env.session_for("persistent", task=None)
        await run_agent(agent, session)
        bodies = [r.body for r in server.chat_requests]

    assert session.ended.is_set() and server.remaining == 0
    assert env.tool_names == [
        "read_mailbox",
        "suspend",
        "execute_sql",
        "submit_report",
        "suspend",
    ]
    assert agent.reports == 1  # a persistent report does not end the session
    system = bodies[0]["messages"][0]
    assert "suspend" in system["content"] and "mailbox" in system["content"]
    for prev, nxt in zip(bodies, bodies[1:], strict=False):
        assert nxt["messages"][0] == system
        assert len(nxt["messages"]) > len(prev["messages"])
        assert nxt["messages"][: len(prev["messages"])] == prev["messages"]
    woke = bodies[2]["messages"][-1]
    assert woke["role"] == "user" and wake in woke["content"]
    assert woke["content"] == P.SELF_SUSPEND.format(observation="New in the mailbox:\n\n" + wake)
    events = [r.event for r in records if isinstance(r, AgentEventRecord)]
    assert events == ["self_suspend"]


@pytest.mark.anyio
async def test_persistent_final_round_then_waits_for_the_end() -> None:
    script = [
        step(call("execute_sql", {"sql": "SELECT 1"})),
        step(call("submit_report", REPORT)),
    ]
    env = FakeEnv()
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), turn_budget=1)
        session = env.session_for("persistent")
        finished: list[bool] = []

        async def run() -> None:
            await run_agent(agent, session)
            finished.append(session.ended.is_set())

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(10):
                await env.reported.wait()
            await anyio.sleep(0.2)
            assert not finished  # still waiting for the scenario to end
            env.ended.set()
        assert finished == [True]
        assert tool_names(server.chat_requests[-1].body) == ["submit_report"]
    assert env.reports == [REPORT] and agent.final_round_done


# -- endpoint failures, accounting and secrets ------------------------------------------------


@pytest.mark.anyio
async def test_rate_limit_is_retried_by_the_client() -> None:
    script = [
        ScriptedResponse.error(429, "slow down", headers={"Retry-After": "0"}),
        step(call("submit_report", REPORT)),
    ]
    env = FakeEnv()
    records: list[Record] = []
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), retry=FAST, record=records.append)
        await run_agent(agent, env.session_for())
        assert len(server.chat_requests) == 2
    assert env.reports == [REPORT]
    (rec,) = [r for r in records if isinstance(r, CallRecord)]
    assert rec.retries == 1 and [a.status_code for a in rec.attempts] == [429, 200]


@pytest.mark.anyio
async def test_dead_endpoint_raises_infra_error_out_of_run() -> None:
    env = FakeEnv()
    records: list[Record] = []
    agent = ReactAgent(
        spec_for(dead_base_url()),
        retry=RetryPolicy(max_attempts=2, base_delay_s=0.01, max_total_s=5),
        record=records.append,
    )
    with pytest.raises(InfraError):
        await run_agent(agent, env.session_for())
    assert env.calls == []
    (rec,) = [r for r in records if isinstance(r, CallRecord)]
    assert rec.error is not None and rec.error.type == "infra_error"


@pytest.mark.anyio
async def test_cost_from_usage_matches_price_table() -> None:
    usage = {"prompt_tokens": 10_000, "cached_tokens": 4_000, "completion_tokens": 2_000}
    script = [
        step(call("execute_sql", {"sql": "SELECT 1"}), **usage, reasoning_tokens=500),
        step(call("submit_report", REPORT), **usage),
    ]
    env = FakeEnv()
    records: list[Record] = []
    with OpenAITestServer(script) as server:
        agent = ReactAgent(spec_for(server.base_url), record=records.append)
        await run_agent(agent, env.session_for())
    # per call: (6000 * 2.0 + 4000 * 0.5 + 2000 * 8.0) / 1e6 = 0.03 USD
    assert agent.cost_usd == pytest.approx(0.06)
    assert sum(r.cost_usd or 0 for r in records if isinstance(r, CallRecord)) == pytest.approx(0.06)
    u = agent.usage
    assert (u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens) == (
        20_000,
        8_000,
        4_000,
        500,
    )
    progress = agent.progress()
    assert progress["turns"] == 2 and progress["model_calls"] == 2
    assert progress["cost_usd"] == pytest.approx(0.06)


@pytest.mark.anyio
async def test_api_key_never_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-DO-NOT-LEAK-4242"
    monkeypatch.setenv("DBAOPS_REACT_TEST_KEY", secret)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    writer = TraceWriter(run_dir / "trace.jsonl")
    script = [
        step(call("execute_sql", {"sql": f"SELECT '{secret[:7]}'"})),
        ScriptedResponse.error(500, f"upstream echoed Bearer {secret}"),
        step(call("submit_report", REPORT)),
    ]
    env = FakeEnv()
    with OpenAITestServer(script) as server:
        spec = spec_for(server.base_url, api_key_env="DBAOPS_REACT_TEST_KEY")
        agent = ReactAgent(
            spec, record=writer.write, blob_dir=run_dir / "model_messages", retry=FAST
        )
        await run_agent(agent, env.session_for())
        assert {r.headers["authorization"] for r in server.chat_requests} == {f"Bearer {secret}"}
    writer.close()
    assert env.reports == [REPORT]
    blobs = sorted((run_dir / "model_messages").glob("*.json.gz"))
    assert len(blobs) == 2
    trace = (run_dir / "trace.jsonl").read_text()
    assert "model_messages/" in trace  # messages_ref points at the side files
    assert "[REDACTED]" in trace  # the echoed key was scrubbed from the error
    texts = [trace] + [gzip.decompress(p.read_bytes()).decode() for p in blobs]
    for path in run_dir.rglob("*"):
        if path.is_file():
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    assert all(secret not in t for t in texts)


# -- replay -----------------------------------------------------------------------------------


def _replay_script() -> list[ScriptedResponse]:
    return [
        step(call("read_mailbox", {})),
        step(call("execute_sql", {"sql": SCRIPTED_SQL[0]}), content="Sessions first."),
        step(call("execute_sql", {"sql": SCRIPTED_SQL[2]})),
        step(call("execute_sql", {"sql": SCRIPTED_SQL[3]})),
        step(call("submit_report", REPORT)),
    ]


async def _record_run(run_dir: Path) -> tuple[ModelSpec, FakeEnv, list[Record]]:
    await anyio.Path(run_dir).mkdir(parents=True)
    writer = TraceWriter(run_dir / "trace.jsonl")
    env = FakeEnv()
    records: list[Record] = []

    def record(rec: Record) -> None:
        records.append(rec)
        writer.write(rec)

    with OpenAITestServer(_replay_script()) as server:
        spec = spec_for(server.base_url)
        agent = ReactAgent(spec, record=record, blob_dir=run_dir / "model_messages")
        await run_agent(agent, env.session_for())
    writer.close()
    return spec, env, records


@pytest.mark.anyio
async def test_replay_reproduces_the_recorded_actions(tmp_path: Path) -> None:
    spec, live, live_records = await _record_run(tmp_path / "run")
    assert len(live.calls) == 5

    replayed: list[Record] = []
    client = ReplayModelClient(tmp_path / "run", spec=spec)
    env = FakeEnv()
    agent = ReactAgent(spec, client=client, record=replayed.append)
    await run_agent(agent, env.session_for())
    assert env.calls == live.calls and env.reports == [REPORT]
    assert client.divergences == [] and client.remaining == 0
    live_calls = [r for r in live_records if isinstance(r, CallRecord)]
    new_calls = [r for r in replayed if isinstance(r, CallRecord)]
    assert [r.request_sha256 for r in new_calls] == [r.request_sha256 for r in live_calls]
    assert [getattr(r, "replay_of_seq", None) for r in new_calls] == [1, 2, 3, 4, 5]
    # a replay costs nothing; what the recorded calls cost is kept beside
    assert agent.cost_usd == 0.0 and all(r.usage.input_tokens == 0 for r in new_calls)
    recorded = [getattr(r, "recorded_cost_usd", None) for r in new_calls]
    assert recorded == [r.cost_usd for r in live_calls]

    # No spec given: matching by messages hash alone, spec rebuilt from the records.
    env2 = FakeEnv()
    client2 = ReplayModelClient(tmp_path / "run")
    await run_agent(ReactAgent("t", client=client2), env2.session_for())
    assert env2.calls == live.calls and client2.divergences == []


@pytest.mark.anyio
async def test_replay_reports_divergence_when_an_observation_differs(tmp_path: Path) -> None:
    spec, live, _ = await _record_run(tmp_path / "run")

    def changed(sql: str) -> str:
        return "ERROR: relation shop.orders is locked" if "CREATE INDEX" in sql else f"OK: {sql}"

    env = FakeEnv(sql_obs=changed)
    records: list[Record] = []
    client = ReplayModelClient(tmp_path / "run", spec=spec)
    await run_agent(ReactAgent(spec, client=client, record=records.append), env.session_for())
    assert env.calls == live.calls  # the recorded actions are still replayed
    assert [d.position for d in client.divergences] == [4, 5]  # every call after the change
    first = client.divergences[0]
    assert first.expected_messages_sha256 != first.actual_messages_sha256
    assert first.expected_request_sha256 != first.actual_request_sha256
    # messages: system, kickoff, then (assistant, tool) x 3 -> the 3rd tool result is index 7
    assert first.first_differing_message == 7
    notes = [r for r in records if isinstance(r, ReplayDivergence)]
    assert notes == client.divergences
    assert json.loads(notes[0].model_dump_json())["kind"] == "replay_divergence"


@pytest.mark.anyio
async def test_replay_runs_out_with_a_clear_error(tmp_path: Path) -> None:
    _, _, records = await _record_run(tmp_path / "run")
    calls = [r for r in records if isinstance(r, CallRecord)][:2]
    client = ReplayModelClient(records=calls)
    env = FakeEnv()
    with pytest.raises(ReplayExhausted, match="2 model call"):
        await run_agent(ReactAgent("t", client=client), env.session_for())
    assert env.tool_names == ["read_mailbox", "execute_sql"]
