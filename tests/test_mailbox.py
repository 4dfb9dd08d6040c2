"""Durable markdown mailbox: round trip, crash safety, protection of system text, suspend."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError

from dbaops.mailbox import (
    InvalidTransitionError,
    Mailbox,
    MailboxClosedError,
    MailboxEntry,
    MailboxError,
    MailboxFormatError,
    MailboxState,
    MailboxTask,
    NoteKind,
    TaskKind,
    TaskNote,
    TaskStatus,
    UnknownTaskError,
    load_mailbox,
    parse_mailbox,
    render_mailbox,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeClock:
    """Scenario clock stand-in: each reading advances by ``step`` seconds."""

    def __init__(self, step: float = 1.5) -> None:
        self.t = 0.0
        self.step = step

    def now(self) -> float:
        self.t += self.step
        return self.t


TRICKY = [
    "# Heading\n## Sub\nplain",
    "backticks ` `` ``` ```` inline and\n```sql\nSELECT 1;\n```\n",
    '<!-- dbaops:entry {"id":"X"} -->\n<!-- comment --> and --> and <!--',
    "unicode: é ü 日本語 😀 \u2028line-sep\u2029para-sep \x85nel",
    "control \x00 \x0b \x0c \r\n crlf \r cr\ttab",
    "",
    "\n\nleading and trailing blank lines\n\n",
    "trailing spaces   \n    indented code\n- list\n> quote\n\\ backslash & <b>html</b>",
    "\"quotes\" 'single' \\u003c literal escape text \\n",
    "~~~\nTilde fence\n~~~",
]


def _filled_mailbox(path: Path) -> Mailbox:
    mb = Mailbox.create(path, now=FakeClock().now)
    for i, text in enumerate(TRICKY):
        kind = list(TaskKind)[i % 3]
        mb.post(kind, f"title {i}: {text[:20] or 'empty'}", text)
    mb.post("ticket", "# `title` <!-- x --> *bold* |pipe|\nsecond line", "t", entry_id="TCK-7.a_b")
    mb.update_task("A001", "acknowledged", TRICKY[0])
    mb.update_task("A001", "in_progress", TRICKY[2], note_kind="action")
    mb.update_task("A001", None, TRICKY[3], note_kind=NoteKind.VERIFICATION)
    mb.update_task("A001", "resolved", TRICKY[4])
    mb.update_task("I002", "escalated")
    mb.update_task("T003", note=TRICKY[1])
    return mb


# --- round trip ---------------------------------------------------------------------------


def test_round_trip_with_tricky_texts(tmp_path: Path) -> None:
    mb = _filled_mailbox(tmp_path / "mailbox.md")
    state = mb.state
    text = (tmp_path / "mailbox.md").read_bytes().decode("utf-8")
    assert text == render_mailbox(state)
    assert parse_mailbox(text) == state
    assert Mailbox.open(tmp_path / "mailbox.md", now=FakeClock().now).state == state
    # the exact strings survive, including \r, U+2028 and NUL
    assert [t.entry.text for t in state.tasks[: len(TRICKY)]] == TRICKY
    a001 = state.task("A001")
    assert a001 is not None
    assert a001.status is TaskStatus.RESOLVED
    assert [n.text for n in a001.notes] == [TRICKY[0], TRICKY[2], TRICKY[3], TRICKY[4]]
    assert [n.status for n in a001.notes] == [
        "acknowledged",
        "in_progress",
        "in_progress",
        "resolved",
    ]
    assert [n.kind for n in a001.notes] == ["note", "action", "verification", "note"]
    assert [n.t_scn for n in a001.notes] == sorted(n.t_scn for n in a001.notes)


def test_round_trip_random_texts() -> None:
    rng = random.Random(1234)
    alphabet = list("ab #`<>!-*_[]&\\\"'~|\n\r\t") + ["\u2028", "\x85", "\x00", "é", "😀", "-->"]

    def rand_text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))

    for _ in range(60):
        tasks = []
        for i in range(rng.randint(0, 4)):
            entry = MailboxEntry(
                id=f"E{i}",
                t_scn=rng.uniform(-10, 1e4),
                kind=rng.choice(list(TaskKind)),
                title=rand_text() or "x",
                text=rand_text(),
            )
            notes = tuple(
                TaskNote(
                    t_scn=rng.uniform(0, 1e4),
                    status=rng.choice(list(TaskStatus)),
                    kind=rng.choice(list(NoteKind)),
                    text=rand_text(),
                )
                for _ in range(rng.randint(0, 3))
            )
            tasks.append(MailboxTask(entry=entry, status=rng.choice(list(TaskStatus)), notes=notes))
        closed = rng.random() < 0.3
        state = MailboxState(
            tasks=tuple(tasks), closed=closed, closed_t_scn=rng.random() if closed else None
        )
        assert parse_mailbox(render_mailbox(state)) == state


def test_markdown_is_readable_and_markers_are_safe(tmp_path: Path) -> None:
    mb = _filled_mailbox(tmp_path / "mailbox.md")
    lines = mb.render().split("\n")
    markers = [line for line in lines if line.startswith("<!-- dbaops:")]
    # header + (entry, task) per task; texts that look like markers are not counted as markers
    assert len(markers) == 1 + 2 * len(mb.state.tasks)
    for line in markers:
        assert line.isascii()
        assert line.count("-->") == 1 and line.endswith(" -->")
        assert "<!--" not in line[4:]
    # system text is shown literally, inside a fence longer than any backtick run in it
    assert "## A001 · alert · title 0: \\# Heading \\#\\# Sub pla" in lines
    fence_line = lines.index("  backticks ` `` ``` ```` inline and") - 1
    assert lines[fence_line] == "  `````text"
    assert "  # Heading" in lines and "**Status: resolved**" in lines


# --- crash safety -------------------------------------------------------------------------


def test_failed_replace_keeps_previous_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mailbox.md"
    mb = Mailbox.create(path, now=FakeClock().now)
    mb.post("alert", "first", "one")
    before = path.read_bytes()
    state_before = mb.state

    def boom(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk gone"):
        mb.post("alert", "second", "two")
    with pytest.raises(OSError):
        mb.update_task("A001", "acknowledged")
    monkeypatch.undo()

    assert path.read_bytes() == before
    assert mb.state == state_before  # memory did not run ahead of the file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mailbox.md"]  # temp cleaned up
    mb.post("alert", "second", "two")
    assert [t.entry.title for t in load_mailbox(path).tasks] == ["first", "second"]


def test_leftover_temp_file_is_ignored_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "mailbox.md"
    mb = _filled_mailbox(path)
    # what a writer killed between writing the temp file and os.replace leaves behind
    torn = tmp_path / ".mailbox.md.abc123.tmp"
    torn.write_bytes(mb.render().encode()[:200])
    reopened = Mailbox.open(path, now=FakeClock().now)
    assert reopened.state == mb.state
    assert not torn.exists()


def _op(mb: Mailbox, i: int) -> None:
    """Deterministic operation sequence shared by the crash child and the expected replay."""
    if i % 3 == 0:
        mb.post(TaskKind.ALERT, f"alert {i}", f"text {i}\n# {'`' * (i % 5)} <!-- {i} -->")
    else:
        last = mb.state.tasks[-1]
        status = "acknowledged" if i % 3 == 1 else "resolved"
        mb.update_task(last.id, status, f"note {i}\n" * (i % 4 + 1))


N_OPS = 150


def _child_main(path: str) -> None:
    mb = Mailbox.open(path, now=FakeClock().now)
    print("ready", flush=True)
    for i in range(N_OPS):
        _op(mb, i)
        print(i, flush=True)
    print("done", flush=True)


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_sigkill_at_random_points_leaves_a_consistent_file(tmp_path: Path) -> None:
    ref = Mailbox.create(tmp_path / "ref.md", now=FakeClock().now)
    expected = [ref.state]
    for i in range(N_OPS):
        _op(ref, i)
        expected.append(ref.state)

    tests_dir = str(Path(__file__).parent)
    code = (
        f"import sys; sys.path.insert(0, {tests_dir!r}); "
        "import test_mailbox as t; t._child_main(sys.argv[1])"
    )
    rng = random.Random(7)
    killed_mid_run = 0
    for trial in range(12):
        run = tmp_path / f"run{trial}"
        run.mkdir()
        path = run / "mailbox.md"
        Mailbox.create(path, now=FakeClock().now)
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(rng.randint(0, N_OPS // 2)):
            proc.stdout.readline()
        time.sleep(rng.uniform(0, 0.003))
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        printed = [ln for ln in rest.split() if ln.isdigit()]
        state = load_mailbox(path)  # must parse: never a torn file
        if "done" in rest:
            assert state == expected[N_OPS]
            continue
        killed_mid_run += 1
        # ops reported done = k (or more, if the kill hit between readline and the next print)
        k = int(printed[-1]) + 1 if printed else None
        index = expected.index(state)  # the file holds one of the states of the sequence...
        if k is not None:
            assert index in (k, k + 1)  # ...the one before or after the last write
        resumed = Mailbox.open(path, now=FakeClock().now)
        assert [p.name for p in run.iterdir()] == ["mailbox.md"]  # leftovers removed
        resumed.post("alert", "after crash", "still writable")
        assert load_mailbox(path).tasks[-1].entry.title == "after crash"
    assert killed_mid_run > 0


# --- protection of system text ------------------------------------------------------------


def test_agent_cannot_alter_system_text_through_the_api(tmp_path: Path) -> None:
    mb = Mailbox.create(tmp_path / "mailbox.md", now=FakeClock().now)
    entry = mb.post("alert", "disk full", "pg_wal at 95%")
    with pytest.raises(ValidationError):
        entry.text = "all fine"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        mb.task("A001").entry.title = "nothing"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        mb.state.tasks[0].status = TaskStatus.RESOLVED  # type: ignore[misc]
    with pytest.raises(MailboxError, match="already exists"):
        mb.post("alert", "disk fine", "overwrite attempt", entry_id="A001")
    mb.update_task("A001", "in_progress", "rm -rf would be bad")
    assert mb.task("A001").entry == entry
    assert load_mailbox(mb.path).tasks[0].entry == entry
    assert len(mb.state.tasks) == 1


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("pg_wal at 95%\n", "pg_wal at 5%\n"),  # visible system text
        ('"text":"pg_wal at 95%"', '"text":"pg_wal at 5%"'),  # the JSON record
        ("## A001 · alert · disk full", "## A001 · alert · disk ok"),  # heading
        ("**Status: in_progress**", "**Status: resolved**"),  # agent field shown
        ('"format":1,', '"format": 1,'),  # non-canonical JSON
    ],
)
def test_hand_edits_are_rejected_on_load(tmp_path: Path, old: str, new: str) -> None:
    path = tmp_path / "mailbox.md"
    mb = Mailbox.create(path, now=FakeClock().now)
    mb.post("alert", "disk full", "pg_wal at 95%")
    mb.update_task("A001", "in_progress")
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(MailboxFormatError):
        Mailbox.open(path, now=FakeClock().now)


def test_truncated_or_garbage_file_is_rejected(tmp_path: Path) -> None:
    mb = _filled_mailbox(tmp_path / "mailbox.md")
    text = mb.render()
    for bad in (text[: len(text) // 2], text[:-1], "", "# Mailbox\n", text + "extra\n"):
        with pytest.raises(MailboxFormatError):
            parse_mailbox(bad)


def test_hand_edit_during_run_is_overwritten_by_next_write(tmp_path: Path) -> None:
    path = tmp_path / "mailbox.md"
    mb = Mailbox.create(path, now=FakeClock().now)
    mb.post("alert", "disk full", "pg_wal at 95%")
    path.write_text(path.read_text(encoding="utf-8").replace("95%", "5%"), encoding="utf-8")
    mb.update_task("A001", "acknowledged")
    assert load_mailbox(path).tasks[0].entry.text == "pg_wal at 95%"


# --- operations and errors ----------------------------------------------------------------


def test_invalid_operations_raise(tmp_path: Path) -> None:
    path = tmp_path / "mailbox.md"
    mb = Mailbox.create(path, now=FakeClock().now)
    mb.post("inspection", "check bloat", "weekly")
    with pytest.raises(UnknownTaskError):
        mb.update_task("I999", "resolved")
    with pytest.raises(MailboxError, match="status or a note"):
        mb.update_task("I001")
    with pytest.raises(MailboxError):
        mb.update_task("I001", note="   ")
    with pytest.raises(MailboxError):
        mb.update_task("I001", "done")
    with pytest.raises(MailboxError):
        mb.post("page", "x", "y")
    with pytest.raises(MailboxError):
        mb.post("alert", "", "empty title")
    with pytest.raises(MailboxError):
        mb.post("alert", "x", "y", entry_id="bad id")
    with pytest.raises(MailboxError):
        mb.post("alert", "x", "y", t_scn=float("nan"))
    with pytest.raises(MailboxError):
        Mailbox.create(path, now=FakeClock().now)
    with pytest.raises(MailboxError):
        Mailbox.open(tmp_path / "missing.md", now=FakeClock().now)
    mb.update_task("I001", "resolved", "no bloat")
    before = path.read_bytes()
    with pytest.raises(InvalidTransitionError):
        mb.update_task("I001", "acknowledged")
    with pytest.raises(InvalidTransitionError):
        mb.update_task("I001", "open")
    assert path.read_bytes() == before
    assert mb.update_task("I001", "in_progress", "bloat is back").status is TaskStatus.IN_PROGRESS
    assert [t.id for t in mb.pending()] == ["I001"]


def test_close_blocks_writes_and_persists(tmp_path: Path) -> None:
    path = tmp_path / "mailbox.md"
    clock = FakeClock(step=10)
    mb = Mailbox.create(path, now=clock.now)
    mb.post("alert", "x", "y")
    mb.close()
    mb.close()  # idempotent
    assert mb.closed and mb.state.closed_t_scn == 20.0
    with pytest.raises(MailboxClosedError):
        mb.post("alert", "late", "too late")
    with pytest.raises(MailboxClosedError):
        mb.update_task("A001", "acknowledged")
    reopened = Mailbox.open(path, now=clock.now)
    assert reopened.closed
    with pytest.raises(MailboxClosedError):
        reopened.post("alert", "late", "too late")
    assert "Scenario: ended at t=20.0 s." in path.read_text(encoding="utf-8")


# --- suspend ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_suspend_returns_immediately_with_all_unseen(tmp_path: Path) -> None:
    mb = Mailbox.create(tmp_path / "mailbox.md", now=FakeClock().now)
    posted = [mb.post("alert", f"a{i}", "t") for i in range(3)]
    assert mb.unseen() == tuple(posted)
    with anyio.fail_after(30):  # a hang guard, not a timing bound
        wake = await mb.suspend()
    assert wake.entries == tuple(posted)
    assert not wake.closed and not wake.timed_out
    assert mb.unseen() == ()


@pytest.mark.anyio
async def test_suspend_blocks_until_post(tmp_path: Path) -> None:
    mb = Mailbox.create(tmp_path / "mailbox.md", now=FakeClock().now)
    results = []

    async def agent() -> None:
        results.append(await mb.suspend())

    with anyio.fail_after(30):  # a hang guard, not a timing bound
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent)
            await anyio.wait_all_tasks_blocked()
            assert results == []  # really suspended
            entry = mb.post("ticket", "add index", "orders.customer_id")
    assert len(results) == 1
    assert results[0].entries == (entry,)
    assert not results[0].closed and not results[0].timed_out


@pytest.mark.anyio
async def test_suspend_returns_at_close_with_end_indication(tmp_path: Path) -> None:
    mb = Mailbox.create(tmp_path / "mailbox.md", now=FakeClock().now)
    results = []

    async def agent() -> None:
        results.append(await mb.suspend())

    with anyio.fail_after(30):  # a hang guard, not a timing bound
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent)
            await anyio.wait_all_tasks_blocked()
            assert results == []
            mb.close()
        assert results[0].closed and results[0].entries == () and not results[0].timed_out
        again = await mb.suspend()  # after the end: immediate
        assert again.closed and again.entries == ()


@pytest.mark.anyio
async def test_suspend_after_close_still_delivers_last_entries(tmp_path: Path) -> None:
    mb = Mailbox.create(tmp_path / "mailbox.md", now=FakeClock().now)
    entry = mb.post("alert", "last one", "t")
    mb.close()
    with anyio.fail_after(30):  # a hang guard, not a timing bound
        wake = await mb.suspend()
    assert wake.entries == (entry,) and wake.closed


@pytest.mark.anyio
async def test_suspend_timeout_and_read_marks_seen(tmp_path: Path) -> None:
    mb = Mailbox.create(tmp_path / "mailbox.md", now=FakeClock().now)
    mb.post("alert", "a", "t")
    state = mb.read()
    assert len(state.tasks) == 1 and mb.unseen() == ()
    start = time.monotonic()
    wake = await mb.suspend(timeout=0.05)
    assert time.monotonic() - start >= 0.04
    assert wake.timed_out and wake.entries == () and not wake.closed
    entry = mb.post("alert", "b", "t")  # a post after a timed-out wait is not lost
    with anyio.fail_after(30):  # a hang guard, not a timing bound
        assert (await mb.suspend()).entries == (entry,)


@pytest.mark.anyio
async def test_cancelled_suspend_loses_nothing_and_double_suspend_fails(tmp_path: Path) -> None:
    mb = Mailbox.create(tmp_path / "mailbox.md", now=FakeClock().now)
    with anyio.move_on_after(0.02):
        await mb.suspend()
    entry = mb.post("alert", "a", "t")
    with anyio.fail_after(30):  # a hang guard, not a timing bound
        assert (await mb.suspend()).entries == (entry,)

    errors = []

    async def second() -> None:
        try:
            await mb.suspend()
        except MailboxError as exc:
            errors.append(exc)

    with anyio.fail_after(30):  # a hang guard, not a timing bound
        async with anyio.create_task_group() as tg:
            tg.start_soon(mb.suspend)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            mb.close()
    assert len(errors) == 1


@pytest.mark.anyio
async def test_reopened_mailbox_delivers_everything_on_first_suspend(tmp_path: Path) -> None:
    path = tmp_path / "mailbox.md"
    mb = Mailbox.create(path, now=FakeClock().now)
    posted = [mb.post("alert", "a", "t"), mb.post("inspection", "b", "t")]
    mb.read()
    resumed = Mailbox.open(path, now=FakeClock().now)
    with anyio.fail_after(30):  # a hang guard, not a timing bound
        assert (await resumed.suspend()).entries == tuple(posted)
