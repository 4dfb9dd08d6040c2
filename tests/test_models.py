"""The model layer over real HTTP against the local scripted OpenAI-compatible server."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from dbaops.models import (
    CostMeter,
    InfraError,
    ModelClient,
    ModelConfigError,
    ModelRequestError,
    ModelSpec,
    Prices,
    RetryPolicy,
    UnknownModelError,
    canonical_json,
    cost_usd,
    load_registry,
)
from dbaops.models.text_tools import parse_text_tool_calls
from dbaops.record.kinds import CallRecord, Usage
from dbaops.testing import OpenAITestServer, ScriptedResponse, dead_base_url
from dbaops.tools.base import ToolSpec


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_user_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the developer's own ~/.config/dbaops/models.toml and $DBAOPS_MODELS out."""
    monkeypatch.delenv("DBAOPS_MODELS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05, max_total_s=10.0)
PRICES = Prices(input=2.0, cached_input=0.5, output=8.0)
SQL_TOOL = {
    "type": "function",
    "function": {
        "name": "run_sql",
        "description": "Run one SQL statement.",
        "parameters": {
            "type": "object",
            "properties": {"sql": {"type": "string"}},
            "required": ["sql"],
        },
    },
}
USER = [
    {"role": "system", "content": "You are a DBA."},
    {"role": "user", "content": "Queries are slow."},
]


def spec_for(base_url: str, **kw: Any) -> ModelSpec:
    return ModelSpec(
        name=kw.pop("name", "t"),
        base_url=base_url,
        model=kw.pop("model", "test-model"),
        prices=kw.pop("prices", PRICES),
        **kw,
    )


# -- registry ---------------------------------------------------------------------------------


def test_registry_defaults() -> None:
    reg = load_registry()
    assert reg.sources == ["<dbaops.models/default_models.toml>"]
    for name in ("glm", "gpt", "opus", "deepseek", "qwen", "local"):
        assert name in reg.names()
    local = reg.get("local")
    assert local.base_url == "http://127.0.0.1:8000/v1"
    assert local.api_key_env is None
    assert local.resolve_api_key({}) is None
    assert reg.roles["judge"] == "qwen-judge"
    assert reg.get("judge") == reg.role("judge") == reg.get("qwen-judge")
    gpt = reg.get("gpt")
    assert gpt.api_key_env == "OPENAI_API_KEY"
    assert gpt.prices is not None and gpt.prices.output > 0
    assert gpt.supports_tools is True
    assert reg.get("glm").extra_body == {"thinking": {"type": "enabled"}}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


USER_TOML = """
[roles]
judge = "mine"

[models.gpt]
base_url = "https://gateway.example/v1"
[models.gpt.prices]
output = 99.0

[models.mine]
base_url = "http://127.0.0.1:9999/v1"
model = "my-model"
supports_tools = false
reasoning_effort = "low"
"""


def test_registry_user_override_explicit_env_and_default_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    defaults = load_registry().get("gpt")
    user = _write(tmp_path / "models.toml", USER_TOML)

    reg = load_registry(user)
    gpt = reg.get("gpt")
    assert gpt.base_url == "https://gateway.example/v1"
    assert gpt.model == defaults.model  # untouched fields keep the shipped values
    assert gpt.prices is not None and defaults.prices is not None
    assert gpt.prices.output == 99.0
    assert gpt.prices.input == defaults.prices.input
    mine = reg.get("mine")
    assert (mine.model, mine.supports_tools, mine.reasoning_effort) == ("my-model", False, "low")
    assert reg.get("judge") is mine
    assert "glm" in reg.names()
    assert reg.sources[-1] == str(user)

    monkeypatch.setenv("DBAOPS_MODELS", str(user))
    assert load_registry().get("mine").model == "my-model"
    monkeypatch.delenv("DBAOPS_MODELS")

    assert "mine" not in load_registry()
    _write(tmp_path / "xdg" / "dbaops" / "models.toml", USER_TOML)
    assert load_registry().get("mine").model == "my-model"
    assert "mine" not in load_registry(use_user_file=False)


def test_unknown_model_lists_known_names() -> None:
    reg = load_registry()
    with pytest.raises(UnknownModelError) as ei:
        reg.get("gtp")
    msg = str(ei.value)
    assert "'gtp'" in msg
    for name in ("deepseek", "glm", "gpt", "local", "opus", "qwen", "judge (role)"):
        assert name in msg
    assert isinstance(ei.value, ModelConfigError)
    with pytest.raises(ModelConfigError, match="unknown role 'critic'"):
        reg.role("critic")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[models.gpt\nbase_url = 1\n", "invalid TOML"),
        ('[models.gpt]\ncontext_window = "big"\n', "models.gpt.context_window"),
        ("[models.gpt]\ntemprature = 0.2\n", "models.gpt.temprature"),
        ('[models.newm]\nmodel = "x"\n', "models.newm.base_url"),
        ('[models.newm]\nbase_url = "ftp://x"\nmodel = "x"\n', "models.newm.base_url"),
        ("[models.gpt.prices]\ninput = -1\n", "models.gpt.prices.input"),
        ('[roles]\njudge = "nobody"\n', "roles.judge"),
        ('[model.gpt]\nmodel = "x"\n', "unknown top-level key"),
    ],
)
def test_malformed_user_file_names_file_and_field(tmp_path: Path, text: str, expected: str) -> None:
    bad = _write(tmp_path / "bad-models.toml", text)
    with pytest.raises(ModelConfigError) as ei:
        load_registry(bad)
    msg = str(ei.value)
    assert str(bad) in msg
    assert expected in msg


def test_missing_explicit_file_and_missing_key(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="not found"):
        load_registry(tmp_path / "nope.toml")
    spec = load_registry().get("gpt")
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY"):
        spec.resolve_api_key({})


# -- accounting -------------------------------------------------------------------------------


def test_cost_matches_hand_computed_table() -> None:
    u = Usage(input_tokens=10_000, cached_input_tokens=4_000, output_tokens=2_000)
    # 6000*2.0 + 4000*0.5 + 2000*8.0 = 12000 + 2000 + 16000 = 30000 per 1e6 -> 0.03 USD
    assert cost_usd(u, PRICES) == pytest.approx(0.03)
    # cached_input unset: cached tokens cost the input price
    assert cost_usd(u, Prices(input=1.0, output=3.0)) == pytest.approx((10_000 + 6_000) / 1e6)
    assert cost_usd(u, None) is None
    # cached tokens are never counted above the input tokens
    odd = Usage(input_tokens=10, cached_input_tokens=50, output_tokens=0)
    assert cost_usd(odd, PRICES) == pytest.approx(10 * 0.5 / 1e6)


def test_usage_from_provider_variants() -> None:
    openai_style = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 30},
    }
    assert Usage.from_provider(openai_style) == Usage(
        input_tokens=100, cached_input_tokens=64, output_tokens=40, reasoning_tokens=30
    )
    deepseek_style = {"prompt_tokens": 100, "completion_tokens": 7, "prompt_cache_hit_tokens": 80}
    assert Usage.from_provider(deepseek_style).cached_input_tokens == 80
    assert Usage.from_provider(None) == Usage()


# -- client over HTTP -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_tool_call_parses_into_completion() -> None:
    script = [ScriptedResponse.tool_call("run_sql", {"sql": "SELECT 1"}, content="Checking.")]
    with OpenAITestServer(script) as server:
        async with ModelClient(spec_for(server.base_url, reasoning_effort="high")) as client:
            comp = await client.complete(USER, [SQL_TOOL], tool_choice="auto")
        req = server.chat_requests[0].body

    assert comp.content == "Checking."
    assert comp.finish_reason == "tool_calls"
    assert len(comp.tool_calls) == 1
    tc = comp.tool_calls[0]
    assert (tc.name, tc.arguments, tc.parse_error) == ("run_sql", {"sql": "SELECT 1"}, None)
    assert json.loads(tc.raw_arguments) == {"sql": "SELECT 1"}
    assert tc.id == "call_1_0"
    assert comp.retries == 0 and comp.latency_ms > 0 and comp.tool_mode == "native"
    # the request body on the wire, and its hash
    assert req["model"] == "test-model"
    assert req["messages"] == USER
    assert req["tools"] == [SQL_TOOL]
    assert req["tool_choice"] == "auto"
    assert req["reasoning_effort"] == "high"
    assert comp.request_hash == hashlib.sha256(canonical_json(req)).hexdigest()
    # the assistant turn is ready to append to the history
    msg = comp.assistant_message()
    assert msg["tool_calls"][0]["function"] == {"name": "run_sql", "arguments": tc.raw_arguments}


@pytest.mark.anyio
async def test_tool_spec_objects_extra_body_and_bad_arguments() -> None:
    spec = ToolSpec(name="explain", description="EXPLAIN a query", parameters={"type": "object"})
    script = [ScriptedResponse.tool_call("explain", "{not json")]
    with OpenAITestServer(script) as server:
        model = spec_for(server.base_url, extra_body={"thinking": {"type": "enabled"}})
        async with ModelClient(model) as client:
            comp = await client.complete(USER, [spec], extra_body={"max_tokens": 64})
        req = server.chat_requests[0].body
    assert req["tools"][0]["function"]["name"] == "explain"
    assert req["thinking"] == {"type": "enabled"} and req["max_tokens"] == 64
    assert "tool_choice" not in req
    tc = comp.tool_calls[0]
    assert tc.name == "explain" and tc.raw_arguments == "{not json"
    assert tc.arguments == {} and tc.parse_error


@pytest.mark.anyio
async def test_usage_cached_reasoning_and_cost_recorded() -> None:
    script = [
        ScriptedResponse.text(
            "one",
            prompt_tokens=10_000,
            completion_tokens=2_000,
            cached_tokens=4_000,
            reasoning_tokens=1_500,
            reasoning_content="thinking...",
        ),
        ScriptedResponse.text("two", prompt_tokens=1_000, completion_tokens=100),
    ]
    records: list[CallRecord] = []
    meter = CostMeter()
    with OpenAITestServer(script) as server:
        client = ModelClient(spec_for(server.base_url), meter=meter, on_record=records.append)
        c1 = await client.complete(USER)
        c2 = await client.complete(USER)
        await client.aclose()

    assert c1.usage == Usage(
        input_tokens=10_000, cached_input_tokens=4_000, output_tokens=2_000, reasoning_tokens=1_500
    )
    assert c1.reasoning_content == "thinking..."
    assert c1.cost_usd == pytest.approx(0.03)
    assert c2.cost_usd == pytest.approx((1_000 * 2.0 + 100 * 8.0) / 1e6)
    assert [r.usage for r in records] == [c1.usage, c2.usage]
    assert [r.seq for r in records] == [1, 2]
    assert records[0].response is not None and records[0].response.content == "one"
    assert meter.total.calls == 2 and meter.total.failed_calls == 0
    assert meter.efficiency() == (11_000, 4_000, 2_100, pytest.approx(0.03 + 0.0028))
    assert meter.by_model["t"].usage.reasoning_tokens == 1_500
    # records survive a JSON round trip (what the trace stores)
    again = CallRecord.model_validate_json(records[0].model_dump_json())
    assert again == records[0] and again.kind == "model_call"


@pytest.mark.anyio
async def test_unpriced_model_cost_is_na() -> None:
    with OpenAITestServer([ScriptedResponse.text("x")]) as server:
        async with ModelClient(spec_for(server.base_url, prices=None)) as client:
            comp = await client.complete(USER)
    assert comp.cost_usd is None
    assert client.meter.cost_usd is None and client.meter.total.unpriced_calls == 1


@pytest.mark.anyio
async def test_429_then_success_is_retried() -> None:
    script = [
        ScriptedResponse.error(429, "slow down", headers={"Retry-After": "0"}),
        ScriptedResponse.text("ok"),
    ]
    with OpenAITestServer(script) as server:
        async with ModelClient(spec_for(server.base_url), retry=FAST) as client:
            comp = await client.complete(USER)
        seen = server.chat_requests
    assert comp.content == "ok"
    assert comp.retries == 1
    assert len(seen) == 2
    assert seen[0].body == seen[1].body
    assert [h.headers["x-stainless-retry-count"] for h in seen] == ["0", "0"]  # no SDK retries
    record = client.meter.total
    assert record.calls == 1 and record.retries == 1


@pytest.mark.anyio
async def test_5xx_and_timeout_are_retried() -> None:
    script = [
        ScriptedResponse.error(503),
        ScriptedResponse.text("late", delay_s=2.0),  # longer than the client timeout
        ScriptedResponse.text("ok"),
    ]
    records: list[CallRecord] = []
    with OpenAITestServer(script) as server:
        spec = spec_for(server.base_url)
        async with ModelClient(spec, retry=FAST, timeout_s=0.3, on_record=records.append) as c:
            comp = await c.complete(USER)
        assert len(server.chat_requests) == 3
    assert comp.content == "ok" and comp.retries == 2
    attempts = records[0].attempts
    assert [a.outcome for a in attempts] == ["retryable", "retryable", "ok"]
    assert attempts[0].status_code == 503
    assert attempts[1].error == "request timed out"
    assert comp.elapsed_ms >= 300


@pytest.mark.anyio
async def test_dead_endpoint_raises_infra_error_after_bounded_retries() -> None:
    records: list[CallRecord] = []
    retry = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.02)
    client = ModelClient(spec_for(dead_base_url()), retry=retry, on_record=records.append)
    with pytest.raises(InfraError) as ei:
        await client.complete(USER)
    await client.aclose()
    err = ei.value
    assert err.attempts == 3
    assert "connection error" in str(err)
    assert not isinstance(err, ModelRequestError)
    assert err.record is records[0]
    assert records[0].error is not None and records[0].error.type == "infra_error"
    assert records[0].retries == 2 and records[0].usage == Usage()
    assert client.meter.total.failed_calls == 1

    # the total-time bound stops retrying long before max_attempts
    slow = RetryPolicy(max_attempts=1000, base_delay_s=0.05, max_delay_s=0.05, max_total_s=0.3)
    async with ModelClient(spec_for(dead_base_url()), retry=slow) as client2:
        with pytest.raises(InfraError, match="time budget") as ei2:
            await client2.complete(USER)
    assert 1 < ei2.value.attempts < 1000  # the budget ended it, not max_attempts


@pytest.mark.anyio
async def test_exhausted_retries_on_persistent_500_is_infra_error() -> None:
    with OpenAITestServer([ScriptedResponse.error(500)] * 3) as server:
        retry = RetryPolicy(max_attempts=3, base_delay_s=0.0)
        async with ModelClient(spec_for(server.base_url), retry=retry) as client:
            with pytest.raises(InfraError) as ei:
                await client.complete(USER)
        assert len(server.chat_requests) == 3
    assert ei.value.status_code == 500 and ei.value.attempts == 3


@pytest.mark.anyio
async def test_400_is_not_retried() -> None:
    script = [ScriptedResponse.error(400, "context length exceeded"), ScriptedResponse.text("x")]
    with OpenAITestServer(script) as server:
        async with ModelClient(spec_for(server.base_url), retry=FAST) as client:
            with pytest.raises(ModelRequestError) as ei:
                await client.complete(USER)
        assert len(server.chat_requests) == 1
        assert server.remaining == 1
    err = ei.value
    assert not isinstance(err, InfraError)
    assert err.status_code == 400 and err.attempts == 1
    assert "context length exceeded" in str(err)
    assert err.record is not None and err.record.error is not None
    assert err.record.error.type == "request_error" and err.record.retries == 0


@pytest.mark.anyio
async def test_text_mode_fallback_parses_tool_call() -> None:
    reply = (
        "I will look at the slow queries.\n"
        '<tool_call>\n{"name": "run_sql", "arguments": {"sql": "SELECT 1"}}\n</tool_call>'
    )
    script = [ScriptedResponse.text(reply), ScriptedResponse.text("Done: missing index.")]
    with OpenAITestServer(script) as server:
        spec = spec_for(server.base_url, supports_tools=False)
        async with ModelClient(spec) as client:
            comp = await client.complete(USER, [SQL_TOOL], tool_choice="required")
            history = [
                *USER,
                comp.assistant_message(),
                {"role": "tool", "tool_call_id": comp.tool_calls[0].id, "content": "1 row"},
            ]
            final = await client.complete(history, [SQL_TOOL])
        first, second = (r.body for r in server.chat_requests)

    assert comp.tool_mode == "text"
    assert comp.content == "I will look at the slow queries."
    assert comp.finish_reason == "tool_calls"
    tc = comp.tool_calls[0]
    assert (tc.name, tc.arguments) == ("run_sql", {"sql": "SELECT 1"})
    # the server got no native tool fields; the catalog is in the system prompt
    assert "tools" not in first and "tool_choice" not in first
    system = first["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You are a DBA.")
    assert "run_sql: Run one SQL statement." in system["content"]
    assert "<tool_call>" in system["content"] and "must call at least one tool" in system["content"]
    # the native history was rewritten for the text-only server
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert '"name": "run_sql"' in second["messages"][2]["content"]
    assert second["messages"][3]["content"].startswith('<tool_response name="run_sql"')
    assert "1 row" in second["messages"][3]["content"]
    assert final.content == "Done: missing index." and final.tool_calls == []


def test_text_tool_call_formats() -> None:
    fenced = 'Plan.\n```tool_call\n{"name": "a", "parameters": {"x": 1}}\n```\nThen more.'
    content, calls, errors = parse_text_tool_calls(fenced, "c")
    assert content == "Plan.\n\nThen more." and errors == []
    assert [(c.id, c.name, c.arguments) for c in calls] == [("c0", "a", {"x": 1})]

    bare = '{"name": "b", "arguments": "{\\"y\\": 2}"}'
    assert parse_text_tool_calls(bare, "c")[1][0].arguments == {"y": 2}

    two_and_unclosed = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call> <tool_call>{"name": "b"'
    )
    content, calls, errors = parse_text_tool_calls(two_and_unclosed, "c")
    assert [c.name for c in calls] == ["a"] and len(errors) == 1

    plain_json = 'Result:\n```json\n{"rows": 3}\n```'
    assert parse_text_tool_calls(plain_json, "c") == (plain_json, [], [])
    assert parse_text_tool_calls("just text", "c") == ("just text", [], [])


@pytest.mark.anyio
async def test_api_key_sent_but_never_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-SECRET-0123456789abcdef"
    monkeypatch.setenv("DBAOPS_TEST_KEY", secret)
    stored: dict[str, bytes] = {}

    def sink(sha: str, data: bytes) -> str:
        stored[sha] = data
        return f"blobs/{sha}.json"

    records: list[CallRecord] = []
    script = [
        ScriptedResponse.tool_call("run_sql", {"sql": "SELECT 1"}),
        ScriptedResponse.error(401, f"Incorrect API key provided: {secret}"),
    ]
    with OpenAITestServer(script) as server:
        spec = spec_for(server.base_url, api_key_env="DBAOPS_TEST_KEY")
        async with ModelClient(spec, on_record=records.append, blob_sink=sink) as client:
            comp = await client.complete(USER, [SQL_TOOL])
            with pytest.raises(ModelRequestError) as ei:
                await client.complete(USER, [SQL_TOOL])
            client_repr = repr(client)
        auth = [r.headers.get("authorization") for r in server.chat_requests]

    assert auth == [f"Bearer {secret}", f"Bearer {secret}"]
    assert len(records) == 2 and records[1].error is not None
    assert "Incorrect API key provided: [REDACTED]" in records[1].error.message
    assert records[0].messages_ref == f"blobs/{records[0].messages_sha256}.json"
    assert json.loads(stored[records[0].messages_sha256]) == USER
    dumps = [
        *(r.model_dump_json() for r in records),
        *(json.dumps(r.model_dump(mode="json")) for r in records),
        comp.model_dump_json(),
        client.meter.model_dump_json(),
        spec.model_dump_json(),
        repr(spec),
        client_repr,
        str(ei.value),
        *(blob.decode() for blob in stored.values()),
    ]
    for text in dumps:
        assert secret not in text
    assert "DBAOPS_TEST_KEY" in spec.model_dump_json()  # only the variable's name


@pytest.mark.anyio
async def test_local_entry_sends_placeholder_key_not_openai_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    with OpenAITestServer([ScriptedResponse.text("hi")]) as server:
        local = load_registry().get("local").model_copy(update={"base_url": server.base_url})
        async with ModelClient(local) as client:
            comp = await client.complete([{"role": "user", "content": "hi"}])
        assert server.chat_requests[0].headers["authorization"] == "Bearer EMPTY"
    assert comp.content == "hi" and comp.cost_usd is None


# -- the test server itself -------------------------------------------------------------------


@pytest.mark.anyio
async def test_server_models_callable_script_and_exhaustion() -> None:
    def choose(body: dict[str, Any]) -> ScriptedResponse:
        return ScriptedResponse.text(f"echo {body['messages'][-1]['content']}")

    with OpenAITestServer(choose, models=["m-a", "m-b"]) as server:
        sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        listed = await sdk.models.list()
        assert [m.id for m in listed.data] == ["m-a", "m-b"]
        async with ModelClient(spec_for(server.base_url)) as client:
            comp = await client.complete([{"role": "user", "content": "ping"}])
        assert comp.content == "echo ping"
        assert server.remaining is None and server.served == 1

        server.set_script([ScriptedResponse.text("only one")])
        async with ModelClient(spec_for(server.base_url), retry=FAST) as client:
            assert (await client.complete(USER)).content == "only one"
            with pytest.raises(ModelRequestError, match="script exhausted"):
                await client.complete(USER)
        await sdk.close()
        assert [r.method for r in server.requests] == ["GET", "POST", "POST", "POST"]


# -- placeholder prices -----------------------------------------------------------------------


def test_shipped_prices_are_marked_placeholder_and_a_user_can_clear_the_mark(
    tmp_path: Path,
) -> None:
    reg = load_registry()
    priced = [reg.get(n) for n in reg.names() if reg.get(n).prices is not None]
    assert {s.name for s in priced} >= {"gpt", "opus", "glm", "deepseek", "qwen"}
    assert all(s.prices is not None and s.prices.placeholder for s in priced)
    # a user file that checks the prices says so; one that only edits a price keeps the mark
    checked = _write(
        tmp_path / "checked.toml",
        "[models.gpt.prices]\ninput = 1.0\noutput = 9.0\nplaceholder = false\n"
        "[models.opus.prices]\noutput = 30.0\n",
    )
    reg = load_registry(checked)
    gpt, opus = reg.get("gpt").prices, reg.get("opus").prices
    assert gpt is not None and not gpt.placeholder
    assert opus is not None and opus.placeholder and opus.output == 30.0


def test_placeholder_note_implies_the_flag() -> None:
    assert Prices(input=1.0, output=2.0, note="placeholder, edit").placeholder
    assert Prices(input=1.0, output=2.0, note="Placeholder until the price page is out").placeholder
    assert not Prices(input=1.0, output=2.0, note="official, 2026-05").placeholder
    assert not Prices(input=1.0, output=2.0).placeholder
    assert not Prices(input=1.0, output=2.0, note="placeholder", placeholder=False).placeholder


@pytest.mark.anyio
async def test_every_call_priced_with_placeholder_prices_carries_the_mark() -> None:
    shipped = load_registry().get("gpt").prices
    assert shipped is not None and shipped.placeholder
    records: list[CallRecord] = []
    meter = CostMeter()
    script = [ScriptedResponse.text("a", prompt_tokens=1_000, completion_tokens=10)] * 2
    with OpenAITestServer(script + [ScriptedResponse.text("b")]) as server:
        async with ModelClient(
            spec_for(server.base_url, name="gpt", prices=shipped),
            meter=meter,
            on_record=records.append,
        ) as client:
            c1 = await client.complete(USER)
            await client.complete(USER)
        async with ModelClient(
            spec_for(server.base_url, name="local", prices=None),
            meter=meter,
            on_record=records.append,
        ) as unpriced:
            c3 = await unpriced.complete(USER)
    assert c1.price_placeholder and c1.cost_usd is not None and c1.cost_usd > 0
    assert not c3.price_placeholder and c3.cost_usd is None
    assert [r.price_placeholder for r in records] == [True, True, False]
    # the mark survives the trace's JSON round trip
    assert CallRecord.model_validate_json(records[0].model_dump_json()).price_placeholder
    assert meter.by_model["gpt"].placeholder_priced_calls == 2
    assert meter.by_model["gpt"].price_placeholder
    assert meter.by_model["local"].placeholder_priced_calls == 0
    assert meter.by_model["local"].unpriced_calls == 1
    assert meter.total.placeholder_priced_calls == 2 and meter.price_placeholder
    assert meter.cost_usd is None  # one call had no price: the run's cost is N/A


@pytest.mark.anyio
async def test_calls_priced_with_checked_prices_are_not_marked() -> None:
    with OpenAITestServer([ScriptedResponse.text("x", prompt_tokens=10)]) as server:
        async with ModelClient(spec_for(server.base_url)) as client:
            comp = await client.complete(USER)
    assert comp.cost_usd is not None and not comp.price_placeholder
    assert not client.meter.price_placeholder
    assert client.meter.total.placeholder_priced_calls == 0
