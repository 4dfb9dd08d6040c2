"""Data model of the mailbox: system-written entries and agent-owned task state.

All models are frozen: objects handed out by :class:`~dbaops.mailbox.Mailbox` cannot be used to
change its state. The only way to change agent-owned fields is ``Mailbox.update_task``.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ENTRY_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class TaskKind(StrEnum):
    """What the system posted."""

    ALERT = "alert"
    INSPECTION = "inspection"
    TICKET = "ticket"


class TaskStatus(StrEnum):
    """Agent-owned status of a task; every task starts ``open``."""

    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    IN_PROGRESS = "in_progress"
    RESOLVED = "resolved"
    ESCALATED = "escalated"

    @property
    def needs_work(self) -> bool:
        """True while the agent still owes work on the task (not resolved or escalated)."""
        return self not in (TaskStatus.RESOLVED, TaskStatus.ESCALATED)


ALLOWED_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.OPEN: frozenset(
        {
            TaskStatus.ACKNOWLEDGED,
            TaskStatus.IN_PROGRESS,
            TaskStatus.RESOLVED,
            TaskStatus.ESCALATED,
        }
    ),
    TaskStatus.ACKNOWLEDGED: frozenset(
        {TaskStatus.IN_PROGRESS, TaskStatus.RESOLVED, TaskStatus.ESCALATED}
    ),
    TaskStatus.IN_PROGRESS: frozenset({TaskStatus.RESOLVED, TaskStatus.ESCALATED}),
    TaskStatus.ESCALATED: frozenset({TaskStatus.IN_PROGRESS, TaskStatus.RESOLVED}),
    TaskStatus.RESOLVED: frozenset({TaskStatus.IN_PROGRESS}),
}
"""Status changes the agent may make (keeping the current status is always allowed).
Nothing goes back to ``open``; a resolved task can be reopened as ``in_progress``."""


class NoteKind(StrEnum):
    """What a note records."""

    NOTE = "note"
    ACTION = "action"
    VERIFICATION = "verification"


def _encodable(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("text must be encodable as UTF-8 (no lone surrogates)") from exc
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class MailboxEntry(_Frozen):
    """A system-written alert, inspection task or ticket. Immutable once posted."""

    id: str = Field(pattern=ENTRY_ID_PATTERN)
    t_scn: float
    kind: TaskKind
    title: str = Field(min_length=1)
    text: str
    scheduled_s: float | None = Field(
        default=None, description="the event's scheduled scenario time (what the agent is shown)"
    )

    _check_text = field_validator("title", "text")(_encodable)


class TaskNote(_Frozen):
    """One agent update of a task: when, the status after it, and what was done or checked."""

    t_scn: float
    status: TaskStatus
    kind: NoteKind = NoteKind.NOTE
    text: str = ""

    _check_text = field_validator("text")(_encodable)


class MailboxTask(_Frozen):
    """An entry together with its agent-owned state."""

    entry: MailboxEntry
    status: TaskStatus = TaskStatus.OPEN
    notes: tuple[TaskNote, ...] = ()

    @property
    def id(self) -> str:
        return self.entry.id


class MailboxState(_Frozen):
    """The whole document: tasks in posting order and whether the scenario has ended."""

    tasks: tuple[MailboxTask, ...] = ()
    closed: bool = False
    closed_t_scn: float | None = None

    @model_validator(mode="after")
    def _unique_ids(self) -> MailboxState:
        ids = [task.id for task in self.tasks]
        if len(set(ids)) != len(ids):
            raise ValueError("task ids must be unique")
        return self

    def task(self, task_id: str) -> MailboxTask | None:
        """The task with this id, or None."""
        for task in self.tasks:
            if task.id == task_id:
                return task
        return None


class Wakeup(_Frozen):
    """Result of ``Mailbox.suspend``: what is new, and why the wait ended."""

    entries: tuple[MailboxEntry, ...] = ()
    closed: bool = False
    """The scenario has ended; no more entries will arrive."""
    timed_out: bool = False
    """The timeout expired with nothing new and the mailbox still open."""
