"""The live mailbox: the system posts, the agent updates tasks and suspends until news."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.lowlevel
from pydantic import ValidationError

from dbaops.mailbox.errors import (
    InvalidTransitionError,
    MailboxClosedError,
    MailboxError,
    MailboxFormatError,
    UnknownTaskError,
)
from dbaops.mailbox.markdown import parse_mailbox, render_mailbox
from dbaops.mailbox.models import (
    ALLOWED_TRANSITIONS,
    ENTRY_ID_PATTERN,
    MailboxEntry,
    MailboxState,
    MailboxTask,
    NoteKind,
    TaskKind,
    TaskNote,
    TaskStatus,
    Wakeup,
)
from dbaops.mailbox.storage import fsync_dir, read_text, remove_stale_temps, write_atomic

_ID_PREFIX = {TaskKind.ALERT: "A", TaskKind.INSPECTION: "I", TaskKind.TICKET: "T"}


def load_mailbox(path: Path | str) -> MailboxState:
    """Read-only load of ``mailbox.md`` (for analysis); raises :class:`MailboxFormatError`."""
    try:
        text = read_text(Path(path))
    except UnicodeDecodeError as exc:
        raise MailboxFormatError(f"{path}: not UTF-8: {exc}") from exc
    return parse_mailbox(text)


class Mailbox:
    """Durable markdown mailbox of one persistent run.

    Every write re-renders the whole document and replaces the file atomically, so after a crash
    ``mailbox.md`` holds the state before or after the last write. The in-memory state is
    authoritative while running; hand edits of the file are overwritten by the next write and
    rejected by :meth:`open`. Not thread-safe: use it from one event-loop thread.

    ``now`` returns scenario seconds (the engine passes ``ScenarioClock.now``).
    """

    def __init__(self, path: Path, state: MailboxState, *, now: Callable[[], float]) -> None:
        self._path = path
        self._state = state
        self._now = now
        self._seen = 0  # tasks[:_seen] have been delivered to the agent
        self._wake: anyio.Event | None = None
        self._waiting = False

    @classmethod
    def create(cls, path: Path | str, *, now: Callable[[], float]) -> Mailbox:
        """Start an empty mailbox at ``path``; raises :class:`MailboxError` if it exists."""
        path = Path(path)
        if path.exists():
            raise MailboxError(f"{path} already exists (use Mailbox.open to resume)")
        mailbox = cls(path, MailboxState(), now=now)
        mailbox._commit(mailbox._state)
        return mailbox

    @classmethod
    def open(cls, path: Path | str, *, now: Callable[[], float]) -> Mailbox:
        """Resume an existing mailbox (e.g. after a crash).

        Temp files left by an interrupted write are ignored and deleted. A document edited by hand
        raises :class:`MailboxFormatError` (nothing is restored). Nothing counts as seen yet: the
        first :meth:`suspend` returns every entry.
        """
        path = Path(path)
        if not path.is_file():
            raise MailboxError(f"{path}: no mailbox to open")
        remove_stale_temps(path)
        return cls(path, load_mailbox(path), now=now)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def state(self) -> MailboxState:
        """Current state (does not mark anything as seen)."""
        return self._state

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (scenario ended)."""
        return self._state.closed

    def task(self, task_id: str) -> MailboxTask:
        """The task with this id; raises :class:`UnknownTaskError`."""
        task = self._state.task(task_id)
        if task is None:
            raise UnknownTaskError(f"no task with id {task_id!r}")
        return task

    def pending(self) -> tuple[MailboxTask, ...]:
        """Tasks that still need work (status open, acknowledged or in_progress)."""
        return tuple(t for t in self._state.tasks if t.status.needs_work)

    def unseen(self) -> tuple[MailboxEntry, ...]:
        """Entries posted since the agent's last :meth:`read` / :meth:`suspend` (not marked)."""
        return tuple(t.entry for t in self._state.tasks[self._seen :])

    def read(self) -> MailboxState:
        """The agent reads the whole mailbox: returns the state and marks every entry seen."""
        self._seen = len(self._state.tasks)
        return self._state

    def render(self) -> str:
        """The markdown document as stored."""
        return render_mailbox(self._state)

    def post(
        self,
        kind: TaskKind | str,
        title: str,
        text: str,
        *,
        entry_id: str | None = None,
        t_scn: float | None = None,
        scheduled_s: float | None = None,
    ) -> MailboxEntry:
        """System side: append an entry (durably) and wake a suspended agent.

        ``entry_id`` defaults to ``A001``/``I002``/``T003`` (kind letter + sequence number);
        ``t_scn`` defaults to ``now()``; ``scheduled_s`` is the event's scheduled time (what the
        agent is shown). Raises :class:`MailboxError` on a duplicate or invalid id or invalid
        field (empty title, non-finite time) and :class:`MailboxClosedError` after
        :meth:`close`.
        """
        self._check_open()
        try:
            kind = TaskKind(kind)
        except ValueError as exc:
            raise MailboxError(str(exc)) from exc
        if entry_id is None:
            entry_id = self._next_id(kind)
        elif not re.fullmatch(ENTRY_ID_PATTERN, entry_id):
            raise MailboxError(f"invalid entry id {entry_id!r} (pattern {ENTRY_ID_PATTERN})")
        if self._state.task(entry_id) is not None:
            raise MailboxError(f"entry id {entry_id!r} already exists")
        try:
            entry = MailboxEntry(
                id=entry_id,
                t_scn=self._now() if t_scn is None else t_scn,
                kind=kind,
                title=title,
                scheduled_s=scheduled_s,
                text=text,
            )
        except ValidationError as exc:
            raise MailboxError(f"invalid entry: {exc}") from exc
        tasks = (*self._state.tasks, MailboxTask(entry=entry))
        self._commit(self._state.model_copy(update={"tasks": tasks}))
        self._wake_agent()
        return entry

    def update_task(
        self,
        task_id: str,
        status: TaskStatus | str | None = None,
        note: str | None = None,
        *,
        note_kind: NoteKind | str = NoteKind.NOTE,
    ) -> MailboxTask:
        """Agent side: change the status of a task and/or add a note (stamped with ``now()``).

        Only agent-owned fields change; the system-written entry cannot be touched. Raises
        :class:`UnknownTaskError`, :class:`InvalidTransitionError` (see ``ALLOWED_TRANSITIONS``),
        :class:`MailboxClosedError`, or :class:`MailboxError` if neither a status nor a non-empty
        note is given.
        """
        self._check_open()
        task = self.task(task_id)
        try:
            new_status = task.status if status is None else TaskStatus(status)
            kind = NoteKind(note_kind)
        except ValueError as exc:
            raise MailboxError(str(exc)) from exc
        if status is None and note is None:
            raise MailboxError("update_task needs a status or a note")
        if note is not None and not note.strip():
            raise MailboxError("note must not be empty")
        if new_status != task.status and new_status not in ALLOWED_TRANSITIONS[task.status]:
            raise InvalidTransitionError(
                f"task {task_id}: {task.status.value} -> {new_status.value} is not allowed"
            )
        try:
            record = TaskNote(t_scn=self._now(), status=new_status, kind=kind, text=note or "")
        except ValidationError as exc:
            raise MailboxError(f"invalid note: {exc}") from exc
        updated = task.model_copy(update={"status": new_status, "notes": (*task.notes, record)})
        tasks = tuple(updated if t.id == task_id else t for t in self._state.tasks)
        self._commit(self._state.model_copy(update={"tasks": tasks}))
        return updated

    def close(self) -> None:
        """Scenario end: persist ``closed`` and wake a suspended agent. Idempotent."""
        if self._state.closed:
            return
        self._commit(self._state.model_copy(update={"closed": True, "closed_t_scn": self._now()}))
        self._wake_agent()

    async def suspend(self, timeout: float | None = None) -> Wakeup:  # noqa: ASYNC109
        # ``timeout`` is part of the agent tool's contract: expiry is a result, not an error.
        """Agent side: wait until something is new, then return it (and mark it seen).

        Returns immediately if entries were posted since the last read/suspend or the mailbox is
        closed; otherwise blocks until the next :meth:`post`, :meth:`close`, or ``timeout`` wall
        seconds. ``Wakeup.closed`` tells the scenario has ended; ``Wakeup.timed_out`` that the
        timeout expired with nothing new. Cancelling a suspend loses nothing.
        """
        if self._waiting:
            raise MailboxError("suspend() is already waiting (one agent session per mailbox)")
        if self._seen < len(self._state.tasks) or self._state.closed:
            await anyio.lowlevel.checkpoint()
        else:
            if self._wake is None:
                self._wake = anyio.Event()
            wake = self._wake
            self._waiting = True
            try:
                with anyio.move_on_after(timeout):
                    await wake.wait()
            finally:
                self._waiting = False
        entries = self.unseen()
        self._seen = len(self._state.tasks)
        closed = self._state.closed
        return Wakeup(entries=entries, closed=closed, timed_out=not entries and not closed)

    def _check_open(self) -> None:
        if self._state.closed:
            raise MailboxClosedError("the scenario has ended; the mailbox is closed")

    def _next_id(self, kind: TaskKind) -> str:
        n = len(self._state.tasks) + 1
        while self._state.task(candidate := f"{_ID_PREFIX[kind]}{n:03d}") is not None:
            n += 1
        return candidate

    def _commit(self, state: MailboxState) -> None:
        write_atomic(self._path, render_mailbox(state))
        self._state = state  # the file now holds `state`, even if the directory fsync fails
        fsync_dir(self._path.parent)

    def _wake_agent(self) -> None:
        if self._wake is not None:
            self._wake.set()
            self._wake = None
