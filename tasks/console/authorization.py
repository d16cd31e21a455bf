"""Who may do what, on which tenant: the one home of the console's and the Camunda API's
authorizations (docs/console.md "Users and roles", docs/tenants.md "Authorizations").

``security.identify`` decides *who* asks and hands back a ``Principal``; everything
here decides what that principal may see and do. Pure: no database, no request.

* Three roles, each including the one before it: a **viewer** reads, an **operator**
  also acts on instances, incidents, tasks and jobs (retry, resolve, cancel, migrate,
  set variables, batches, task completion, job activation), an **admin** also deploys,
  sets job type limits and retries or drops parked and failed triggers — the acts that
  reach beyond one instance.
* A grant names a tenant or ``*`` (every tenant). A record of a tenant the principal
  has no grant on does not exist for it: pages answer 404, lists leave it out.
* Values (variables, correlation keys) are shown to an operator or admin of the
  record's tenant, and to a viewer only when granted (``viewer+values``): the
  console's existing value-hiding is the mechanism.
* Users come from ``DORMANT_CONSOLE_USERS``: ``name:hash:grant,grant;name:hash:…`` where
  a grant is ``role@tenant`` and the hash is ``pbkdf2_sha256$iterations$salt$hex``
  (``dormant hash-password`` prints one for a password read from standard input): no
  clear password is kept in the settings.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from dormant.engine_core.errors import InvalidField, InvalidSetting
from dormant.engine_core.tenants import check_tenant

__all__ = [
    "ADMIN",
    "ALL_TENANTS",
    "OPERATOR",
    "ROLES",
    "VIEWER",
    "Grant",
    "Principal",
    "User",
    "hash_password",
    "parse_grants",
    "parse_users",
    "verify_password",
]

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
# In rising order: each role may do what the ones before it may.
ROLES = (VIEWER, OPERATOR, ADMIN)
ALL_TENANTS = "*"
_VALUES = "+values"
_SCHEME = "pbkdf2_sha256"
# OWASP's 2023 floor for PBKDF2-HMAC-SHA256; a hash with fewer is refused at start-up.
DEFAULT_ITERATIONS = 600_000
MIN_ITERATIONS = 1_000
MAX_USERS = 1_000


@dataclass(frozen=True, slots=True)
class Grant:
    role: str
    tenant: str  # a tenant id, or ALL_TENANTS
    values: bool = False

    def covers(self, tenant: str) -> bool:
        return self.tenant in (ALL_TENANTS, tenant)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who asks, with their grants. ``name`` is what the audit trail records."""

    name: str
    grants: tuple[Grant, ...]

    def _rank(self, tenant: str) -> int:
        return max((ROLES.index(g.role) + 1 for g in self.grants if g.covers(tenant)), default=0)

    def may(self, role: str, tenant: str) -> bool:
        """Whether this principal holds ``role`` (or a higher one) on ``tenant``."""
        return self._rank(tenant) >= ROLES.index(role) + 1

    def may_read(self, tenant: str) -> bool:
        return self._rank(tenant) > 0

    def sees_values(self, tenant: str) -> bool:
        return any(g.covers(tenant) and (g.values or g.role != VIEWER) for g in self.grants)

    def tenants(self, role: str = VIEWER) -> tuple[str, ...] | None:
        """The tenants this principal holds ``role`` on; None for every tenant."""
        floor = ROLES.index(role)
        named: list[str] = []
        for g in self.grants:
            if ROLES.index(g.role) < floor:
                continue
            if g.tenant == ALL_TENANTS:
                return None
            if g.tenant not in named:
                named.append(g.tenant)
        return tuple(named)

    @property
    def role(self) -> str:
        """The highest role on any tenant: the guards' coarse verdict, taken on the
        headers alone before a body is read (a viewer everywhere acts on nothing)."""
        return ROLES[max((ROLES.index(g.role) for g in self.grants), default=0)]


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: str
    grants: tuple[Grant, ...]

    def principal(self) -> Principal:
        return Principal(self.name, self.grants)


def parse_grants(text: str, setting: str) -> tuple[Grant, ...]:
    """``role@tenant,role@tenant`` (``viewer+values@t`` grants values): an
    ``InvalidSetting`` naming the bad part otherwise."""
    grants: list[Grant] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        role, sep, tenant = part.partition("@")
        values = role.endswith(_VALUES)
        role = role.removesuffix(_VALUES)
        if not sep or role not in ROLES:
            raise InvalidSetting(
                f"{setting}: a grant is role@tenant with role one of {', '.join(ROLES)} "
                f"(viewer+values to show values), got {part[:60]!r}"
            )
        if tenant != ALL_TENANTS:
            try:
                tenant = check_tenant(tenant, f"{setting}: the tenant of {part[:60]!r}")
            except InvalidField as exc:
                raise InvalidSetting(str(exc)) from exc
        grants.append(Grant(role, tenant, values))
    if not grants:
        raise InvalidSetting(f"{setting}: name at least one grant, e.g. operator@<default>")
    return tuple(grants)


def _check_hash(encoded: str, setting: str, name: str) -> None:
    parts = encoded.split("$")
    if (
        len(parts) != 4
        or parts[0] != _SCHEME
        or not parts[1].isdigit()
        or not parts[2]
        or len(parts[3]) != 64
    ):
        raise InvalidSetting(
            f"{setting}: user {name!r}'s password hash must be "
            f"{_SCHEME}$iterations$salt$hex (dormant hash-password prints one); clear "
            "passwords are not accepted"
        )
    if int(parts[1]) < MIN_ITERATIONS:
        raise InvalidSetting(
            f"{setting}: user {name!r}'s hash has {parts[1]} iterations, fewer than the "
            f"minimum of {MIN_ITERATIONS}"
        )


def parse_users(text: str, setting: str) -> tuple[User, ...]:
    """The ``DORMANT_CONSOLE_USERS`` format (module docstring)."""
    users: list[User] = []
    for entry in (e.strip() for e in text.split(";")):
        if not entry:
            continue
        name, _, rest = entry.partition(":")
        encoded, sep, grants = rest.partition(":")
        if not name or not sep:
            raise InvalidSetting(
                f"{setting}: each user is name:hash:role@tenant[,role@tenant…], got an entry "
                f"starting {entry[:20]!r}"
            )
        if name in (u.name for u in users):
            raise InvalidSetting(f"{setting}: user {name!r} is named twice")
        _check_hash(encoded, setting, name)
        users.append(User(name, encoded, parse_grants(grants, f"{setting} ({name})")))
    if len(users) > MAX_USERS:
        raise InvalidSetting(f"{setting}: {len(users)} users, more than the limit of {MAX_USERS}")
    return tuple(users)


def hash_password(password: str, iterations: int = DEFAULT_ITERATIONS) -> str:
    salt = secrets.token_hex(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations)
    return f"{_SCHEME}${iterations}${salt}${digest.hex()}"


# Pairs already verified, by the hash and the password's SHA-256 (never the password):
# a Basic client sends its password on every request, and PBKDF2 is deliberately slow.
_VERIFIED: dict[tuple[str, bytes], None] = {}
_VERIFIED_KEPT = 256


def verify_password(encoded: str, password: str) -> bool:
    seen = (encoded, hashlib.sha256(password.encode()).digest())
    if seen in _VERIFIED:
        return True
    _, iterations, salt, expected = encoded.split("$")
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), int(iterations))
    if not hmac.compare_digest(digest.hex(), expected):
        return False
    if len(_VERIFIED) >= _VERIFIED_KEPT:
        _VERIFIED.clear()
    _VERIFIED[seen] = None
    return True
