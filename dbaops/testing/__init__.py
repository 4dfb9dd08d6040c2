"""Test helpers shipped with dbaops (no external services)."""

from dbaops.testing.openai_server import (
    OpenAITestServer,
    ReceivedRequest,
    ScriptedResponse,
    ScriptedToolCall,
    dead_base_url,
)

__all__ = [
    "OpenAITestServer",
    "ReceivedRequest",
    "ScriptedResponse",
    "ScriptedToolCall",
    "dead_base_url",
]
