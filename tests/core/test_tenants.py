"""The tenant id's format and bound (engine_core/tenants.py), and a trigger's tenant on
the wire: left out for the default tenant, so a plain Celery producer's body (which
never names one) is the default tenant's (docs/tenants.md)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from dormant.engine_core.errors import InvalidField
from dormant.engine_core.tenants import (
    DEFAULT_TENANT,
    MAX_TENANT_LENGTH,
    check_tenant,
    check_tenants,
)
from dormant.tasks import wire
from dormant.tasks.cli import _tenant_queues, cli


@pytest.mark.parametrize("good", ["<default>", "acme", "a", "Tenant_1.eu-west", "x" * 31])
def test_a_tenant_id_within_the_rules_is_taken_as_it_is(good: str) -> None:
    assert check_tenant(good) == good


def test_no_tenant_is_the_default_tenant() -> None:
    assert check_tenant(None) == DEFAULT_TENANT == "<default>"


@pytest.mark.parametrize(
    ("bad", "names"),
    [
        ("x" * (MAX_TENANT_LENGTH + 1), "32 characters long, more than the limit of 31"),
        ("", "may hold only letters, digits"),
        ("a b", "may hold only letters, digits"),
        ("a/b", "may hold only letters, digits"),
        ("<other>", "may hold only letters, digits"),
        ("é", "may hold only letters, digits"),
        (7, "must be a string, got int"),
    ],
)
def test_a_tenant_id_outside_the_rules_is_refused_naming_the_rule(bad: object, names: str) -> None:
    with pytest.raises(InvalidField, match=names) as refused:
        check_tenant(bad, "tenant id")
    assert "\n" not in str(refused.value)


def test_a_list_of_tenants_is_checked_each_and_must_name_one() -> None:
    assert check_tenants(["a", "<default>", "a"]) == ("a", "<default>")
    with pytest.raises(InvalidField, match="name no tenant"):
        check_tenants([])
    with pytest.raises(InvalidField, match="--tenants entry"):
        check_tenants(["a", "b c"], "--tenants")


def test_the_wire_names_a_tenant_only_when_it_is_not_the_default() -> None:
    plain = wire.message("paid", "o-1", {}, "m-1", None)
    assert "tenant" not in plain.kwargs
    assert wire.message("paid", "o-1", {}, "m-1", None, DEFAULT_TENANT) == plain
    assert wire.message("paid", "o-1", {}, "m-1", None, "acme").kwargs["tenant"] == "acme"
    assert wire.signal("go", {}, "s-1", "acme").kwargs["tenant"] == "acme"
    assert "tenant" not in wire.signal("go", {}, "s-1").kwargs
    assert wire.complete_task("i.w", {}, "acme").kwargs["tenant"] == "acme"
    started = wire.start("p", "i-1", {}, tenant="acme", business_key="b")
    assert started.kwargs["tenant"] == "acme" and started.kwargs["business_key"] == "b"
    assert "tenant" not in wire.start("p", "i-1", {}, tenant=DEFAULT_TENANT).kwargs


def test_the_cli_refuses_a_bad_tenant_before_it_reads_anything() -> None:
    ran = CliRunner().invoke(cli, ["--tenant", "a b", "instances", "list"])
    assert ran.exit_code == 2
    assert "may hold only letters, digits" in ran.output


def test_worker_tenants_reads_each_tenants_queue_and_default_means_the_usual_ones() -> None:
    chosen = _tenant_queues("acme,globex", None)
    assert chosen is not None
    queues, names = chosen
    assert names == "dormant.tenant.acme,dormant.tenant.globex"
    assert {q.exchange.name for q in queues} == {"dormant.tenant.acme", "dormant.tenant.globex"}
    assert {q.routing_key for q in queues} == {"tenant.jobs"}
    both = _tenant_queues("<default>,acme", None)
    assert (
        both is not None
        and both[1] == "dormant.timers,dormant,celery,dormant.quarantine,dormant.tenant.acme"
    )
    queued = _tenant_queues("acme", "jobs-x")
    assert queued is not None and queued[1] == "jobs-x,dormant.tenant.acme"
    assert _tenant_queues(None, None) is None
    with pytest.raises(click.BadParameter, match="--tenants entry"):
        _tenant_queues("acme,a/b", None)
