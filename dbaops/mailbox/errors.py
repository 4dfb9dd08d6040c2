"""Exceptions raised by the mailbox."""

from __future__ import annotations


class MailboxError(Exception):
    """Base class: an operation on the mailbox is not allowed or failed."""


class UnknownTaskError(MailboxError):
    """No task with the given id exists."""


class InvalidTransitionError(MailboxError):
    """The requested status change is not allowed (see ``ALLOWED_TRANSITIONS``)."""


class MailboxClosedError(MailboxError):
    """The scenario has ended: the mailbox accepts no more writes."""


class MailboxFormatError(MailboxError):
    """``mailbox.md`` does not parse, or differs from its canonical rendering (edited by hand)."""
