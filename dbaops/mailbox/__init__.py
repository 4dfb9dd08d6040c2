"""Durable markdown mailbox for persistent runs (paper §3.3.3).

The harness posts alerts, inspection tasks and tickets to ``mailbox.md``; the agent updates task
status and notes through :meth:`Mailbox.update_task` and calls :meth:`Mailbox.suspend` when no
task needs work. Every write is atomic; :func:`parse_mailbox` is the exact inverse of
:func:`render_mailbox` and rejects hand-edited documents.
"""

from dbaops.mailbox.errors import (
    InvalidTransitionError,
    MailboxClosedError,
    MailboxError,
    MailboxFormatError,
    UnknownTaskError,
)
from dbaops.mailbox.mailbox import Mailbox, load_mailbox
from dbaops.mailbox.markdown import FORMAT_VERSION, parse_mailbox, render_mailbox
from dbaops.mailbox.models import (
    ALLOWED_TRANSITIONS,
    MailboxEntry,
    MailboxState,
    MailboxTask,
    NoteKind,
    TaskKind,
    TaskNote,
    TaskStatus,
    Wakeup,
)

__all__ = [
    "ALLOWED_TRANSITIONS",
    "FORMAT_VERSION",
    "InvalidTransitionError",
    "Mailbox",
    "MailboxClosedError",
    "MailboxEntry",
    "MailboxError",
    "MailboxFormatError",
    "MailboxState",
    "MailboxTask",
    "NoteKind",
    "TaskKind",
    "TaskNote",
    "TaskStatus",
    "UnknownTaskError",
    "Wakeup",
    "load_mailbox",
    "parse_mailbox",
    "render_mailbox",
]
