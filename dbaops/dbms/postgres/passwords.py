"""Every role of a server dbaops runs has a generated password; nothing logs in on ``trust``.

With ``trust`` on loopback, anyone who reaches the server's socket or port (the server's own
OS user, through a program the server runs) is whichever role they name, the superuser
included. So dbaops' servers authenticate every connection with SCRAM-SHA-256, and every role
the harness creates gets a password derived from a secret of the dbaops home
(``<DBAOPS_HOME>/.cluster-key``, root's, mode 0600, outside every server's private view):
the same in every run that restores a snapshot of that home, written nowhere else. The
harness sends the server only SCRAM verifiers, never a password, so no statement text, log
line or ``pg_stat_activity`` row carries one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

import asyncpg

#: PostgreSQL's default SCRAM iteration count.
SCRAM_ITERATIONS = 4096


def role_password(secret: str, role: str) -> str:
    """The password of ``role`` under ``secret``."""
    digest = hmac.new(secret.encode(), f"role:{role}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def scram_verifier(password: str, salt: bytes | None = None) -> str:
    """The ``SCRAM-SHA-256$…`` verifier PostgreSQL stores for ``password`` (RFC 5802/7677);
    ``ALTER ROLE … PASSWORD '<verifier>'`` stores it as is."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${SCRAM_ITERATIONS}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


async def give_passwords(
    conn: asyncpg.Connection, secret: str | None, roles: list[str], *, shared: str | None = None
) -> None:
    """Give each login role of ``roles`` its password (as a verifier), on a superuser's
    harness session: derived from ``secret``, or ``shared`` by all (a user's own server,
    whose DSN gives the one password dbaops knows)."""
    for role in roles:
        password = role_password(secret, role) if secret is not None else shared
        if password is None:
            raise ValueError("give_passwords needs a secret or a shared password")
        verifier = scram_verifier(password).replace("'", "''")
        ident = '"' + role.replace('"', '""') + '"'
        await conn.execute(f"ALTER ROLE {ident} PASSWORD '{verifier}'")
