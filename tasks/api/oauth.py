"""The OAuth client-credentials token endpoint (``POST /oauth/token``) the Camunda
clients' OAuth mode posts to (``CAMUNDA_AUTH_STRATEGY=OAUTH``, ``CAMUNDA_OAUTH_URL``):
the one client of ``DORMANT_CONSOLE_OAUTH_CLIENT`` gets a bearer token
(tasks/console/tokens.py) that the API's guard takes as an operator's.

RFC 6749 section 4.4: a form with ``grant_type=client_credentials`` and the client's
id and secret in the form or as HTTP Basic; the answer ``access_token``,
``token_type``, ``expires_in``; refusals are its JSON errors (``invalid_client`` 401,
``unsupported_grant_type`` / ``invalid_request`` 400). A wrong secret counts against
the sign-in throttle, as a wrong password does. ``audience`` and ``scope`` are
accepted and ignored (one audience: this API).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dormant.persistence import clock
from dormant.tasks.console.config import ENV_OAUTH_CLIENT, ConsoleConfig
from dormant.tasks.console.security import client_of, host_refusal, request_headers
from dormant.tasks.console.throttle import SignInThrottle
from dormant.tasks.console.tokens import TOKEN_SECONDS, issue

__all__ = ["PATH", "oauth_app"]

# Where the app is mounted, by ``dormant api`` and ``dormant console`` alike.
PATH = "/oauth"
# A token request is a few hundred bytes; a bigger body is not read.
_MAX_FORM_BYTES = 16 * 1024


def _error(status: int, code: str, description: str) -> Response:
    return JSONResponse(
        {"error": code, "error_description": description},
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )


def _same(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def _client(request: Request, form: dict[str, str]) -> tuple[str, str]:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(value.strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return "", ""
        return user, password
    return form.get("client_id", ""), form.get("client_secret", "")


async def token(request: Request) -> Response:
    config: ConsoleConfig = request.app.state.config
    throttle: SignInThrottle = request.app.state.throttle
    refused = host_refusal(config, request_headers(request.scope))
    if refused is not None:
        return _error(refused.status, "invalid_request", refused.detail)
    if config.oauth_client_id is None:
        return _error(
            404, "invalid_request", f"no OAuth client is configured (set {ENV_OAUTH_CLIENT})"
        )
    length = request.headers.get("content-length", "")
    if not length.isdigit() or int(length) > _MAX_FORM_BYTES:
        return _error(
            400,
            "invalid_request",
            f"a token request has a Content-Length of at most {_MAX_FORM_BYTES} bytes",
        )
    address = client_of(request.scope)
    wait = throttle.refused_for(address)
    if wait > 0:
        return _error(429, "invalid_request", "too many failed sign-ins; try again later")
    form = {k: str(v) for k, v in (await request.form()).items()}
    if form.get("grant_type") != "client_credentials":
        return _error(
            400,
            "unsupported_grant_type",
            f"grant_type must be client_credentials, got {form.get('grant_type', '')[:40]!r}",
        )
    client_id, secret = _client(request, form)
    ok_id = _same(client_id, config.oauth_client_id)
    ok_secret = _same(secret, config.oauth_client_secret)
    if not (ok_id and ok_secret):
        await asyncio.sleep(throttle.failed(address))
        return _error(401, "invalid_client", "wrong client id or secret")
    throttle.succeeded(address)
    return JSONResponse(
        {
            "access_token": issue(config, clock.now().timestamp()),
            "token_type": "Bearer",
            "expires_in": TOKEN_SECONDS,
        },
        headers={"Cache-Control": "no-store"},
    )


def oauth_app(config: ConsoleConfig, throttle: SignInThrottle) -> Starlette:
    app = Starlette(routes=[Route("/token", token, methods=["POST"])])
    app.state.config = config
    app.state.throttle = throttle
    return app
