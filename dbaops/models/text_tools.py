"""Tool calling for servers without native tool support (``supports_tools = false``).

The tool catalog goes into the system prompt and the model is asked to answer a tool call as a
JSON object inside ``<tool_call>`` tags (the Hermes/Qwen convention), one block per call::

    <tool_call>
    {"name": "run_sql", "arguments": {"sql": "SELECT 1"}}
    </tool_call>

The parser also accepts the same object in a fenced block labelled ``tool_call`` or ``json``, a
``<tool_call>`` block left unclosed at the end of the message, ``"parameters"`` instead of
``"arguments"`` and arguments given as a JSON string, and a message that is nothing but such an
object. Text outside the blocks becomes the completion's content.

History in the native format (assistant ``tool_calls`` and ``role: tool`` results) is rewritten
for these servers: assistant tool calls become the same blocks in the assistant text, and tool
results become user messages wrapped in ``<tool_response name=... id=...>`` tags. Agents keep
one history format whichever mode the model uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dbaops.record.kinds import ToolCall

_BLOCK_RE = re.compile(
    r"<tool_call>\s*(?P<tag>.*?)\s*(?:</tool_call>|\Z)"
    r"|```(?:tool_call|json)[ \t]*\n(?P<fence>.*?)\n?```",
    re.DOTALL,
)


def normalize_tools(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    """Tools as OpenAI ``{"type": "function", "function": {...}}`` dicts. Accepts that form,
    bare ``{"name", "description", "parameters"}`` dicts and objects with those attributes
    (e.g. ``dbaops.tools.base.ToolSpec``)."""
    out: list[dict[str, Any]] = []
    for t in tools or ():
        if isinstance(t, Mapping):
            if t.get("type") == "function" and isinstance(t.get("function"), Mapping):
                out.append({"type": "function", "function": dict(t["function"])})
                continue
            name, desc, params = t.get("name"), t.get("description", ""), t.get("parameters")
        else:
            name = getattr(t, "name", None)
            desc = getattr(t, "description", "")
            params = getattr(t, "parameters", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool without a name: {t!r}")
        fn: dict[str, Any] = {"name": name, "description": desc or ""}
        fn["parameters"] = (
            dict(params)
            if isinstance(params, Mapping)
            else {"type": "object", "properties": {}, "required": []}
        )
        out.append({"type": "function", "function": fn})
    return out


def render_call(name: str, arguments: Any) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def catalog_prompt(tools: list[dict[str, Any]], tool_choice: Any = None) -> str:
    """System-prompt text describing the tools and the call format."""
    lines = [
        "# Tools",
        "",
        "You can call the tools below. To call a tool, reply with a JSON object inside "
        "<tool_call></tool_call> tags, exactly like this (one block per call):",
        "",
        render_call("<tool name>", {"<argument>": "<value>"}),
        "",
        "The arguments must be a JSON object matching the tool's JSON Schema parameters. "
        "Tool results come back in <tool_response> tags. If no tool is needed, answer in "
        "plain text without a <tool_call> block.",
        "",
        "Available tools:",
    ]
    for t in tools:
        fn = t["function"]
        lines.append(f"- {fn['name']}: {fn.get('description', '')}".rstrip())
        lines.append(f"  parameters: {json.dumps(fn.get('parameters', {}), ensure_ascii=False)}")
    if tool_choice == "required":
        lines += ["", "You must call at least one tool in this reply."]
    elif tool_choice == "none":
        lines += ["", "Do not call any tool in this reply; answer in plain text."]
    elif isinstance(tool_choice, Mapping):
        forced = (tool_choice.get("function") or {}).get("name")
        if forced:
            lines += ["", f"You must call the tool {forced} in this reply."]
    return "\n".join(lines)


def _append_text(content: Any, text: str) -> Any:
    if content is None or content == "":
        return text
    if isinstance(content, str):
        return f"{content}\n\n{text}"
    if isinstance(content, list):
        return [*content, {"type": "text", "text": text}]
    return f"{content}\n\n{text}"


def to_text_mode_messages(
    messages: Sequence[Mapping[str, Any]],
    tools: list[dict[str, Any]],
    tool_choice: Any = None,
) -> list[dict[str, Any]]:
    """Rewrite a native-format history for a server without tool support."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            blocks = []
            for tc in m["tool_calls"]:
                fn = tc.get("function") or {}
                names[str(tc.get("id"))] = str(fn.get("name", ""))
                raw = fn.get("arguments", "{}")
                try:
                    args: Any = json.loads(raw) if isinstance(raw, str) else raw
                except json.JSONDecodeError:
                    args = raw
                blocks.append(render_call(str(fn.get("name", "")), args))
            text = "\n".join(blocks)
            content = m.get("content")
            out.append({"role": "assistant", "content": f"{content}\n{text}" if content else text})
        elif role == "tool":
            call_id = str(m.get("tool_call_id", ""))
            name = names.get(call_id, m.get("name", ""))
            body = m.get("content", "")
            if isinstance(body, list):
                body = "\n".join(str(p.get("text", "")) for p in body if isinstance(p, Mapping))
            out.append(
                {
                    "role": "user",
                    "content": f'<tool_response name="{name}" id="{call_id}">\n{body}\n'
                    "</tool_response>",
                }
            )
        else:
            out.append(dict(m))
    if tools:
        prompt = catalog_prompt(tools, tool_choice)
        for m in out:
            if m.get("role") == "system":
                m["content"] = _append_text(m.get("content"), prompt)
                break
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def _loads_object(text: str) -> dict[str, Any]:
    text = text.strip()
    if text.startswith("```"):
        text = re.sub(r"^```[A-Za-z_]*\s*|\s*```$", "", text)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        start = text.find("{")
        if start < 0:
            raise
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    if not isinstance(obj, dict):
        raise ValueError("tool call is not a JSON object")
    return obj


def _to_call(obj: dict[str, Any], call_id: str) -> ToolCall:
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError('tool call without a "name"')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        raw = args
        try:
            parsed = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return ToolCall(id=call_id, name=name, raw_arguments=raw, parse_error=str(e))
    else:
        raw = json.dumps(args, ensure_ascii=False)
        parsed = args
    if not isinstance(parsed, dict):
        return ToolCall(
            id=call_id, name=name, raw_arguments=raw, parse_error="arguments not a JSON object"
        )
    return ToolCall(id=call_id, name=name, arguments=parsed, raw_arguments=raw)


def parse_text_tool_calls(
    text: str | None, id_prefix: str
) -> tuple[str | None, list[ToolCall], list[str]]:
    """Split model text into (content outside tool blocks, tool calls, parse errors)."""
    if not text:
        return text, [], []
    calls: list[ToolCall] = []
    errors: list[str] = []
    rest: list[str] = []
    pos = 0
    for m in _BLOCK_RE.finditer(text):
        body = m.group("tag") if m.group("tag") is not None else m.group("fence")
        try:
            obj = _loads_object(body)
            if m.group("fence") is not None and "name" not in obj:
                continue  # a plain JSON code block, not a tool call
            calls.append(_to_call(obj, f"{id_prefix}{len(calls)}"))
        except ValueError as e:  # JSONDecodeError is a ValueError
            errors.append(f"unparsable tool call block: {e}")
            continue
        rest.append(text[pos : m.start()])
        pos = m.end()
    rest.append(text[pos:])
    if not calls and not errors:
        stripped = text.strip()
        if stripped.startswith("{") and stripped.endswith("}"):
            try:
                whole: Any = json.loads(stripped)
            except json.JSONDecodeError:
                whole = None
            if isinstance(whole, dict) and isinstance(whole.get("name"), str):
                try:
                    return None, [_to_call(whole, f"{id_prefix}0")], []
                except ValueError:
                    pass
    content = "".join(rest).strip() or None
    return content, calls, errors
