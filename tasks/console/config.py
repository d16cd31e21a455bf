"""The console's settings, read once at start-up and refused early when unsafe.

The one refusal that matters: a console that can act (not ``--read-only``) with no
credentials would let anyone who reaches the port retry, resolve, drop and cancel.
That is allowed only on a loopback address, where "anyone" is this machine's users
(the developer's own console); anywhere else it is an ``InvalidSetting`` at start-up.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from dormant.engine_core.errors import InvalidSetting

__all__ = ["ENV_AUTH", "ENV_GROUPS", "ENV_SECRET", "ENV_TOKEN", "ConsoleConfig", "is_loopback"]

ENV_AUTH = "DORMANT_CONSOLE_AUTH"  # user:password (HTTP basic auth and the sign-in form)
ENV_TOKEN = "DORMANT_CONSOLE_TOKEN"  # a bearer token (scripts, a proxy that injects it)
ENV_SECRET = "DORMANT_CONSOLE_SECRET"  # signs the session cookie; random per process if unset
# The signed-in user's candidate groups, comma separated: the tasklist's "tasks I may
# work on" (docs/console.md, Tasks).
ENV_GROUPS = "DORMANT_CONSOLE_GROUPS"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    read_only: bool = False
    user: str | None = None
    password: str | None = None
    token: str | None = None
    secret: str = ""
    # Set cookies with Secure (the console is served over HTTPS, e.g. behind a proxy).
    secure_cookies: bool = False
    # The candidate groups of whoever signs in (the console has one user).
    groups: tuple[str, ...] = ()

    @property
    def has_credentials(self) -> bool:
        return self.user is not None or self.token is not None

    @property
    def open_access(self) -> bool:
        """No credentials configured on loopback: every local request is the operator.
        Without credentials elsewhere (only possible read-only) nobody is: values stay
        hidden."""
        return not self.has_credentials and is_loopback(self.host)

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
        user = password = None
        auth = env.get(ENV_AUTH, "")
        if auth:
            user, sep, password = auth.partition(":")
            if not sep or not user or not password:
                raise InvalidSetting(
                    f"{ENV_AUTH} must be user:password with both parts non-empty, got "
                    f"{'a value without a colon' if not sep else 'an empty part'}"
                )
        token = env.get(ENV_TOKEN) or None
        if token is not None and len(token) < 16:
            raise InvalidSetting(f"{ENV_TOKEN} must be at least 16 characters long")
        config = cls(
            host=host,
            port=port,
            read_only=read_only,
            user=user,
            password=password,
            token=token,
            secret=env.get(ENV_SECRET) or secrets.token_urlsafe(32),
            secure_cookies=env.get("DORMANT_CONSOLE_SECURE_COOKIES", "") in ("1", "true"),
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
