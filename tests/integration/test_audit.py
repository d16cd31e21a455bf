"""The audit trail of operator actions and the actor in the history (issues 27, 28),
on PostgreSQL + Redis with a real worker: a cancel by ann through the console (its
signed-in user) and an incident retry through the CLI ``--as bob`` appear in
``dormant audit list`` (accepted, then applied by the worker) and in ``dormant
instances history`` with their actors; a variable's value set through the console is
in neither; the console's /audit page lists them."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack, _urls, wait_for
from tests.integration.console.kit import MODEL, open_incident

pytestmark = pytest.mark.integration

ANN, PASSWORD = "ann", "correct horse battery staple"
SECRET = "s3cr3t-card-number"


@pytest.fixture(scope="module")
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("audit")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        try:
            s.worker()
            s.client.deploy(MODEL)
            yield s
        finally:
            s.close()


def _console(stack: Stack) -> Any:
    from starlette.testclient import TestClient

    from dormant.tasks.console import create_app
    from dormant.tasks.console.config import ConsoleConfig

    config = ConsoleConfig(secret="s" * 32, user=ANN, password=PASSWORD)
    app = create_app(config, client=stack.client)
    basic = base64.b64encode(f"{ANN}:{PASSWORD}".encode()).decode()
    return TestClient(
        app,
        base_url="http://127.0.0.1",
        client=("127.0.0.1", 50000),
        headers={"Authorization": f"Basic {basic}"},
    )


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def _waiting(stack: Stack, flag: Path, order: str) -> str:
    iid = stack.client.start("payment", {"flag": str(flag), "order": order})
    wait_for(
        lambda: any(t.node_id == "paid" for t in stack.client.instance(iid).tokens),
        30,
        what="the wait at paid",
    )
    return str(iid)


def _audit(stack: Stack, *args: str) -> list[dict[str, Any]]:
    done = stack.run_cli("audit", "list", "--json", *args)
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def _history(stack: Stack, iid: str) -> str:
    done = stack.run_cli("instances", "history", iid)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_console_cancel_and_a_cli_retry_name_their_actors(stack: Stack, tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    # An incident (the job fails until its flag exists), retried from the CLI as bob.
    failing = stack.client.start("payment", {"flag": str(flag), "order": "o-1"})
    incident = open_incident(stack, failing)
    flag.touch()
    done = stack.run_cli("--as", "bob", "incidents", "retry", incident.id)
    assert done.returncode == 0, done.stderr
    wait_for(
        lambda: any(t.node_id == "paid" for t in stack.client.instance(failing).tokens),
        30,
        what="the retried job to complete",
    )
    # An instance cancelled from the console by its signed-in user, after ann set a
    # variable whose value must be in no record.
    target = _waiting(stack, flag, "o-2")
    back = f"/instances/{target}"
    with _console(stack) as console:
        token = _csrf(html.unescape(console.get(back).text))
        form = {"csrf": token, "next": back, "vars": f"card={json.dumps(SECRET)}", "scope": "s0"}
        assert (
            console.post(f"{back}/variables", data=form, follow_redirects=False).status_code == 303
        )
        wait_for(
            lambda: stack.client.instance(target).variables.get("card") == SECRET,
            30,
            what="the variable set",
        )
        cancel = {"csrf": token, "next": back, "confirm": "1"}
        assert (
            console.post(f"{back}/cancel", data=cancel, follow_redirects=False).status_code == 303
        )
        stack.wait_status(target, "terminated")

        def both_applied() -> list[dict[str, Any]] | None:
            rows = _audit(stack)
            applied = {(r["actor"], r["action"]) for r in rows if r["outcome"] == "applied"}
            wanted = {("ann", "cancel"), ("ann", "set_variables"), ("bob", "incident_retry")}
            return rows if wanted <= applied else None

        rows = wait_for(both_applied, 30, what="the outcomes in the audit trail")
        page = html.unescape(console.get("/audit", params={"actor": ANN}).text)
    assert SECRET not in json.dumps(rows)
    cancels = [r for r in rows if r["action"] == "cancel"]
    assert {(r["outcome"], r["source"], r["instance_id"]) for r in cancels} == {
        ("accepted", "console", target),
        ("applied", "console", target),
    }
    assert len({r["command_id"] for r in cancels}) == 1  # one action, two rows
    retry = [r for r in rows if r["action"] == "incident_retry"]
    assert {(r["actor"], r["source"], r["outcome"]) for r in retry} == {
        ("bob", "cli", "accepted"),
        ("bob", "cli", "applied"),
    }
    assert retry[0]["target"] == incident.id and retry[0]["instance_id"] == failing
    [set_vars] = [r for r in rows if r["action"] == "set_variables" and r["outcome"] == "applied"]
    assert set_vars["params"]["variables"] == {"card": "***"}
    # The filters.
    assert {r["actor"] for r in _audit(stack, "--actor", "bob")} == {"bob"}
    assert {r["instance_id"] for r in _audit(stack, "--instance", target)} == {target}
    # The history says who, and holds no value either.
    history = _history(stack, target)
    assert "instance cancelled by ann" in history
    assert "variables changed in scope s0: set card by ann" in history
    assert SECRET not in history
    assert f"incident {incident.id} retried by bob" in _history(stack, failing)
    # The console's page: ann's actions, not bob's.
    assert 'id="audit"' in page and "cancel" in page and target in page
    assert "bob" not in page and SECRET not in page


def test_a_bulk_cancel_names_its_actor_on_every_instance(stack: Stack, tmp_path: Path) -> None:
    """A batch keeps who asked for it; each item's trigger carries them into its
    instance's history, and the batch's creation is one ``done`` row."""
    flag = tmp_path / "flag"
    flag.touch()
    ids = [_waiting(stack, flag, f"o-bulk-{n}") for n in range(2)]
    done = stack.run_cli("--as", "carol", "instances", "cancel", *ids)
    assert done.returncode == 0, done.stderr
    for iid in ids:
        stack.wait_status(iid, "terminated")
        assert "instance cancelled by carol" in _history(stack, iid)
    [created] = _audit(stack, "--actor", "carol")
    assert (created["action"], created["outcome"], created["source"]) == (
        "bulk_cancel",
        "done",
        "cli",
    )
    assert created["params"]["selected"] == 2 and "actor" not in created["params"]


def test_the_client_names_its_actor_and_old_rows_are_swept(stack: Stack) -> None:
    """``Client(actor=)`` is recorded as given; the retention sweep deletes rows past
    ``DORMANT_AUDIT_RETENTION_DAYS`` and keeps the rest."""
    from datetime import timedelta

    from dormant.persistence import audit, clock
    from dormant.persistence.settings import Settings
    from dormant.tasks.client import Client

    client = Client(stack.database_url, stack.broker_url, actor="dave")
    deployed = client.deploy(MODEL)
    client.pause_job_type("audit-sweep-type")
    client.resume_job_type("audit-sweep-type")
    rows = client.audit_log(actor="dave")
    assert [(r.action, r.source, r.outcome) for r in rows] == [
        ("job_type_resume", "client", "done"),
        ("job_type_pause", "client", "done"),
        ("deploy", "client", "done"),
    ]
    assert rows[2].target == str(deployed.deployment_key)
    assert rows[2].params == {"resources": [f"payment v{deployed.version}"]}
    now = clock.now()
    old = audit.command("eve", "client", "cancel", target="gone")
    audit.accept(client._store.engine, old, now - timedelta(days=91))
    retention = Settings.from_env(
        database_url=stack.database_url, broker_url=stack.broker_url
    ).audit_retention_days
    assert retention == 90.0
    assert audit.sweep(client._store.engine, now, retention) == 1
    assert client.audit_log(actor="eve") == []
    assert len(client.audit_log(actor="dave")) == 3  # inside the retention: kept


def test_a_refusal_on_the_worker_is_recorded_with_its_reason(stack: Stack, tmp_path: Path) -> None:
    """An action the worker refuses (the instance changed after the Client's checks: here
    a second suspend sent past them) is ``refused`` with the reason, in its own
    transaction; the instance is left as it was."""
    from dormant.persistence import audit
    from dormant.tasks import wire
    from dormant.tasks.client import Client

    flag = tmp_path / "flag"
    flag.touch()
    iid = _waiting(stack, flag, "o-refused")
    client = Client(stack.database_url, stack.broker_url, actor="frank")
    client.suspend(iid)
    wait_for(lambda: client.instance(iid).suspended, 30, what="suspended")
    revision = client.instance(iid).revision
    # What a second suspend racing the first would send once both passed the Client.
    cmd = audit.command("frank", "client", "suspend", target=iid, instance_id=iid)
    client._send(wire.audited(wire.suspend(iid), cmd))

    def refused() -> audit.AuditEntry | None:
        rows = client.audit_log(actor="frank", instance_id=iid)
        mine = (r for r in rows if r.command_id == cmd["command_id"])
        return next((r for r in mine if r.outcome == "refused"), None)

    row = wait_for(refused, 30, what="the refusal in the audit trail")
    assert row.detail is not None
    assert "already suspended" in row.detail
    assert client.instance(iid).revision == revision
    outcomes = [r.outcome for r in client.audit_log(actor="frank", instance_id=iid)]
    # Newest first: the second suspend accepted (with its inbox row) then refused; the
    # first accepted then applied.
    assert outcomes == ["refused", "accepted", "applied", "accepted"]


def test_a_management_task_sent_by_hand_is_recorded_from_celery(
    stack: Stack, tmp_path: Path
) -> None:
    """``dormant.suspend`` sent as Flower or ``send_task`` sends it (no Client, no inbox
    row): its outcome is recorded from ``celery``, nobody named, and the history claims
    no actor."""
    from dormant.persistence import audit
    from dormant.tasks import wire
    from dormant.tasks.app import pooled_producer, publish

    flag = tmp_path / "flag"
    flag.touch()
    iid = _waiting(stack, flag, "o-by-hand")
    with pooled_producer(stack.broker_url) as producer:
        publish(*wire.suspend(iid), producer=producer)
    rows = wait_for(
        lambda: stack.client.audit_log(instance_id=iid) or None, 30, what="the suspend recorded"
    )
    assert [(r.actor, r.source, r.action, r.outcome) for r in rows] == [
        (audit.UNKNOWN_ACTOR, "celery", "suspend", "applied")
    ]
    assert stack.client.instance(iid).suspended
    history = _history(stack, iid)
    assert "instance suspended\n" in history and "instance suspended by" not in history


def test_a_failed_triggers_drop_names_its_actor(stack: Stack) -> None:
    """Dropping a failed trigger is an operator action: one ``done`` row, by who."""
    from dormant.tasks import wire
    from dormant.tasks.app import pooled_producer, publish
    from dormant.tasks.client import Client

    with pooled_producer(stack.broker_url) as producer:
        publish(*wire.cancel("no-such-instance"), producer=producer)
    failed = wait_for(
        lambda: next((f for f in stack.client.failed_triggers("no-such-instance")), None),
        30,
        what="the failed trigger",
    )
    Client(stack.database_url, stack.broker_url, actor="gina").drop_trigger(failed.id)
    [row] = stack.client.audit_log(actor="gina")
    assert (row.action, row.target, row.outcome) == ("trigger_drop", failed.id, "done")


# -- every operator action through every door (issue 27: "every operator action appears
# once in the audit trail with the right actor") ---------------------------------------

API_USER, API_PASSWORD = "ursula", "api password for the audit table"
OAUTH_ID, OAUTH_SECRET = "audit-sdk", "oauth-client-secret-for-the-audit"


def _api(stack: Stack) -> Any:
    """The v2 API with Basic and OAuth credentials configured, as ``dormant api`` serves it."""
    from starlette.testclient import TestClient

    from dormant.tasks.api.app import create_app
    from dormant.tasks.console.config import ConsoleConfig

    config = ConsoleConfig(
        secret="a" * 32,
        user=API_USER,
        password=API_PASSWORD,
        oauth_client_id=OAUTH_ID,
        oauth_client_secret=OAUTH_SECRET,
    )
    app = create_app(stack.client, config)
    return config, TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000))


def _by_hand(task: str, **kwargs: Any) -> Any:
    """A management task as Flower's "send task" form sends it: no Client, no audit."""

    def send(stack: Stack) -> None:
        from dormant.tasks.app import pooled_producer, publish

        with pooled_producer(stack.broker_url) as producer:
            publish(task, "trigger.default", kwargs, producer=producer)

    return send


def test_every_operator_action_is_recorded_once_by_its_door(stack: Stack, tmp_path: Path) -> None:
    """A table: each row one operator action through one door (CLI, console, v2 API,
    Client, a Celery task sent by hand) and the one command it must leave in the trail
    (actor, source, action, target, instance, outcomes)."""
    from dormant.persistence import api_keys
    from dormant.persistence.audit import UNKNOWN_ACTOR
    from dormant.tasks import wire
    from dormant.tasks.app import pooled_producer, publish
    from dormant.tasks.client import Client
    from dormant.tasks.console.tokens import issue

    ok, broken = tmp_path / "ok", tmp_path / "broken"
    ok.touch()
    waiting = [
        stack.client.start("payment", {"flag": str(ok), "order": f"t-{n}"}) for n in range(10)
    ]
    failing = [
        stack.client.start("payment", {"flag": str(broken), "order": f"f-{n}"}) for n in range(3)
    ]
    with pooled_producer(stack.broker_url) as producer:
        for n in range(2):
            publish(*wire.cancel(f"audit-table-ghost-{n}"), producer=producer)
    for iid in waiting:
        wait_for(
            lambda iid=iid: any(t.node_id == "paid" for t in stack.client.instance(iid).tokens),
            30,
            what="the waits at paid",
        )
    # After the waits: an instance starts on the version newest when the worker runs it.
    v2 = stack.client.deploy(MODEL.read_text().replace('name="Payment"', 'name="Payment v2"'))
    incidents = [open_incident(stack, iid).id for iid in failing]
    ghosts = [
        wait_for(
            lambda n=n: next(iter(stack.client.failed_triggers(f"audit-table-ghost-{n}")), None),
            30,
            what="the failed triggers",
        ).id
        for n in range(2)
    ]
    config, api = _api(stack)
    basic = {
        "Authorization": "Basic " + base64.b64encode(f"{API_USER}:{API_PASSWORD}".encode()).decode()
    }
    oauth = {"Authorization": f"Bearer {issue(config, clock_now())}"}
    engine = stack.client._store.engine

    def key(kind: str, dormant_id: str) -> str:
        return str(api_keys.key_of(engine, kind, dormant_id))

    dave = Client(stack.database_url, stack.broker_url, actor="dave-table")
    with _console(stack) as console:
        csrf = _csrf(html.unescape(console.get(f"/instances/{waiting[0]}").text))

        def post(path: str, **form: str) -> Any:
            def send(_: Stack) -> None:
                answer = console.post(
                    path,
                    data={"csrf": csrf, "next": "/audit", "confirm": "1", **form},
                    follow_redirects=False,
                )
                assert answer.status_code == 303, (path, answer.status_code, answer.text[:300])

            return send

        def cli(*args: str) -> Any:
            def send(s: Stack) -> None:
                done = s.run_cli("--as", "bob-table", *args)
                assert done.returncode == 0, (args, done.stderr)

            return send

        def call(method: str, path: str, headers: dict[str, str], **body: Any) -> Any:
            def send(_: Stack) -> None:
                answer = api.request(method, f"/v2{path}", headers=headers, json=body or None)
                assert answer.status_code in (200, 204), (path, answer.status_code, answer.text)

            return send

        applied = ("accepted", "applied")
        # source, actor, action, target, instance, outcomes, how
        table: list[tuple[str, str, str, str, str | None, tuple[str, ...], Any]] = [
            (
                "cli",
                "bob-table",
                "suspend",
                waiting[0],
                waiting[0],
                applied,
                cli("instances", "suspend", waiting[0]),
            ),
            (
                "cli",
                "bob-table",
                "migrate",
                waiting[1],
                waiting[1],
                applied,
                cli("instances", "migrate", waiting[1], "--to", str(v2.version)),
            ),
            (
                "cli",
                "bob-table",
                "trigger_retry",
                ghosts[0],
                "audit-table-ghost-0",
                ("done",),
                cli("triggers", "retry", ghosts[0]),
            ),
            (
                "cli",
                "bob-table",
                "job_type_pause",
                "table-cli",
                None,
                ("done",),
                cli("jobs", "pause", "table-cli"),
            ),
            (
                "console",
                ANN,
                "modify",
                waiting[2],
                waiting[2],
                applied,
                post(f"/instances/{waiting[2]}/modify", cancel="paid", start_before="done"),
            ),
            (
                "console",
                ANN,
                "incident_resolve",
                incidents[0],
                failing[0],
                applied,
                post(f"/incidents/{incidents[0]}/resolve"),
            ),
            (
                "console",
                ANN,
                "job_type_resume",
                "table-cli",
                None,
                ("done",),
                post("/jobs/resume", job_type="table-cli"),
            ),
            (
                "api",
                API_USER,
                "cancel",
                waiting[3],
                waiting[3],
                applied,
                call(
                    "POST", f"/process-instances/{key('instance', waiting[3])}/cancellation", basic
                ),
            ),
            (
                "api",
                OAUTH_ID,
                "set_variables",
                waiting[4],
                waiting[4],
                applied,
                call(
                    "PUT",
                    f"/element-instances/{key('instance', waiting[4])}/variables",
                    oauth,
                    variables={"card": SECRET},
                ),
            ),
            (
                "api",
                API_USER,
                "incident_retry",
                incidents[1],
                failing[1],
                applied,
                call("POST", f"/incidents/{key('incident', incidents[1])}/resolution", basic),
            ),
            (
                "client",
                "dave-table",
                "incident_drop",
                incidents[2],
                failing[2],
                applied,
                lambda _: dave.drop_incident(incidents[2]),
            ),
            (
                "client",
                "dave-table",
                "set_variables",
                waiting[5],
                waiting[5],
                applied,
                lambda _: dave.set_variables(waiting[5], {"note": SECRET}),
            ),
            (
                "api",
                OAUTH_ID,
                "modify",
                waiting[8],
                waiting[8],
                applied,
                call(
                    "POST",
                    f"/process-instances/{key('instance', waiting[8])}/modification",
                    oauth,
                    terminateInstructions=[{"elementId": "paid"}],
                    activateInstructions=[{"elementId": "done"}],
                ),
            ),
            (
                "console",
                ANN,
                "suspend",
                waiting[9],
                waiting[9],
                applied,
                post(f"/instances/{waiting[9]}/suspend"),
            ),
            (
                "celery",
                UNKNOWN_ACTOR,
                "cancel",
                waiting[6],
                waiting[6],
                ("applied",),
                _by_hand(wire.CANCEL, instance_id=waiting[6]),
            ),
            ("celery", UNKNOWN_ACTOR, "resume", waiting[7], waiting[7], ("applied",), None),
            (
                "celery",
                UNKNOWN_ACTOR,
                "job_type_pause",
                "table-celery",
                None,
                ("done",),
                _by_hand(wire.JOBS_PAUSE, job_type="table-celery"),
            ),
            (
                "celery",
                UNKNOWN_ACTOR,
                "trigger_drop",
                ghosts[1],
                "audit-table-ghost-1",
                ("done",),
                _by_hand(wire.TRIGGERS_DROP, failed_id=ghosts[1]),
            ),
            (
                "celery",
                UNKNOWN_ACTOR,
                "bulk_incident_retry",
                "batch",
                None,
                ("done",),
                _by_hand(
                    wire.BULK,
                    operation="incident_retry",
                    selector={"key": "payment", "node": "no-such-node"},
                ),
            ),
        ]
        dave.suspend(waiting[7])  # the celery resume's precondition, not a row of the table
        wait_for(lambda: stack.client.instance(waiting[7]).suspended, 30, what="suspended")
        resume = _by_hand(wire.RESUME, instance_id=waiting[7])
        table = [(*row[:6], resume) if row[6] is None else row for row in table]
        for *_, how in table:
            how(stack)

        def final(row: tuple[Any, ...]) -> bool:
            source, actor, action, target, _, outcomes, _ = row
            found = stack.client.audit_log(limit=500, where=_where(actor, source, action))
            if target == "batch":
                return any(r.outcome == outcomes[-1] for r in found)
            return any(r.target == target and r.outcome == outcomes[-1] for r in found)

        try:
            wait_for(lambda: all(final(row) for row in table), 60, what="every outcome recorded")
        except AssertionError:
            missing = [row[:4] for row in table if not final(row)]
            raise AssertionError(f"no final audit row for {missing}") from None
        page = html.unescape(console.get("/audit", params={"source": "api"}).text)
    every = stack.client.audit_log(limit=2000)
    assert SECRET not in json.dumps([r.as_json() for r in every])
    for source, actor, action, target, instance_id, outcomes, _ in table:
        mine = [
            r
            for r in every
            if (r.source, r.action) == (source, action)
            and (
                r.target == target or (target == "batch" and (r.target or "").startswith("batch "))
            )
            and (r.actor == actor or r.source == "celery")
        ]
        assert len({r.command_id for r in mine}) == 1, (source, action, mine)
        assert sorted(r.outcome for r in mine) == sorted(outcomes), (source, action, mine)
        assert {r.actor for r in mine} == {actor}, (source, action, mine)
        assert {r.instance_id for r in mine} == {instance_id}, (source, action, mine)
    assert API_USER in page and OAUTH_ID in page and "dave-table" not in page


def clock_now() -> float:
    from dormant.persistence import clock

    return clock.now().timestamp()


def _where(actor: str, source: str, action: str) -> Any:
    from dormant.persistence.audit import AuditFilter

    return AuditFilter(actor=actor, source=source, action=action)


def test_the_export_streams_json_lines_with_the_filters(stack: Stack) -> None:
    """``dormant audit export`` and the console's ``/audit.jsonl``: every row the filters
    select, oldest first, one JSON object a line, read a page at a time; the console's
    export is refused to an anonymous reader, a bad filter is refused by name."""
    from dormant.persistence import audit

    dave = stack.client.acting_as("erin-export", "client")
    for n in range(3):
        dave.pause_job_type(f"export-{n}")
    since = "2000-01-01T00:00"
    done = stack.run_cli("audit", "export", "--actor", "erin-export", "--since", since)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["target"], r["outcome"], r["source"]) for r in lines] == [
        (f"export-{n}", "done", "client") for n in range(3)
    ]
    assert [r["id"] for r in lines] == sorted(r["id"] for r in lines)
    none = stack.run_cli("audit", "export", "--actor", "erin-export", "--until", since)
    assert none.returncode == 0 and none.stdout == "", none.stderr
    bad = stack.run_cli("audit", "export", "--outcome", "edited")
    assert bad.returncode == 2 and "'edited' is not one of" in bad.stderr
    # Paged by id: a page of one yields what a page of a thousand does.
    where = audit.AuditFilter(source="client")
    engine = stack.client._store.engine
    assert list(audit.export(engine, where, page=1)) == list(audit.export(engine, where))
    with _console(stack) as console:
        got = console.get(
            "/audit.jsonl", params={"actor": "erin-export", "action": "job_type_pause"}
        )
        assert got.status_code == 200 and got.headers["content-type"].startswith(
            "application/jsonl"
        )
        assert [json.loads(line)["target"] for line in got.text.splitlines()] == [
            f"export-{n}" for n in range(3)
        ]
        assert console.get("/audit.jsonl", params={"outcome": "edited"}).status_code == 400
        page = console.get("/audit", params={"actor": "erin-export"}).text
        assert "/audit.jsonl?actor=erin-export" in page
        console.headers.pop("Authorization")
        assert console.get("/audit.jsonl").status_code == 401
        assert console.get("/audit").status_code == 401


def test_no_door_edits_or_deletes_an_audit_row() -> None:
    """Append-only (docs/audit.md): the only statements on ``audit_log`` besides reads
    are the inserts of persistence/audit.py and the worker's outcome row, and the one
    delete is the retention sweep; no console or API route but the two reads names it."""
    from dormant.tasks.api.app import routes as api_routes
    from dormant.tasks.console import create_app
    from dormant.tasks.console.config import ConsoleConfig

    root = Path(__file__).resolve().parents[2]
    writes = []
    # The product's own folders (what a door is made of): not a build's copy of them.
    sources = [root / name for name in ("engine_core", "persistence", "scheduler", "tasks")]
    for path in sorted(p for folder in sources for p in folder.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        text = path.read_text()
        for hit in re.finditer(r"(update|delete)\(audit_log|audit_log\.(update|delete)", text):
            writes.append((path.relative_to(root).as_posix(), hit.group(0)))
    assert writes == [("persistence/audit.py", "delete(audit_log")]
    assert "UPDATE audit_log" not in (root / "persistence" / "audit.py").read_text().upper()
    app = create_app(ConsoleConfig(secret="s" * 32, user=ANN, password=PASSWORD))
    audit_routes = {
        (getattr(r, "path", ""), tuple(sorted(getattr(r, "methods", None) or ())))
        for r in app.routes
        if "audit" in getattr(r, "path", "")
    }
    assert audit_routes == {("/audit", ("GET", "HEAD")), ("/audit.jsonl", ("GET", "HEAD"))}
    assert not [r for r in api_routes() if "audit" in str(getattr(r, "path", ""))]
