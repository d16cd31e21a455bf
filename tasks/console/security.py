"""Who is asking, whether a form is ours, and an access log that carries no payload.

* Only our own hosts are answered: a ``Host`` (or an ``Origin``) that is not a loopback
  name, the bound address or one of ``DORMANT_CONSOLE_HOSTS`` is refused (400 / 403)
  before anything else — a page a developer visits that reaches the port by DNS
  rebinding names its own host.
* Authenticated means: an ``Authorization: Basic`` header with the configured user and
  password (or the viewer's), an ``Authorization: Bearer`` header with the configured
  token (or one the OAuth token endpoint issued: tokens.py), or a session signed in
  through the sign-in form (a signed, HttpOnly, SameSite=Lax cookie naming a session
  kept in the database that has not ended: sign-out ends it). With no credentials
  configured the console runs only on loopback (config.py) and a *direct* loopback
  request — one carrying no proxy header — counts as the operator's.
* Who asks is a ``Principal`` with roles per tenant (authorization.py decides what
  each may see and do). The single-user settings keep their meaning: the operator's
  user, the token and an open loopback console are admin of every tenant, the viewer
  reads every tenant, values included; ``DORMANT_CONSOLE_USERS`` adds users with
  roles per tenant. ``identify`` is the one place that decides who asks, for the
  console's pages and for the Camunda API (tasks/api/auth.py) alike.
* ``Guard`` decides all of that before a handler runs and before any body is read: an
  anonymous, viewer or read-only POST to an action is refused on its headers alone.
  Wrong credentials count against the sign-in throttle (throttle.py).
* Every POST carries the session's CSRF token in a hidden field and is refused
  without it, whatever authenticated it: browsers send basic credentials and cookies
  on a cross-site POST by themselves, so only a value a foreign page cannot read
  proves the form came from a console page.
* The access log names method, path, status and time — never the query string (a
  business key is a filter there) nor a body.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dormant.persistence import clock
from dormant.persistence import console_sessions as session_rows
from dormant.tasks.console.authorization import (
    OPERATOR,
    VIEWER,
    Grant,
    Principal,
    verify_password,
)
from dormant.tasks.console.config import (
    ENV_HOSTS,
    EVERY_TENANT_ADMIN,
    ConsoleConfig,
    is_loopback,
)
from dormant.tasks.console.throttle import SignInThrottle
from dormant.tasks.console.tokens import valid as valid_token

__all__ = [
    "ACTOR",
    "AUTHED",
    "OPERATOR",
    "PRINCIPAL",
    "ROLE",
    "SESSION_SECONDS",
    "USERS_ROLE",
    "VIEWER",
    "AccessLog",
    "Guard",
    "Refusal",
    "Sessions",
    "authenticated",
    "client_of",
    "csrf_ok",
    "csrf_token",
    "header_actor",
    "host_refusal",
    "identify",
    "principal_of",
    "refuse_anonymous",
    "request_headers",
    "role_of",
    "sign_in",
    "too_many",
    "user_of",
]

# The scope keys Guard writes its verdict to: anyone signed in, and their role.
AUTHED = "dormant.console.authed"
ROLE = "dormant.console.role"
# ... and who they are, with their grants per tenant (authorization.py).
PRINCIPAL = "dormant.console.principal"
# A session's role when its user is one of DORMANT_CONSOLE_USERS: the grants are read
# from the settings on every request.
USERS_ROLE = "users"
# Who the Camunda API's guard found: the audit trail's actor for the call (None: an
# anonymous loopback caller).
ACTOR = "dormant.console.actor"
SESSION_SECONDS = 12 * 3600
# Headers a proxy adds: a request carrying one is not a direct local one.
PROXY_HEADERS = (
    b"forwarded",
    b"x-forwarded-for",
    b"x-forwarded-host",
    b"x-forwarded-proto",
    b"x-real-ip",
)
# Paths reached with a POST before signing in; every other POST is an action.
_OPEN_POSTS = ("/login", "/logout")
# A sign-in or sign-out form is a few hundred bytes; a bigger body is not read.
_MAX_FORM_BYTES = 64 * 1024
# Paths served whatever the Host: a health check addresses the container by its IP.
_ANY_HOST = ("/healthz",)

log = logging.getLogger("dormant.console.access")


def _same(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def _legacy(config: ConsoleConfig, name: str, role: str) -> Principal:
    """The principal of a single-user setting (module docstring)."""
    if role == VIEWER:
        return Principal(name, (Grant(VIEWER, "*", True),))
    return Principal(name, EVERY_TENANT_ADMIN)


def _header_role(config: ConsoleConfig, header: str) -> Principal | None:
    """Who an ``Authorization`` header proves, or None for wrong credentials."""
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        given = value.strip()
        if _same(given, config.token):
            return _legacy(config, "token", OPERATOR)
        if config.oauth_client_id is not None and valid_token(
            config, given, clock.now().timestamp()
        ):
            return Principal(config.oauth_client_id, config.oauth_grants)
        return None
    if scheme == "basic" and (
        config.user is not None or config.viewer_user is not None or config.users
    ):
        try:
            user, sep, password = base64.b64decode(value.strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return sign_in(config, user, password) if sep else None
    return None


def header_actor(config: ConsoleConfig, header: str) -> str | None:
    """Who an ``Authorization`` header that ``identify`` accepted names, for the audit
    trail (docs/audit.md): the Basic user, the OAuth client id for a token the token
    endpoint issued, ``token`` for the static ``DORMANT_CONSOLE_TOKEN``; None for no
    (or an unreadable) header."""
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "basic":
        try:
            user, sep, _password = base64.b64decode(value.strip()).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return user if sep and user else None
    if scheme == "bearer":
        given = value.strip()
        if config.oauth_client_id is not None and valid_token(
            config, given, clock.now().timestamp()
        ):
            return config.oauth_client_id
        return "token" if given else None
    return None


def authenticated(request: Request) -> bool:
    """Guard's verdict for this request (see the module docstring)."""
    return bool(request.scope.get(AUTHED))


class Sessions:
    """The signed-in sessions, kept in the database (persistence/console_sessions.py):
    a cookie is only a pointer to one, so signing out ends it in every console process
    and for a copy of the cookie kept elsewhere. Blocking: called in a thread."""

    def __init__(self, engine: Engine, *, seconds: float = SESSION_SECONDS) -> None:
        self.engine = engine
        self.lifetime = timedelta(seconds=seconds)

    def start(self) -> str:
        sid = secrets.token_urlsafe(32)
        session_rows.start(self.engine, sid, clock.now(), self.lifetime)
        return sid

    def live(self, sid: object) -> bool:
        return isinstance(sid, str) and session_rows.is_live(self.engine, sid, clock.now())

    def end(self, sid: object) -> None:
        if isinstance(sid, str):
            session_rows.end(self.engine, sid)


def client_of(scope: Scope) -> str:
    """The client's address as the server saw it (after a trusted proxy's header)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _host_name(host: str) -> str:
    """A Host header's name: no port, no IPv6 brackets."""
    host = host.strip()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _direct_local(scope: Scope) -> bool:
    if not is_loopback(client_of(scope)):
        return False
    return not any(name in PROXY_HEADERS for name, _ in scope.get("headers", ()))


def too_many(seconds: float) -> Response:
    return PlainTextResponse(
        f"refused: too many failed sign-ins; try again in {max(1, round(seconds))} s",
        status_code=429,
        headers={"Retry-After": str(max(1, round(seconds)))},
    )


def refuse_anonymous() -> Response:
    return PlainTextResponse(
        "refused: actions need authentication (sign in, or send basic or bearer credentials)",
        status_code=401,
        headers={"WWW-Authenticate": 'Basic realm="dormant console"'},
    )


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused before its route runs: the console answers it as text, the
    Camunda API (tasks/api/auth.py) as a problem document."""

    status: int
    title: str
    detail: str
    headers: tuple[tuple[str, str], ...] = ()

    def as_text(self) -> Response:
        return PlainTextResponse(
            f"refused: {self.detail}", status_code=self.status, headers=dict(self.headers)
        )


_CHALLENGE = (("WWW-Authenticate", 'Basic realm="dormant"'),)


def request_headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}


def host_refusal(config: ConsoleConfig, headers: dict[str, str]) -> Refusal | None:
    """A ``Host`` or ``Origin`` that is not ours (the module docstring: DNS rebinding)."""
    if not config.host_allowed(_host_name(headers.get("host", ""))):
        return Refusal(
            400,
            "INVALID_HOST",
            f"this console does not answer for that host (see {ENV_HOSTS})",
        )
    origin = headers.get("origin")
    if origin is not None and not config.host_allowed(urlsplit(origin).hostname or ""):
        return Refusal(
            403, "FORBIDDEN", "a request from another site (its Origin is not this console)"
        )
    return None


async def identify(
    config: ConsoleConfig,
    scope: Scope,
    headers: dict[str, str],
    throttle: SignInThrottle,
    sessions: Sessions | None,
) -> Principal | Refusal | None:
    """Who asks: a ``Principal``, None (nobody in particular), or a refusal
    for wrong credentials (counted by the throttle) or a locked-out client. The one
    place both the console and the Camunda API decide it; ``sessions`` None ignores the
    sign-in cookie (API clients send headers; a cookie would let any page the browser
    visits act). An empty ``Authorization`` header is no credential (Modeler always
    sends one)."""
    role = (
        _legacy(config, "local", OPERATOR) if config.open_access and _direct_local(scope) else None
    )
    header = headers.get("authorization")
    if role is None and header and config.has_credentials:
        client = client_of(scope)
        wait = throttle.refused_for(client)
        if wait > 0:
            seconds = str(max(1, round(wait)))
            return Refusal(
                429,
                "TOO_MANY_REQUESTS",
                f"too many failed sign-ins; try again in {seconds} s",
                (("Retry-After", seconds),),
            )
        role = _header_role(config, header)
        if role is None:
            await asyncio.sleep(throttle.failed(client))
            return Refusal(401, "UNAUTHORIZED", "wrong credentials", _CHALLENGE)
        throttle.succeeded(client)
    if role is None and config.has_credentials and sessions is not None:
        session = scope.get("session", {})
        sid = session.get("sid")
        if sid is not None and await run_in_threadpool(sessions.live, sid):
            role = _session_principal(config, session)
    if role is not None and config.read_only:
        # Read-only: everyone reads what they could read, values as an actor saw them.
        role = Principal(
            role.name,
            tuple(Grant(VIEWER, g.tenant, g.values or g.role != VIEWER) for g in role.grants),
        )
    return role


def _session_principal(config: ConsoleConfig, session: Any) -> Principal:
    """A signed-in session's principal, looked up by its user in this process's
    settings rather than kept in the cookie: a grant changed or a user removed (and
    the console restarted) applies to sessions already signed in."""
    name = session.get("user")
    if session.get("role") == USERS_ROLE:
        for user in config.users:
            if user.name == name:
                return user.principal()
        return Principal(str(name), ())  # removed since: reads and does nothing
    # Sessions started before roles existed were all an operator's.
    role = VIEWER if session.get("role") == VIEWER else OPERATOR
    return _legacy(config, str(name or "token"), role)


def role_of(scope: Scope) -> str | None:
    """The highest role the guard found for this request, or None."""
    role = scope.get(ROLE)
    return role if isinstance(role, str) else None


def principal_of(scope: Scope) -> Principal | None:
    """Who the guard found asking (``identify``), or None for nobody in particular."""
    found = scope.get(PRINCIPAL)
    return found if isinstance(found, Principal) else None


class Guard:
    """Host, Origin and identity, decided before the route runs and before a body is
    read. Sits inside the session middleware (it reads the session) and writes its
    verdict to ``scope[AUTHED]`` and ``scope[ROLE]``; redirects the app or the router
    make leave it relative, never naming the request's host. Paths under one of
    ``elsewhere`` belong to an app mounted there with a guard of its own (the Camunda
    API's, tasks/api/auth.py) and are passed through untouched."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        config: ConsoleConfig,
        sessions: Sessions,
        throttle: SignInThrottle,
        elsewhere: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.config = config
        self.sessions = sessions
        self.throttle = throttle
        self.elsewhere = elsewhere

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _path(scope).startswith(self.elsewhere):
            await self.app(scope, receive, send)
            return
        refused = await self._refusal(scope)
        if refused is not None:
            await refused(scope, receive, send)
            return

        async def relative(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    (k, _relative(v) if k.lower() == b"location" else v)
                    for k, v in message.get("headers", [])
                ]
            await send(message)

        await self.app(scope, receive, relative)

    async def _refusal(self, scope: Scope) -> Response | None:
        config = self.config
        headers = request_headers(scope)
        path = _path(scope)
        if path not in _ANY_HOST:
            refused = host_refusal(config, headers)
            if refused is not None:
                return refused.as_text()
        found = await identify(config, scope, headers, self.throttle, self.sessions)
        if isinstance(found, Refusal):
            if found.status == 401:
                return PlainTextResponse(
                    "refused: wrong credentials",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Basic realm="dormant console"'},
                )
            return found.as_text()
        scope[AUTHED] = found is not None
        scope[ROLE] = found.role if found is not None else None
        scope[PRINCIPAL] = found
        if scope["method"] == "POST":
            if path in _OPEN_POSTS:
                length = headers.get("content-length", "")
                if not length.isdigit() or int(length) > _MAX_FORM_BYTES:
                    return PlainTextResponse(
                        f"refused: a sign-in form has a Content-Length of at most "
                        f"{_MAX_FORM_BYTES} bytes",
                        status_code=413,
                    )
            elif config.read_only:
                return PlainTextResponse("refused: this console runs read-only", status_code=403)
            elif found is None:
                return refuse_anonymous()
            elif found.role == VIEWER:
                return PlainTextResponse(
                    "refused: a viewer may only read; actions need an operator's credentials",
                    status_code=403,
                )
        return None


def _path(scope: Scope) -> str:
    """The path below the app's root (a proxy's prefix removed)."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    return path


def _relative(location: bytes) -> bytes:
    """``http://any.host/x?y`` → ``/x?y``: a redirect never names a host the request
    chose."""
    parts = urlsplit(location.decode("latin-1"))
    if not parts.scheme and not parts.netloc:
        return location
    return (parts.path or "/").encode("latin-1") + (
        b"?" + parts.query.encode() if parts.query else b""
    )


def sign_in(config: ConsoleConfig, user: str, password: str) -> Principal | None:
    """Who a user and password sign in as (the sign-in form's and Basic's check): the
    configured operator, the viewer, a user of ``DORMANT_CONSOLE_USERS``, or the token
    as the password of any user (one place to rotate); None when they match nothing.
    Every single-user pair is compared, always: no early exit telling a right user from
    a wrong one."""
    operator = _same(user, config.user) & _same(password, config.password)
    viewer = _same(user, config.viewer_user) & _same(password, config.viewer_password)
    by_token = _same(password, config.token)
    if operator or by_token:
        return _legacy(config, user or "token", OPERATOR)
    if viewer:
        return _legacy(config, user, VIEWER)
    for known in config.users:
        if _same(user, known.name):
            return known.principal() if verify_password(known.password_hash, password) else None
    if config.users:
        # An unknown name costs what a wrong password does: no telling names apart.
        verify_password(config.users[0].password_hash, "\0" + password)
    return None


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


def user_of(request: Request) -> str | None:
    """Who acts, as the tasklist and the audit trail name them; None when nobody is
    signed in."""
    if not authenticated(request):
        return None
    found = principal_of(request.scope)
    if found is not None and found.name not in ("token", "local"):
        return found.name
    session_user = request.session.get("user")
    if isinstance(session_user, str) and session_user:
        return session_user
    config: ConsoleConfig = request.app.state.config
    named = header_actor(config, request.headers.get("authorization", ""))
    if named is not None:
        return named
    return "local" if config.open_access else None
