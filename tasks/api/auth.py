"""Who may call the Camunda API: the console's identities and roles, decided by the
console's own code (tasks/console/security.py ``identify``: one mechanism, one
throttle), refused as problem documents (docs/camunda-api.md, "Authentication").

* No credentials are needed only when none are configured, and then only by a direct
  loopback request (no proxy header): the developer's own machine. Otherwise every
  route needs ``Authorization: Basic`` (``DORMANT_CONSOLE_AUTH``, or the viewer's
  ``DORMANT_CONSOLE_VIEWER_AUTH``) or ``Bearer`` (``DORMANT_CONSOLE_TOKEN``, or a token
  from the OAuth token endpoint, oauth.py): 401 without.
* A viewer reads: ``GET`` routes and the ``…/search`` POSTs. Anything else acts (a
  deploy, a start, a job's completion, an evaluation) and needs an operator: 403,
  decided here on the headers. Which tenants a caller reads and acts on is decided
  per record by the routes through ``Caller`` (tasks/console/authorization.py holds
  the rules; docs/tenants.md "Authorizations").
* The session cookie of the console's sign-in form is never read here: the clients
  send headers, and a cookie would let any page the browser visits act. A foreign
  ``Host`` or ``Origin`` is refused as on the console's pages (DNS rebinding).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from dormant.tasks.api.problems import Problem, problem
from dormant.tasks.console.authorization import ADMIN, OPERATOR, Principal
from dormant.tasks.console.config import ENV_AUTH, ENV_TOKEN, ConsoleConfig
from dormant.tasks.console.security import (
    ACTOR,
    PRINCIPAL,
    ROLE,
    VIEWER,
    Refusal,
    header_actor,
    host_refusal,
    identify,
    request_headers,
)
from dormant.tasks.console.throttle import SignInThrottle

__all__ = ["ApiGuard", "Caller", "is_read"]

_READ_METHODS = ("GET", "HEAD")
_CHALLENGE = (("WWW-Authenticate", 'Basic realm="dormant"'),)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls a route, as the routes ask it (the decisions are
    tasks/console/authorization.py's): a record of a tenant the caller cannot read is
    a 404, the words an unknown one gets; one they read but may not act on is a 403.
    ``refused`` records a refused act (the audit trail: docs/audit.md)."""

    principal: Principal | None
    refused: Callable[[Problem], None] | None = None

    def reads(self, tenant: str) -> bool:
        return self.principal is None or self.principal.may_read(tenant)

    def sees_values(self, tenant: str) -> bool:
        return self.principal is None or self.principal.sees_values(tenant)

    def tenants(self, role: str = OPERATOR) -> tuple[str, ...] | None:
        """The tenants the caller holds ``role`` on; None for every tenant."""
        return None if self.principal is None else self.principal.tenants(role)

    def visible(self, tenant: str, missing: str) -> None:
        if not self.reads(tenant):
            raise Problem(404, "NOT_FOUND", missing)

    def require(self, tenant: str, missing: str, role: str = OPERATOR) -> None:
        """``missing`` is the 404's text for a record the caller cannot read; a tenant
        the request names itself (a deploy's, a start's) is no secret: pass ``""``."""
        if self.principal is None or self.principal.may(role, tenant):
            return
        if missing and not self.principal.may_read(tenant):
            refusal = Problem(404, "NOT_FOUND", missing)
        else:
            what = "deploying" if role == ADMIN else "acting"
            refusal = Problem(
                403,
                "FORBIDDEN",
                f"{what} on tenant {tenant!r} needs the {role} role there, which "
                f"{self.principal.name} does not hold (docs/tenants.md, Authorizations)",
            )
        if self.refused is not None:
            self.refused(refusal)
        raise refusal


def is_read(method: str, path: str) -> bool:
    """Whether a call only reads: a get, or a search (a POST only for its filter body)."""
    return method in _READ_METHODS or (method == "POST" and path.endswith("/search"))


class ApiGuard:
    """Decides before the route runs and before any body is read; writes the role to
    ``scope[ROLE]``."""

    def __init__(self, app: ASGIApp, *, config: ConsoleConfig, throttle: SignInThrottle) -> None:
        self.app = app
        self.config = config
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = await self._refusal(scope)
        if refused is not None:
            answer = problem(
                refused.status,
                refused.title,
                refused.detail,
                scope["path"],
                headers=dict(refused.headers),
            )
            await answer(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refusal(self, scope: Scope) -> Refusal | None:
        headers = request_headers(scope)
        refused = host_refusal(self.config, headers)
        if refused is not None:
            return refused
        found = await identify(self.config, scope, headers, self.throttle, None)
        if isinstance(found, Refusal):
            return found
        if found is None:
            return Refusal(
                401,
                "UNAUTHORIZED",
                f"this API needs credentials: Basic ({ENV_AUTH}'s user) or Bearer "
                f"({ENV_TOKEN}, or a token from POST /oauth/token); none are needed only "
                "on loopback with none configured",
                _CHALLENGE,
            )
        method, path = scope["method"], scope["path"]
        if found.role == VIEWER and not is_read(method, path):
            return Refusal(
                403,
                "FORBIDDEN",
                f"{method} {path} acts, and a viewer may only read (gets and searches); "
                f"acting needs an operator's credentials",
            )
        scope[ROLE] = found.role
        scope[PRINCIPAL] = found
        # Credentials were checked only when some are configured; an open loopback API
        # names nobody (its actions are recorded as ``api``: docs/audit.md).
        if self.config.has_credentials:
            scope[ACTOR] = header_actor(self.config, headers.get("authorization", ""))
        return None
