"""What the Client and the CLI show of an instance: engine_core/views.py, from real
checkpoints driven through the core."""

from __future__ import annotations

import json

from dormant.engine_core.builder import ProcessBuilder, message, signal, timer
from dormant.engine_core.views import instance_view, to_dict
from tests.core.enginekit import T0, Run


def _waiting_everywhere() -> Run:
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("fork")
    b.intermediate_catch_event("paid", message("payment", "=orderId")).end_event("e1")
    b.intermediate_catch_event("alarm", signal("fire")).end_event("e2")
    b.intermediate_catch_event("later", timer("PT1H")).end_event("e3")
    b.service_task("charge", job_type="charge-card").end_event("e4")
    b.sequence("s", "fork")
    for first, then in (("paid", "e1"), ("alarm", "e2"), ("later", "e3"), ("charge", "e4")):
        b.sequence("fork", first, then)
    run = Run(b.build(), instance_id="i7")
    run.start({"orderId": "o-1"}, business_key="bk-1")
    return run


def test_the_view_names_every_token_wait_and_the_process_variables() -> None:
    run = _waiting_everywhere()
    view = instance_view(run.cp)
    assert (view.id, view.key, view.version, view.status) == ("i7", "p", 1, "active")
    assert view.business_key == "bk-1" and view.variables == {"orderId": "o-1"}
    waiting = {t.node_id: t.waiting_for for t in view.tokens}
    assert waiting["paid"] == ["message payment[o-1]"]
    assert waiting["alarm"] == ["signal fire"]
    assert waiting["later"] == [f"timer {(T0.replace(hour=10)).isoformat()}"]
    assert waiting["charge"][0].startswith("job ")
    assert {w.kind for w in view.waits} == {"message", "signal", "timer", "job"}
    assert [s.id for s in view.scopes] == ["s0"] and view.scopes[0].variable_names == ["orderId"]
    assert view.incidents == [] and view.parent_instance_id is None


def test_a_dropped_incident_shows_its_token_completed_and_the_view_is_json() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").service_task("charge", job_type="c", job_retries="1").end_event("e")
    b.sequence("s", "charge", "e")
    run = Run(b.build())
    run.start()
    run.fail_job("charge")
    open_view = instance_view(run.cp)
    assert [t.state for t in open_view.tokens] == ["incident"]
    assert open_view.incidents[0].state == "open" and open_view.incidents[0].job_type == "c"
    run.drop(run.incident("charge").id)
    dropped = instance_view(run.cp)
    assert [t.state for t in dropped.tokens] == ["completed"]
    assert dropped.incidents[0].state == "dead_lettered"
    doc = to_dict(dropped)
    assert json.loads(json.dumps(doc)) == doc  # datetimes became ISO strings
    assert doc["incidents"][0]["first_at"] == T0.isoformat()
