"""Bearer tokens for OAuth client credentials: what the Camunda clients' OAuth mode
asks a token URL for (docs/camunda-api.md, "Authentication").

A token is ``dormant1.<payload>.<signature>``: the payload names the client and the
expiry, the signature is an HMAC-SHA256 keyed by ``DORMANT_CONSOLE_SECRET`` and the
client's secret. Nothing is stored: every process sharing the secret accepts it until
it expires, and changing either secret (the client's rotated, or the console's) ends
every token issued before. A token proves an operator, as the static token does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json

from dormant.tasks.console.config import ConsoleConfig

__all__ = ["PREFIX", "TOKEN_SECONDS", "issue", "valid"]

PREFIX = "dormant1"
TOKEN_SECONDS = 3600


def _key(config: ConsoleConfig) -> bytes:
    assert config.oauth_client_secret is not None
    return hashlib.sha256(f"{config.secret}\0{config.oauth_client_secret}".encode()).digest()


def _sign(config: ConsoleConfig, payload: str) -> str:
    mac = hmac.new(_key(config), f"{PREFIX}.{payload}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def issue(config: ConsoleConfig, now: float) -> str:
    """A token for the configured client, valid ``TOKEN_SECONDS`` from ``now``."""
    body = json.dumps({"sub": config.oauth_client_id, "exp": int(now) + TOKEN_SECONDS})
    payload = base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")
    return f"{PREFIX}.{payload}.{_sign(config, payload)}"


def valid(config: ConsoleConfig, token: str, now: float) -> bool:
    """Whether ``token`` was issued for the configured client and has not expired."""
    if config.oauth_client_id is None or config.oauth_client_secret is None:
        return False
    prefix, _, rest = token.partition(".")
    payload, _, signature = rest.partition(".")
    if prefix != PREFIX or not payload or not signature:
        return False
    if not hmac.compare_digest(signature.encode(), _sign(config, payload).encode()):
        return False
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return False
    return (
        isinstance(claims, dict)
        and claims.get("sub") == config.oauth_client_id
        and isinstance(claims.get("exp"), int)
        and now < claims["exp"]
    )
