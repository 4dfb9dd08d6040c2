"""Markdown rendering of the mailbox and its exact parser.

The document is a sequence of blocks. Each block is one machine-readable marker line
``<!-- dbaops:<tag> {json} -->`` followed by human-readable lines derived only from that JSON.
Tags: ``mailbox`` (header, first), then per task an ``entry`` block (system-written) and a
``task`` block (agent-owned status and notes).

The JSON is ASCII-only with ``<``, ``>`` and ``&`` written as ``\\u003c`` etc., so a marker can
never contain ``-->`` or a line break. Texts are shown in fenced code blocks whose fence is longer
than any backtick run in the text and indented by two spaces, so ``#``, backticks and ``<!--``
display literally and a line starts with ``<!-- dbaops:`` only if it is a marker. The parser
reads markers in sequence and checks that every human-readable line equals its rendering from the
marker: a document edited by hand (system text or agent fields) raises
:class:`~dbaops.mailbox.errors.MailboxFormatError`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from dbaops.mailbox.errors import MailboxFormatError
from dbaops.mailbox.models import (
    MailboxEntry,
    MailboxState,
    MailboxTask,
    TaskNote,
    TaskStatus,
    _Frozen,
)

FORMAT_VERSION = 1
_MARKER_RE = re.compile(r"^<!-- dbaops:(mailbox|entry|task) (\{.*\}) -->$")
_LINE_BREAKS_RE = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]")
_MD_SPECIAL_RE = re.compile(r"([\\`*_\[\]<>&#|~])")
_BACKTICKS_RE = re.compile(r"`+")


class _Header(_Frozen):
    format: int
    closed: bool
    closed_t_scn: float | None


class _TaskMeta(_Frozen):
    id: str
    status: TaskStatus
    notes: tuple[TaskNote, ...]


def _marker(tag: str, data: dict[str, Any]) -> str:
    payload = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f"<!-- dbaops:{tag} {payload} -->"


def _time(t_scn: float) -> str:
    return f"t={t_scn:.1f} s"


def _inline(text: str) -> str:
    """One-line, markdown-escaped display form (display only; the JSON holds the exact text)."""
    return _MD_SPECIAL_RE.sub(r"\\\1", _LINE_BREAKS_RE.sub(" ", text))


def _fenced(text: str, indent: str) -> list[str]:
    """Code block showing ``text`` literally. Indented so that no text line starts at column 0:
    a line starting with ``<!-- dbaops:`` is always a marker."""
    longest = max((len(run) for run in _BACKTICKS_RE.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = [indent + line if line else "" for line in text.split("\n")]
    return [f"{indent}{fence}text", *body, f"{indent}{fence}"]


def _header_display(header: _Header) -> list[str]:
    if header.closed:
        ended = "ended" if header.closed_t_scn is None else f"ended at {_time(header.closed_t_scn)}"
    else:
        ended = "running"
    return [
        "# Mailbox",
        "",
        "System-written parts (heading, posting time, text) are read-only. Task status and notes",
        "change only through the mailbox tools. The `dbaops:` comments are the machine-readable",
        "record; a file edited by hand is rejected when loaded.",
        "",
        f"Scenario: {ended}.",
        "",
    ]


def _entry_display(entry: MailboxEntry) -> list[str]:
    return [
        f"## {entry.id} · {entry.kind.value} · {_inline(entry.title)}",
        "",
        f"Posted at {_time(entry.t_scn)}.",
        "",
        *_fenced(entry.text, indent="  "),
        "",
    ]


def _task_display(meta: _TaskMeta) -> list[str]:
    lines = [f"**Status: {meta.status.value}**", ""]
    if not meta.notes:
        return [*lines, "No notes yet.", ""]
    lines += ["Notes:", ""]
    for note in meta.notes:
        lines.append(f"- {_time(note.t_scn)} · {note.status.value} · {note.kind.value}")
        if note.text:
            lines += ["", *_fenced(note.text, indent="  ")]
        lines.append("")
    return lines


def _blocks(state: MailboxState) -> list[str]:
    header = _Header(format=FORMAT_VERSION, closed=state.closed, closed_t_scn=state.closed_t_scn)
    lines = [_marker("mailbox", header.model_dump(mode="json")), *_header_display(header)]
    for task in state.tasks:
        meta = _TaskMeta(id=task.id, status=task.status, notes=task.notes)
        lines += [_marker("entry", task.entry.model_dump(mode="json")), *_entry_display(task.entry)]
        lines += [_marker("task", meta.model_dump(mode="json")), *_task_display(meta)]
    return lines


def shown_time(entry: MailboxEntry) -> str:
    """When an entry was posted, as the agent is told: the event's scheduled scenario time in
    whole seconds (the same in every run of the same events)."""
    t = entry.t_scn if entry.scheduled_s is None else entry.scheduled_s
    return f"t={t:.0f} s"


def render_mailbox_view(state: MailboxState) -> str:
    """The mailbox as the agent reads it: the human-readable parts only, without the machine
    record and without times that differ between runs of the same events (note times depend
    on the agent's own pace and are left out)."""
    lines = ["# Mailbox", "", f"Scenario: {'ended' if state.closed else 'running'}.", ""]
    for task in state.tasks:
        e = task.entry
        lines += [f"## {e.id} · {e.kind.value} · {_inline(e.title)}", ""]
        lines += [f"Posted at {shown_time(e)}.", "", *_fenced(e.text, indent="  "), ""]
        lines += [f"**Status: {task.status.value}**", ""]
        for note in task.notes:
            lines.append(f"- {note.status.value} · {note.kind.value}")
            if note.text:
                lines += ["", *_fenced(note.text, indent="  ")]
            lines.append("")
    return "\n".join(lines)


def render_mailbox(state: MailboxState) -> str:
    """The canonical markdown document of ``state`` (ends with a newline)."""
    return "\n".join(_blocks(state))  # every block ends with a blank line


class _Reader:
    def __init__(self, text: str) -> None:
        if not text.endswith("\n"):
            raise MailboxFormatError("mailbox document must end with a newline")
        self.lines = text.split("\n")  # the last block's trailing blank line is the final ""
        self.pos = 0

    @property
    def done(self) -> bool:
        return self.pos >= len(self.lines)

    def marker(self, tag: str) -> dict[str, Any]:
        lineno = self.pos + 1
        if self.done:
            raise MailboxFormatError(f"line {lineno}: expected a dbaops:{tag} marker, got EOF")
        match = _MARKER_RE.match(self.lines[self.pos])
        if match is None or match.group(1) != tag:
            raise MailboxFormatError(f"line {lineno}: expected a dbaops:{tag} marker")
        try:
            data = json.loads(match.group(2))
        except json.JSONDecodeError as exc:
            raise MailboxFormatError(f"line {lineno}: bad marker JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise MailboxFormatError(f"line {lineno}: marker JSON must be an object")
        self.pos += 1
        return data

    def expect(self, expected: list[str], what: str) -> None:
        got = self.lines[self.pos : self.pos + len(expected)]
        for offset, (want, have) in enumerate(zip(expected, got, strict=False)):
            if want != have:
                raise MailboxFormatError(
                    f"line {self.pos + offset + 1}: {what} differs from its recorded content "
                    "(edited by hand?)"
                )
        if len(got) < len(expected):
            raise MailboxFormatError(f"{what}: document ends early (truncated?)")
        self.pos += len(expected)


def parse_mailbox(text: str) -> MailboxState:
    """Parse a document written by :func:`render_mailbox`; exact inverse of it.

    Raises :class:`MailboxFormatError` if the text is malformed or is not byte-identical to the
    canonical rendering of what its markers record (i.e. it was edited outside the API).
    """
    reader = _Reader(text)
    try:
        header = _Header.model_validate(reader.marker("mailbox"))
        if header.format != FORMAT_VERSION:
            raise MailboxFormatError(f"unsupported mailbox format {header.format}")
        reader.expect(_header_display(header), "mailbox header")
        tasks: list[MailboxTask] = []
        while not reader.done:
            entry = MailboxEntry.model_validate(reader.marker("entry"))
            reader.expect(_entry_display(entry), f"system text of {entry.id}")
            meta = _TaskMeta.model_validate(reader.marker("task"))
            if meta.id != entry.id:
                raise MailboxFormatError(f"task block {meta.id!r} follows entry {entry.id!r}")
            reader.expect(_task_display(meta), f"agent section of {entry.id}")
            tasks.append(MailboxTask(entry=entry, status=meta.status, notes=meta.notes))
        state = MailboxState(
            tasks=tuple(tasks), closed=header.closed, closed_t_scn=header.closed_t_scn
        )
    except ValidationError as exc:
        raise MailboxFormatError(f"line {reader.pos}: invalid mailbox data: {exc}") from exc
    if render_mailbox(state) != text:
        raise MailboxFormatError("mailbox document is not in canonical form (edited by hand?)")
    return state
