"""TiDB's part of building a dirty snapshot: scenario settings as global variables
(:class:`~dbaops.dbms.interface.DatabaseEngine`'s preparation hooks)."""

from __future__ import annotations

import re

from dbaops.dbms.tidb.endpoint import TidbEndpoint, quote_literal


async def apply_server_settings(admin: TidbEndpoint, settings: dict[str, str]) -> None:
    """SET GLOBAL for each setting (TiDB persists them in its store: no restart)."""
    conn = await admin.harness_connect(admin=True)
    try:
        for name, value in settings.items():
            await conn.execute(f"SET GLOBAL {name} = {_global_value(value)}")
    finally:
        await conn.close()


def _global_value(value: str) -> str:
    """A setting's value in SET GLOBAL: numbers and ON/OFF bare, anything else quoted."""
    if re.fullmatch(r"-?\d+(\.\d+)?|(?i:on|off|true|false)", value):
        return value
    return quote_literal(value)
