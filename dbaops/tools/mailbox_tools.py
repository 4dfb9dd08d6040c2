"""Mailbox and report tools: read_mailbox, update_task, suspend, submit_report."""

from __future__ import annotations

from typing import Any

from dbaops.mailbox import Mailbox, MailboxEntry, MailboxError
from dbaops.mailbox.markdown import render_mailbox_view, shown_time
from dbaops.tools.base import Tool, ToolResult, ToolSpec


def _entries_text(entries: tuple[MailboxEntry, ...] | list[MailboxEntry]) -> str:
    return "\n\n".join(
        f"[{e.id}] {e.kind.value} at {shown_time(e)}: {e.title}\n{e.text}".rstrip() for e in entries
    )


def mailbox_tools(mailbox: Mailbox, suspend_timeout_s: float | None = None) -> list[Tool]:
    """Tools over the run's durable mailbox (the only way an agent learns of new tasks)."""

    async def read_mailbox(args: dict[str, Any]) -> ToolResult:
        state = mailbox.read()
        pending = [t for t in state.tasks if t.status.needs_work]
        head = f"{len(state.tasks)} task(s), {len(pending)} needing work" + (
            "; the scenario has ended" if state.closed else ""
        )
        return ToolResult(ok=True, observation=head + "\n\n" + render_mailbox_view(state))

    async def update_task(args: dict[str, Any]) -> ToolResult:
        try:
            task = mailbox.update_task(
                str(args.get("id", "")),
                args.get("status"),
                args.get("note"),
                note_kind=args.get("note_kind") or "note",
            )
        except MailboxError as exc:
            return ToolResult(ok=False, error=str(exc), observation=f"error: {exc}")
        return ToolResult(ok=True, observation=f"task {task.id}: status {task.status.value}")

    async def suspend(args: dict[str, Any]) -> ToolResult:
        wake = await mailbox.suspend(timeout=suspend_timeout_s)
        if wake.entries:
            text = "New in the mailbox:\n\n" + _entries_text(wake.entries)
        elif wake.closed:
            text = "The scenario has ended; no further tasks will arrive."
        else:
            text = "Nothing new yet."
        if wake.closed and wake.entries:
            text += "\n\nThe scenario has ended."
        return ToolResult(
            ok=True,
            observation=text,
            detail={"woke_for": [e.id for e in wake.entries], "closed": wake.closed},
        )

    async def submit_report(args: dict[str, Any]) -> ToolResult:
        return ToolResult(
            ok=True,
            observation="report recorded",
            detail={"report": {k: v for k, v in args.items() if v is not None}},
        )

    status_enum = ["acknowledged", "in_progress", "resolved", "escalated"]
    return [
        Tool(
            spec=ToolSpec(
                name="read_mailbox",
                description=(
                    "Read the mailbox: alerts, tickets and inspections with status and notes."
                ),
            ),
            handler=read_mailbox,
        ),
        Tool(
            spec=ToolSpec(
                name="update_task",
                description="Record progress on a mailbox task: a status and/or a note "
                "(note_kind: note | action | verification).",
                parameters={
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "status": {"type": "string", "enum": status_enum},
                        "note": {"type": "string"},
                        "note_kind": {"type": "string", "enum": ["note", "action", "verification"]},
                    },
                    "required": ["id"],
                },
            ),
            handler=update_task,
        ),
        Tool(
            spec=ToolSpec(
                name="suspend",
                description=(
                    "Wait until something new arrives in the mailbox (or the scenario ends); "
                    "then returns what is new. Use it when no task needs work."
                ),
            ),
            handler=suspend,
        ),
        Tool(
            spec=ToolSpec(
                name="submit_report",
                description="Submit your structured report for a task (or the run).",
                parameters={
                    "type": "object",
                    "properties": {
                        "task_id": {"type": "string"},
                        "summary": {"type": "string"},
                        "root_cause": {"type": "string"},
                        "actions": {"type": "string"},
                        "verification": {"type": "string"},
                    },
                    "required": ["summary"],
                },
            ),
            handler=submit_report,
        ),
    ]
