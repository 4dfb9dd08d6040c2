"""The model path as a user meets it (issue: evidence the agent can read, honest replays,
visible tool errors): the parts that need no database."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from dbaops.cli import app
from dbaops.mailbox import Mailbox
from dbaops.tools.mailbox_tools import mailbox_tools


def _read_mailbox(path: Path, posted_at: float, noted_at: float) -> str:
    clock = {"t": posted_at}
    box = Mailbox.create(path, now=lambda: clock["t"])
    box.post("alert", "Checkout is slow", "p95 over 200 ms", entry_id="A1", scheduled_s=540.0)
    clock["t"] = noted_at
    box.update_task("A1", "in_progress", "looking at pg_stat_activity")
    tools = {t.spec.name: t for t in mailbox_tools(box)}
    return anyio.run(tools["read_mailbox"].handler, {}).observation


def test_the_mailbox_the_agent_reads_is_the_same_for_the_same_events(tmp_path: Path) -> None:
    """Posting lag and the agent's own pace differ between a run and its replay; what the
    model is shown does not (so a replay's divergence means something)."""
    first = _read_mailbox(tmp_path / "a.md", posted_at=540.031, noted_at=601.2)
    again = _read_mailbox(tmp_path / "b.md", posted_at=540.718, noted_at=655.9)
    assert first == again
    assert "<!--" not in first and "dbaops:" not in first  # no machine record
    assert "Posted at t=540 s." in first and "looking at pg_stat_activity" in first
    # the file keeps the exact times
    assert "540.718" in (tmp_path / "b.md").read_text()


def test_a_config_error_keeps_its_brackets_and_suggests_the_key(tmp_path: Path) -> None:
    models = tmp_path / "models.toml"
    models.write_text('[model.mine]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    result = CliRunner().invoke(app, ["bounded", "pg-qt-01", "--model", "mine",
                                      "--models", str(models)])  # fmt: skip
    assert result.exit_code == 2
    text = " ".join(result.output.split())  # the console wraps long lines
    assert "[models.<name>]" in text and "did you mean 'models'" in text
    models.write_text(
        '[models.mine]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\ncontext_windw = 8\n'
    )
    result = CliRunner().invoke(app, ["bounded", "pg-qt-01", "--model", "mine",
                                      "--models", str(models)])  # fmt: skip
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "models.mine.context_windw: unknown key 'context_windw'" in text
    assert "did you mean 'context_window'" in text and "base_url" in text


def test_one_option_name_for_where_runs_land() -> None:
    for command in ("bounded", "persistent"):
        text = CliRunner().invoke(app, [command, "--help"]).output
        assert "--out" in text and "--runs-dir" in text  # the old name is kept as an alias


def test_the_endpoint_and_key_are_checked_with_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dbaops.models import InfraError, ModelConfigError, ModelSpec
    from dbaops.models.client import check_endpoint
    from dbaops.testing import OpenAITestServer, dead_base_url

    monkeypatch.setenv("DBAOPS_TEST_KEY", "sk-right")
    with OpenAITestServer(api_key="sk-right") as server:
        spec = ModelSpec(name="mine", base_url=server.base_url, model="test-model",
                         api_key_env="DBAOPS_TEST_KEY")  # fmt: skip
        anyio.run(check_endpoint, spec)  # reachable, key accepted
        monkeypatch.setenv("DBAOPS_TEST_KEY", "sk-wrong")
        with pytest.raises(ModelConfigError, match="refused the API key from DBAOPS_TEST_KEY"):
            anyio.run(check_endpoint, spec)
    dead = ModelSpec(name="mine", base_url=dead_base_url(), model="m")
    with pytest.raises(InfraError, match="cannot reach"):
        anyio.run(check_endpoint, dead)
