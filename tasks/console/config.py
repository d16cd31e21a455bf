"""The console's settings, read once at start-up and refused early when unsafe.

The one refusal that matters: a console that can act (not ``--read-only``) with no
credentials would let anyone who reaches the port retry, resolve, drop and cancel.
That is allowed only on a loopback address, where "anyone" is this machine's users
(the developer's own console); anywhere else it is an ``InvalidSetting`` at start-up.
Even there only a direct loopback request naming a trusted host is the operator
(security.py): a web page reaching the port by DNS rebinding names its own host, and a
proxied request is a remote user's.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from dormant.engine_core.errors import InvalidSetting
from dormant.persistence.settings import parse_bool
from dormant.tasks.console.authorization import (
    ADMIN,
    ALL_TENANTS,
    Grant,
    User,
    parse_grants,
    parse_users,
)

__all__ = [
    "ENV_AUTH",
    "ENV_GROUPS",
    "ENV_HOSTS",
    "ENV_OAUTH_CLIENT",
    "ENV_OAUTH_GRANTS",
    "ENV_SECRET",
    "ENV_SECURE_COOKIES",
    "ENV_TOKEN",
    "ENV_USERS",
    "ENV_VIEWER",
    "LOOPBACK_NAMES",
    "MIN_SECRET_CHARS",
    "ConsoleConfig",
    "is_loopback",
]

ENV_AUTH = "DORMANT_CONSOLE_AUTH"  # user:password (HTTP basic auth and the sign-in form)
ENV_TOKEN = "DORMANT_CONSOLE_TOKEN"  # a bearer token (scripts, a proxy that injects it)
# user:password of a viewer: reads everything (values too), acts on nothing
# (docs/console.md, Authentication; docs/camunda-api.md, Authentication).
ENV_VIEWER = "DORMANT_CONSOLE_VIEWER_AUTH"
# client-id:client-secret the Camunda API's token endpoint issues bearer tokens for
# (OAuth client credentials; tasks/console/tokens.py).
ENV_OAUTH_CLIENT = "DORMANT_CONSOLE_OAUTH_CLIENT"
# Users with roles per tenant (tasks/console/authorization.py, docs/console.md).
ENV_USERS = "DORMANT_CONSOLE_USERS"
# The OAuth client's grants (role@tenant,…); admin@* when unset, as before tenants.
ENV_OAUTH_GRANTS = "DORMANT_CONSOLE_OAUTH_GRANTS"
ENV_SECRET = "DORMANT_CONSOLE_SECRET"  # signs the session cookie; random per process if unset
# The signed-in user's candidate groups, comma separated: the tasklist's "tasks I may
# work on" (docs/console.md, Tasks).
ENV_GROUPS = "DORMANT_CONSOLE_GROUPS"
ENV_HOSTS = "DORMANT_CONSOLE_HOSTS"  # host names the console answers for, beside loopback
ENV_SECURE_COOKIES = "DORMANT_CONSOLE_SECURE_COOKIES"

# A password and a token alike: guessing either must cost the same (docs/limits.md).
MIN_SECRET_CHARS = 16
# The names a loopback console is reached by; any other Host is refused (400).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARD_BINDS = ("0.0.0.0", "::", "")
# What the single-user settings (and an unconfigured OAuth client) grant: all of it.
EVERY_TENANT_ADMIN = (Grant(ADMIN, ALL_TENANTS, True),)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _user_password(
    env: Mapping[str, str], name: str, parts: tuple[str, str] = ("user", "password")
) -> tuple[str | None, str | None]:
    auth = env.get(name, "")
    if not auth:
        return None, None
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise InvalidSetting(
            f"{name} must be {parts[0]}:{parts[1]} with both parts non-empty, got "
            f"{'a value without a colon' if not sep else 'an empty part'}"
        )
    if len(password) < MIN_SECRET_CHARS:
        raise InvalidSetting(
            f"{name}'s {parts[1]} must be at least {MIN_SECRET_CHARS} characters "
            f"long (as {ENV_TOKEN}), got {len(password)}"
        )
    return user, password


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    read_only: bool = False
    user: str | None = None
    password: str | None = None
    token: str | None = None
    # A second basic user whose role is viewer: it may read, never act.
    viewer_user: str | None = None
    viewer_password: str | None = None
    # OAuth client credentials: the token endpoint's one client (an operator).
    oauth_client_id: str | None = None
    oauth_client_secret: str | None = None
    oauth_grants: tuple[Grant, ...] = EVERY_TENANT_ADMIN
    # Users with roles per tenant (DORMANT_CONSOLE_USERS), beside the single ones above.
    users: tuple[User, ...] = ()
    secret: str = ""
    # Set cookies with Secure (the console is served over HTTPS, e.g. behind a proxy).
    secure_cookies: bool = False
    # The candidate groups of whoever signs in (the console has one user).
    groups: tuple[str, ...] = ()
    # Host names (``Host`` / ``Origin``) answered beside the loopback names; ``*.x`` is
    # every subdomain of x.
    hosts: tuple[str, ...] = ()

    @property
    def has_credentials(self) -> bool:
        return any(
            v is not None for v in (self.user, self.token, self.viewer_user, self.oauth_client_id)
        ) or bool(self.users)

    @property
    def open_access(self) -> bool:
        """No credentials configured, actions enabled, on loopback: a direct local
        request is the operator (security.py decides which requests are direct).
        Read-only without credentials nobody is: values stay hidden from everyone."""
        return not self.has_credentials and not self.read_only and is_loopback(self.host)

    @property
    def allowed_hosts(self) -> tuple[str, ...]:
        """The loopback names, the bound address when it is one address, and
        ``DORMANT_CONSOLE_HOSTS``."""
        bound = () if self.host in _WILDCARD_BINDS else (self.host.strip("[]").lower(),)
        return tuple(dict.fromkeys((*LOOPBACK_NAMES, *bound, *self.hosts)))

    def host_allowed(self, name: str) -> bool:
        """Whether a request's host name (no port, no brackets, any case) is ours."""
        name = name.lower().rstrip(".")
        for allowed in self.allowed_hosts:
            if allowed.startswith("*."):
                if name.endswith(allowed[1:]):
                    return True
            elif name == allowed:
                return True
        return False

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        read_only: bool = False,
    ) -> ConsoleConfig:
        env = os.environ if env is None else env
        user, password = _user_password(env, ENV_AUTH)
        viewer_user, viewer_password = _user_password(env, ENV_VIEWER)
        client_id, client_secret = _user_password(
            env, ENV_OAUTH_CLIENT, ("client-id", "client-secret")
        )
        if viewer_user is not None and viewer_user == user:
            raise InvalidSetting(
                f"{ENV_VIEWER} names the same user as {ENV_AUTH} ({user!r}): a user has one role"
            )
        users = parse_users(env.get(ENV_USERS, ""), ENV_USERS)
        clash = {u.name for u in users} & {user, viewer_user}
        if clash:
            raise InvalidSetting(
                f"{ENV_USERS} names {sorted(clash)[0]!r}, already the user of {ENV_AUTH} or "
                f"{ENV_VIEWER}: a user has one entry"
            )
        oauth_grants = (
            parse_grants(env[ENV_OAUTH_GRANTS], ENV_OAUTH_GRANTS)
            if env.get(ENV_OAUTH_GRANTS)
            else EVERY_TENANT_ADMIN
        )
        token = env.get(ENV_TOKEN) or None
        if token is not None and len(token) < MIN_SECRET_CHARS:
            raise InvalidSetting(f"{ENV_TOKEN} must be at least {MIN_SECRET_CHARS} characters long")
        hosts = tuple(
            h.strip().lower() for h in env.get(ENV_HOSTS, "").replace(" ", ",").split(",")
        )
        bad = [h for h in hosts if h and ("/" in h or (":" in h and not _is_ip(h.strip("[]"))))]
        if bad:
            raise InvalidSetting(
                f"{ENV_HOSTS} lists host names without scheme or port, got {bad[0]!r}"
            )
        config = cls(
            host=host,
            port=port,
            read_only=read_only,
            user=user,
            password=password,
            token=token,
            viewer_user=viewer_user,
            viewer_password=viewer_password,
            oauth_client_id=client_id,
            oauth_client_secret=client_secret,
            oauth_grants=oauth_grants,
            users=users,
            secret=env.get(ENV_SECRET) or secrets.token_urlsafe(32),
            secure_cookies=parse_bool(ENV_SECURE_COOKIES, env.get(ENV_SECURE_COOKIES, "")),
            hosts=tuple(h.strip("[]") for h in hosts if h),
            groups=tuple(g.strip() for g in env.get(ENV_GROUPS, "").split(",") if g.strip()),
        )
        config.check()
        return config

    def check(self) -> None:
        if not self.read_only and not self.has_credentials and not is_loopback(self.host):
            raise InvalidSetting(
                f"refusing to serve the console on {self.host} with actions enabled and no "
                f"credentials: set {ENV_AUTH}=user:password (or {ENV_TOKEN}), pass "
                f"--read-only, or bind to 127.0.0.1"
            )
