"""The diagnosis judge over real HTTP against the local scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dbaops.evaluation.diagnosis import (
    PROMPT_SHA256,
    PROMPT_VERSION,
    ConditionJudgment,
    DiagnosisSpec,
    JudgmentStore,
    judge_diagnosis,
    load_judgments,
    open_judge_client,
    render_reports,
    verdict_from_store,
)
from dbaops.evaluation.diagnosis_prompt import parse_answer, report_hash
from dbaops.models import ModelClient, ModelSpec, RetryPolicy
from dbaops.scenario.loader import load_scenario
from dbaops.testing import OpenAITestServer, ScriptedResponse, dead_base_url


@pytest.fixture(autouse=True)
def _no_user_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DBAOPS_MODELS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


FAST = RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.02, max_total_s=5.0)

SPEC = DiagnosisSpec(
    required=["statistics on orders are stale", "autovacuum is disabled on orders"],
    contradictory=["a missing index is the root cause", "bloat is the root cause"],
)
REPORT = {
    "summary": "Queue page slow because of stale planner statistics.",
    "root_cause": "Statistics on orders are stale; autovacuum is disabled on the table.",
    "actions": ["VACUUM (ANALYZE) orders", "ALTER TABLE orders RESET (autovacuum_enabled)"],
    "verification": "p95 back to 3 ms",
}
YES = json.dumps({"verdict": "yes", "rationale": "stated in root_cause"})
NO = json.dumps({"verdict": "no", "rationale": "not claimed"})


def condition_of(body: dict[str, Any]) -> str:
    user = body["messages"][1]["content"]
    return user.split("<<<CONDITION\n", 1)[1].split("\nCONDITION>>>", 1)[0]


def answering(answers: dict[str, str], default: str | None = None) -> Callable[..., Any]:
    """A server script answering by the condition in the request."""

    def script(body: dict[str, Any]) -> ScriptedResponse:
        cond = condition_of(body)
        if cond in answers:
            return ScriptedResponse.text(answers[cond])
        if default is not None:
            return ScriptedResponse.text(default)
        return ScriptedResponse.error(400, f"unexpected condition {cond!r}")

    return script


def honest_answers(spec: DiagnosisSpec = SPEC) -> dict[str, str]:
    return {c: YES for c in spec.required} | {c: NO for c in spec.contradictory}


def client_for(base_url: str, name: str = "judge-a", model: str = "test-model") -> ModelClient:
    return ModelClient(ModelSpec(name=name, base_url=base_url, model=model), retry=FAST)


def per_condition(server: OpenAITestServer) -> Counter[tuple[str, str]]:
    """(condition, report-hash-ish) -> number of chat requests the server received."""
    out: Counter[tuple[str, str]] = Counter()
    for r in server.chat_requests:
        user = r.body["messages"][1]["content"]
        reports = user.split("<<<REPORTS\n", 1)[1]
        out[(condition_of(r.body), reports)] += 1
    return out


def raw_lines(path: Path) -> list[bytes]:
    return [ln for ln in path.read_bytes().split(b"\n") if ln]


# -- spec, rendering, prompt, parsing ---------------------------------------------------------


def test_spec_from_scenario_yaml() -> None:
    sc, _, _ = load_scenario("pg-qt-01")
    spec = DiagnosisSpec.from_evaluation(sc.evaluation.diagnosis)
    assert spec.applicable
    assert len(spec.required) == 3 and len(spec.contradictory) == 3
    assert spec.required[1] == "autovacuum is disabled on orders"
    assert spec.conditions()[3] == ("contradictory", "a missing index is the root cause")
    assert not DiagnosisSpec.from_evaluation({}).applicable
    assert not DiagnosisSpec.from_evaluation(None).applicable
    # folded YAML whitespace does not matter
    assert DiagnosisSpec(required=["  a \n b  "]).required == ["a b"]
    with pytest.raises(ValueError, match="duplicate"):
        DiagnosisSpec(required=["x", " x"])
    with pytest.raises(ValueError, match="both required and contradictory"):
        DiagnosisSpec(required=["x"], contradictory=["x"])
    with pytest.raises(ValueError, match="must not be empty"):
        DiagnosisSpec(required=["  "])
    with pytest.raises(ValueError):
        DiagnosisSpec.from_evaluation({"requird": ["x"]})


def test_render_reports_deterministic() -> None:
    shuffled = {k: REPORT[k] for k in reversed(list(REPORT))} | {"extra": {"b": 1, "a": 2}}
    text = render_reports([shuffled, "# Note\r\nall good  "])
    assert text == render_reports([dict(reversed(list(shuffled.items()))), "# Note\nall good"])
    assert text.startswith("## Report 1 of 2\n\n### summary\nQueue page slow")
    assert text.index("### root_cause") < text.index("### actions") < text.index("### verification")
    assert text.index("### verification") < text.index("### extra")
    assert "- VACUUM (ANALYZE) orders\n- ALTER TABLE" in text
    assert '{\n  "a": 2,\n  "b": 1\n}' in text
    assert text.endswith("## Report 2 of 2\n\n# Note\nall good")
    assert render_reports(REPORT) == render_reports([REPORT])
    assert render_reports([]) == render_reports(None) == render_reports([{}, "  "]) == ""
    assert report_hash([REPORT]) != report_hash([REPORT | {"verification": "p95 4 ms"}])


def test_prompt_is_pinned() -> None:
    # Editing the prompt or its rendering requires bumping PROMPT_VERSION (cache key) and
    # updating this hash.
    assert PROMPT_VERSION == "diag-v1"
    assert PROMPT_SHA256 == "95f73aecc1b7021d48819cba22235b257ff597f28f5e06b5f7f57fd996edd321"


@pytest.mark.parametrize(
    ("content", "verdict", "reason"),
    [
        ('{"verdict": "yes", "rationale": "r"}', "yes", None),
        ('```json\n{"verdict": "NO ", "rationale": "r"}\n```', "no", None),
        ('<think>{"verdict": "yes"}</think>\nAnswer: {"verdict": "no"}', "no", None),
        ('Sure. {"verdict": true} and {"verdict": "no"}', "yes", None),
        ('{"verdict": "unknown", "rationale": "cannot tell"}', "unknown", "judge answered unknown"),
        ('{"verdict": "cannot tell"}', "unknown", "unparseable answer"),
        ('{"rationale": "no verdict"}', "unknown", "unparseable answer"),
        ("yes", "unknown", "unparseable answer"),
        ('{"verdict": "yes"', "unknown", "unparseable answer"),
        ("", "unknown", "unparseable answer"),
        (None, "unknown", "unparseable answer"),
    ],
)
def test_parse_answer(content: str | None, verdict: str, reason: str | None) -> None:
    parsed = parse_answer(content)
    assert parsed.verdict == verdict
    assert parsed.unknown_reason == reason


# -- judging over HTTP ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_pass_and_cache_one_call_per_condition(tmp_path: Path) -> None:
    with OpenAITestServer(answering(honest_answers())) as server:
        async with client_for(server.base_url) as client:
            v1 = await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
            v2 = await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
    assert v1.applicable and v1.passed is True
    assert (v1.n_resolved, v1.n_unknown, v1.n_called, v1.n_cached) == (4, 0, 4, 0)
    assert [j.verdict for j in v1.judgments] == ["yes", "yes", "no", "no"]
    assert [j.kind for j in v1.judgments] == ["required"] * 2 + ["contradictory"] * 2
    assert v2.passed is True
    assert (v2.n_called, v2.n_cached) == (0, 4)
    assert all(j.cached for j in v2.judgments)
    # exactly one call per unique (report, condition)
    assert len(server.chat_requests) == 4
    assert set(per_condition(server).values()) == {1}
    body = server.chat_requests[0].body
    assert body["model"] == "test-model"
    assert body["temperature"] == 0.0
    assert "response_format" not in body
    assert body["messages"][0]["role"] == "system"
    assert "Statistics on orders are stale; autovacuum" in body["messages"][1]["content"]
    # the run store: one line per judgment, with provenance
    lines = raw_lines(tmp_path / "judgments.jsonl")
    assert len(lines) == 4
    first = json.loads(lines[0])
    assert first["judge_model"] == "judge-a" and first["judge_model_id"] == "test-model"
    assert first["prompt_version"] == "diag-v1" and first["prompt_sha256"] == PROMPT_SHA256
    assert first["report_hash"] == report_hash([REPORT]) == v1.report_hash
    assert first["final"] is True and "cached" not in first
    assert first["usage"]["input_tokens"] == 10 and first["usage"]["output_tokens"] == 5
    assert first["raw_response"] in (YES, NO)


@pytest.mark.anyio
async def test_changed_report_asks_again(tmp_path: Path) -> None:
    changed = REPORT | {"verification": "p95 back to 4 ms"}
    with OpenAITestServer(answering(honest_answers())) as server:
        async with client_for(server.base_url) as client:
            await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
            v = await judge_diagnosis(SPEC, [changed], client, tmp_path)
            await judge_diagnosis(SPEC, [changed], client, tmp_path)
    assert v.passed is True and v.n_called == 4
    assert len(server.chat_requests) == 8
    counts = per_condition(server)
    assert len(counts) == 8 and set(counts.values()) == {1}
    assert len(raw_lines(tmp_path / "judgments.jsonl")) == 8
    assert len({json.loads(x)["report_hash"] for x in raw_lines(tmp_path / "judgments.jsonl")}) == 2


@pytest.mark.anyio
async def test_second_judge_adds_lines_beside_the_first(tmp_path: Path) -> None:
    store = tmp_path / "judgments.jsonl"
    b_answers = honest_answers() | {"bloat is the root cause": YES}
    with OpenAITestServer(answering(honest_answers())) as server_a:
        async with client_for(server_a.base_url) as client_a:
            va = await judge_diagnosis(SPEC, [REPORT], client_a, store)
    before = store.read_bytes()
    with OpenAITestServer(answering(b_answers)) as server_b:
        async with client_for(server_b.base_url, "judge-b", "other-model") as client_b:
            vb = await judge_diagnosis(SPEC, [REPORT], client_b, store)
            vb2 = await judge_diagnosis(SPEC, [REPORT], client_b, store)
        # same registry name, different provider model id: a different judge too
        async with client_for(server_b.base_url, "judge-b", "third-model") as client_c:
            vc = await judge_diagnosis(SPEC, [REPORT], client_c, store)
    assert len(server_a.chat_requests) == 4
    assert len(server_b.chat_requests) == 8
    assert {r.body["model"] for r in server_b.chat_requests} == {"other-model", "third-model"}
    assert va.passed is True and vb.passed is False and vb2.passed is False and vc.passed is False
    assert vb2.n_called == 0 and vc.n_called == 4
    assert vb.reason == "contradictory condition asserted: 'bloat is the root cause'"
    after = store.read_bytes()
    assert after.startswith(before)  # old lines untouched
    assert len(raw_lines(store)) == 12
    a = load_judgments(store, judge="judge-a")
    b = load_judgments(store, judge=client_b.spec)
    assert len(a) == 4 and {j.judge_model for j in a} == {"judge-a"}
    assert len(b) == 4 and {j.judge_model_id for j in b} == {"other-model"}
    assert len(load_judgments(store, judge="judge-b")) == 8
    assert len(load_judgments(store, judge="judge-b:third-model")) == 4
    assert len(load_judgments(store)) == 12
    # offline re-scoring from the store alone, per judge
    assert verdict_from_store(SPEC, [REPORT], store, "judge-a").passed is True
    off_b = verdict_from_store(SPEC, [REPORT], store, client_b.spec)
    assert off_b.passed is False and off_b.n_cached == 4 and off_b.judge_model_id == "other-model"
    assert verdict_from_store(SPEC, [REPORT], store, "nobody").passed is None


@pytest.mark.anyio
async def test_unknown_answers_are_excluded_and_cached(tmp_path: Path) -> None:
    r1, r2 = SPEC.required
    answers = honest_answers() | {
        r1: "I think the report mostly covers this.",
        r2: '{"verdict": "unknown", "rationale": "cannot tell"}',
    }
    with OpenAITestServer(answering(answers)) as server:
        async with client_for(server.base_url) as client:
            v = await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
            again = await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
    assert v.passed is None
    assert (v.n_resolved, v.n_unknown) == (2, 2)
    assert v.reason == "not judged: 2 unresolved judgment(s) could decide the verdict"
    by = {j.condition: j for j in v.judgments}
    assert by[r1].verdict == "unknown" and by[r1].unknown_reason == "unparseable answer"
    assert by[r1].raw_response == "I think the report mostly covers this."
    assert by[r2].verdict == "unknown" and by[r2].unknown_reason == "judge answered unknown"
    assert by[r2].final and by[r1].final
    # a final unknown is the judge's answer: cached, not asked again
    assert again.passed is None and again.n_called == 0
    assert len(server.chat_requests) == 4


@pytest.mark.anyio
async def test_unknown_does_not_hide_a_resolved_failure(tmp_path: Path) -> None:
    r1, r2 = SPEC.required
    c1, c2 = SPEC.contradictory
    with OpenAITestServer(answering(honest_answers() | {r1: "garbage", r2: NO})) as server:
        async with client_for(server.base_url) as client:
            v = await judge_diagnosis(SPEC, [REPORT], client, tmp_path / "a")
            server.set_script(answering(honest_answers() | {c1: "???"}))
            w = await judge_diagnosis(SPEC, [REPORT], client, tmp_path / "b.jsonl")
            server.set_script(answering(honest_answers() | {c1: "???", c2: YES}))
            x = await judge_diagnosis(SPEC, [REPORT], client, tmp_path / "c.jsonl")
    assert v.passed is False and (v.n_resolved, v.n_unknown) == (3, 1)
    assert v.reason == f"required condition not established: {r2!r}"
    # all required established, one contradictory unresolved: not judged
    assert w.passed is None and (w.n_resolved, w.n_unknown) == (3, 1)
    # a contradictory condition asserted fails whatever the unknown one says
    assert x.passed is False and x.reason == f"contradictory condition asserted: {c2!r}"
    assert len(server.chat_requests) == 12


@pytest.mark.anyio
async def test_retry_unknown_asks_again_and_resolved_answer_wins(tmp_path: Path) -> None:
    r1 = SPEC.required[0]
    with OpenAITestServer(answering(honest_answers() | {r1: "garbage"})) as server:
        async with client_for(server.base_url) as client:
            v = await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
            server.set_script(answering(honest_answers()))
            w = await judge_diagnosis(SPEC, [REPORT], client, tmp_path, retry_unknown=True)
            x = await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
    assert v.passed is None and w.passed is True and x.passed is True
    assert (w.n_called, x.n_called) == (1, 0)
    assert len(server.chat_requests) == 5
    assert len(raw_lines(tmp_path / "judgments.jsonl")) == 5
    assert len(load_judgments(tmp_path)) == 4


@pytest.mark.anyio
async def test_contradictory_asserted_fails_even_if_required_hold(tmp_path: Path) -> None:
    answers = honest_answers() | {"a missing index is the root cause": YES}
    with OpenAITestServer(answering(answers)) as server:
        async with client_for(server.base_url) as client:
            v = await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
    assert v.passed is False
    assert [j.verdict for j in v.judgments] == ["yes", "yes", "yes", "no"]
    assert v.reason == "contradictory condition asserted: 'a missing index is the root cause'"
    assert (v.n_resolved, v.n_unknown) == (4, 0)
    user = server.chat_requests[0].body["messages"][1]["content"]
    questions = {
        condition_of(r.body): r.body["messages"][1]["content"] for r in server.chat_requests
    }
    assert "CONTRADICTORY CLAIM" in questions["bloat is the root cause"]
    assert "REQUIRED FINDING" in questions[SPEC.required[0]]
    assert "Reply with the JSON object only." in user


@pytest.mark.anyio
async def test_dead_endpoint_is_unknown_and_not_cached(tmp_path: Path) -> None:
    async with client_for(dead_base_url()) as dead:
        v = await judge_diagnosis(SPEC, [REPORT], dead, tmp_path)
    assert v.passed is None and (v.n_resolved, v.n_unknown, v.n_called) == (0, 4, 4)
    assert {j.unknown_reason for j in v.judgments} == {"judge unavailable"}
    assert all(not j.final and j.error and "unavailable" in j.error for j in v.judgments)
    assert all(j.retries == 1 for j in v.judgments)
    # recorded for the record, but not as answers
    assert len(raw_lines(tmp_path / "judgments.jsonl")) == 4
    assert load_judgments(tmp_path) == []
    assert len(load_judgments(tmp_path, include_provisional=True)) == 4
    assert verdict_from_store(SPEC, [REPORT], tmp_path, "judge-a").passed is None
    # a later re-score (same judge, endpoint back) asks again
    with OpenAITestServer(answering(honest_answers())) as server:
        async with client_for(server.base_url) as client:
            w = await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
    assert w.passed is True and w.n_called == 4
    assert len(server.chat_requests) == 4
    assert len(load_judgments(tmp_path)) == 4
    assert verdict_from_store(SPEC, [REPORT], tmp_path, "judge-a").passed is True


@pytest.mark.anyio
async def test_refused_request_is_unknown_and_not_cached(tmp_path: Path) -> None:
    with OpenAITestServer(lambda body: ScriptedResponse.error(401, "bad key")) as server:
        async with client_for(server.base_url) as client:
            v = await judge_diagnosis(SPEC, [REPORT], client, tmp_path)
    assert v.passed is None and v.n_unknown == 4
    assert {j.unknown_reason for j in v.judgments} == {"judge refused the request"}
    assert load_judgments(tmp_path) == []
    assert len(server.chat_requests) == 4


@pytest.mark.anyio
async def test_global_cache_serves_other_run_dirs(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    run1, run2 = tmp_path / "run1", tmp_path / "run2"
    run1.mkdir()
    run2.mkdir()
    with OpenAITestServer(answering(honest_answers())) as server:
        async with client_for(server.base_url) as client:
            v1 = await judge_diagnosis(SPEC, [REPORT], client, run1, cache=cache)
            v2 = await judge_diagnosis(SPEC, [REPORT], client, run2, cache=cache)
    assert v1.passed is True and v2.passed is True
    assert (v1.n_called, v2.n_called, v2.n_cached) == (4, 0, 4)
    assert len(server.chat_requests) == 4
    assert len(raw_lines(cache / "judgments.jsonl")) == 4
    # the second run directory is self-contained: offline scoring needs no cache
    assert sorted(raw_lines(run2 / "judgments.jsonl")) == sorted(
        raw_lines(run1 / "judgments.jsonl")
    )
    assert verdict_from_store(SPEC, [REPORT], run2, "judge-a").passed is True


@pytest.mark.anyio
async def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    store = tmp_path / "judgments.jsonl"
    with OpenAITestServer(answering(honest_answers())) as server:
        async with client_for(server.base_url) as client:
            await judge_diagnosis(SPEC, [REPORT], client, store)
            whole = store.read_bytes()
            torn = raw_lines(store)[0][:57]
            store.write_bytes(whole + torn)  # a writer killed mid-line
            s = JudgmentStore(store)
            assert len(s.read()) == 4 and s.bad_lines == 1
            v = await judge_diagnosis(SPEC, [REPORT], client, store)
            assert v.n_called == 0 and v.passed is True
            other = REPORT | {"summary": "different"}
            w = await judge_diagnosis(SPEC, [other], client, store)
    assert w.n_called == 4 and len(server.chat_requests) == 8
    s = JudgmentStore(store)
    assert len(s.read()) == 8 and s.bad_lines == 1
    assert store.read_bytes().startswith(whole + torn + b"\n{")


def test_concurrent_appends_stay_whole(tmp_path: Path) -> None:
    store = JudgmentStore(tmp_path / "j.jsonl")
    template = ConditionJudgment(
        key="k",
        condition="c" * 3000,
        kind="required",
        verdict="yes",
        judge_model="j",
        judge_model_id="m",
        prompt_version=PROMPT_VERSION,
        report_hash="r",
        condition_hash="h",
    )

    def writer(n: int) -> None:
        for i in range(25):
            store.append(template.model_copy(update={"key": f"{n}-{i}"}))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = store.read()
    assert len(lines) == 200 and store.bad_lines == 0
    assert len({j.key for j in lines}) == 200


@pytest.mark.anyio
async def test_no_report_fails_without_calling(tmp_path: Path) -> None:
    with OpenAITestServer(answering(honest_answers())) as server:
        async with client_for(server.base_url) as client:
            v = await judge_diagnosis(SPEC, [], client, tmp_path)
            only_b = await judge_diagnosis(
                DiagnosisSpec(contradictory=["bloat is the root cause"]), None, client, tmp_path
            )
            na = await judge_diagnosis({}, [REPORT], client, tmp_path)
    assert v.passed is False and [j.verdict for j in v.judgments] == ["no"] * 4
    assert v.judgments[0].rationale == "no report submitted"
    assert only_b.passed is True
    assert na.applicable is False and na.passed is None and na.reason == "no diagnosis criteria"
    assert server.chat_requests == []
    assert not (tmp_path / "judgments.jsonl").exists()


@pytest.mark.anyio
async def test_judge_role_from_registry(tmp_path: Path) -> None:
    spec = DiagnosisSpec(required=["autovacuum is disabled on orders"])
    with OpenAITestServer(answering(honest_answers(spec))) as server:
        toml = tmp_path / "models.toml"
        toml.write_text(
            f'[roles]\njudge = "myjudge"\n[models.myjudge]\nbase_url = "{server.base_url}"\n'
            'model = "judge-model"\nextra_body = { temperature = 0.2 }\n',
            encoding="utf-8",
        )
        async with open_judge_client(toml, retry=FAST) as client:
            assert client.spec.name == "myjudge"
            v = await judge_diagnosis(spec, "# report\nautovacuum is off on orders", client, None)
    assert v.passed is True and v.judge_model == "myjudge" and v.judge_model_id == "judge-model"
    body = server.chat_requests[0].body
    assert body["model"] == "judge-model"
    assert body["temperature"] == 0.2  # the registry entry's own temperature is kept


@pytest.mark.anyio
async def test_reasoning_model_gets_no_temperature_and_json_mode_on_request(
    tmp_path: Path,
) -> None:
    spec = DiagnosisSpec(required=["autovacuum is disabled on orders"])
    with OpenAITestServer(answering(honest_answers(spec))) as server:
        ms = ModelSpec(name="r", base_url=server.base_url, model="m", reasoning_effort="low")
        async with ModelClient(ms, retry=FAST) as client:
            v = await judge_diagnosis(spec, [REPORT], client, None, json_mode=True)
    assert v.passed is True
    body = server.chat_requests[0].body
    assert "temperature" not in body
    assert body["response_format"] == {"type": "json_object"}
    assert body["reasoning_effort"] == "low"
