"""Tenants: the one home of the tenant id's format (docs/tenants.md).

Camunda 8's multi-tenancy names every deployment, instance, message, signal, job,
user task and incident by a tenant id, ``<default>`` when none was given; dormant takes
the same words so a Camunda client's ``tenantId`` round-trips. A tenant id is what
keeps one tenant's producer from reaching another tenant's processes, so it is checked
at every edge that accepts one (the Client, the CLI, the trigger tasks, the REST API)
before anything is looked up with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from dormant.engine_core.errors import InvalidField

__all__ = ["DEFAULT_TENANT", "MAX_TENANT_LENGTH", "check_tenant", "check_tenants"]

# The tenant of everything deployed, started or sent without one (Camunda 8's word).
DEFAULT_TENANT = "<default>"
# Camunda 8's bound on a tenant id; a column of this width holds every valid one.
MAX_TENANT_LENGTH = 31
_TENANT = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_TENANT_LENGTH}}}")


def check_tenant(value: Any, field: str = "tenant id") -> str:
    """``value`` as a tenant id (None: ``<default>``), or ``InvalidField`` naming the
    rule: letters, digits, ``_``, ``.`` and ``-``, 1 to 31 of them, or ``<default>``."""
    if value is None:
        return DEFAULT_TENANT
    if not isinstance(value, str):
        raise InvalidField(f"{field} must be a string, got {type(value).__name__}")
    if value == DEFAULT_TENANT or _TENANT.fullmatch(value):
        return value
    if len(value) > MAX_TENANT_LENGTH:
        raise InvalidField(
            f"{field} is {len(value)} characters long, more than the limit of {MAX_TENANT_LENGTH}"
        )
    raise InvalidField(
        f"{field} {value[:40]!r} may hold only letters, digits, '_', '.' and '-' "
        f"(1 to {MAX_TENANT_LENGTH} of them), or be {DEFAULT_TENANT!r}"
    )


def check_tenants(values: Iterable[Any], field: str = "tenant ids") -> tuple[str, ...]:
    """Several tenant ids (a worker's ``--tenants``, an API's ``tenantIds``), each
    checked, duplicates dropped, in their given order; at least one."""
    out: list[str] = []
    for value in values:
        tenant = check_tenant(value, f"{field} entry")
        if tenant not in out:
            out.append(tenant)
    if not out:
        raise InvalidField(f"{field} name no tenant; give at least one (e.g. {DEFAULT_TENANT})")
    return tuple(out)
