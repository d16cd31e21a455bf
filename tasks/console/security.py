"""Who is asking, whether a form is ours, and an access log that carries no payload.

* Authenticated means: an ``Authorization: Basic`` header with the configured user and
  password, an ``Authorization: Bearer`` header with the configured token, or a session
  signed in through the sign-in form (a signed, HttpOnly, SameSite=Lax cookie). With no
  credentials configured the console runs only on loopback (config.py) and every
  request counts as the operator's.
* Every POST carries the session's CSRF token in a hidden field and is refused
  without it, whatever authenticated it: browsers send basic credentials and cookies
  on a cross-site POST by themselves, so only a value a foreign page cannot read
  proves the form came from a console page.
* The access log names method, path, status and time — never the query string (a
  business key is a filter there) nor a body.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import secrets
import time
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dormant.tasks.console.config import ConsoleConfig

__all__ = ["AccessLog", "authenticated", "csrf_ok", "csrf_token", "sign_in"]

log = logging.getLogger("dormant.console.access")


def _same(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def _header_identity(config: ConsoleConfig, header: str) -> bool:
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return _same(value.strip(), config.token)
    if scheme == "basic" and config.user is not None:
        try:
            user, sep, password = base64.b64decode(value.strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        # Both compared, always: no early exit telling a right user from a wrong one.
        ok_user = _same(user, config.user)
        ok_password = _same(password, config.password)
        return bool(sep) and ok_user and ok_password
    return False


def authenticated(request: Request) -> bool:
    config: ConsoleConfig = request.app.state.config
    if config.open_access:
        return True
    header = request.headers.get("authorization")
    if header and _header_identity(config, header):
        return True
    return bool(request.session.get("user"))


def sign_in(config: ConsoleConfig, user: str, password: str) -> bool:
    """The sign-in form's check: the configured user and password, or the token as
    the password of any user (one place to rotate)."""
    ok_user = _same(user, config.user)
    ok_password = _same(password, config.password)
    return (ok_user and ok_password) or _same(password, config.token)


def csrf_token(request: Request) -> str:
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


def csrf_ok(request: Request, form: Any) -> bool:
    given = form.get("csrf")
    expected = request.session.get("csrf")
    return isinstance(given, str) and isinstance(expected, str) and _same(given, expected)


class AccessLog:
    """One INFO line per request: method, path, status, milliseconds (no query, no body)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            log.info(
                "%s %s %d %.1fms",
                scope["method"],
                scope["path"],  # the full path: the ASGI server puts root_path in it
                status,
                (time.perf_counter() - started) * 1000,
            )
