"""Every path by which data enters a checkpoint or a message is bounded (issue 24, row 5).

Each variable a model writes was already held to ``DORMANT_MAX_VARIABLES_BYTES``; what
grew unbounded was everything around it: the tokens of a parallel fork in a loop, the
local variables of many inner instances, a mapping's or a job's result as a whole, a
job's input, a thrown payload, a child's inputs. One home checks them
(``engine_core/inputs.py``, through ``Runtime.bounded`` / ``charge_bytes`` /
``spawn``), and past a bound the node gets an incident naming it, before anything is
stored or sent. Pure: the bounds are counts and sizes, the same on every machine.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dormant.engine_core.builder import ProcessBuilder, message
from dormant.engine_core.effects import DispatchJob, StartChild, ThrowMessage
from dormant.engine_core.engine import Services
from dormant.engine_core.inputs import DEFAULT_LIMITS, Limits
from dormant.engine_core.model import IoMapping, LoopSpec, ProcessDefinition
from dormant.persistence.settings import Settings
from tests.core.enginekit import Run

BIG = "x" * 600_000  # under the 1 MiB of one variable; two of them are over it


def _services(**limits: int) -> Services:
    return Services(limits=replace(DEFAULT_LIMITS, **limits), step_budget=1_000_000)


def fork_bomb() -> ProcessDefinition:
    """start -> merge -> fork -> (a | b) -> merge: each turn adds a token."""
    b = ProcessBuilder("bomb")
    b.start_event("s").exclusive_gateway("merge").parallel_gateway("fork")
    b.task("a").task("b")
    b.sequence("s", "merge", "fork")
    b.sequence("fork", "a", "merge")
    b.sequence("fork", "b", "merge")
    return b.build()


def test_a_parallel_fork_in_a_loop_ends_in_one_incident_at_the_token_bound() -> None:
    """One incident at the fork, never one per token: the other tokens would only meet
    the same bound (20,000 incidents and ERROR lines per step at the default). They
    stay where they were, active, parked behind it; no follow-up step is sent."""
    run = Run(fork_bomb(), services=_services(max_tokens=50))
    run.start()
    assert run.status == "active_incidents"
    [incident] = run.cp.incidents.values()
    assert (incident.node_id, incident.cause_class) == ("fork", "LimitExceeded")
    assert "has 50 tokens; 1 more at 'fork' would pass the limit of 50 (DORMANT_MAX_TOKENS)" in (
        incident.cause
    )
    assert len(run.cp.tokens) == 50
    states = sorted(t.state.value for t in run.cp.tokens.values())
    assert states.count("incident") == 1 and states.count("active") == 49
    assert not [e for e in run.effects if type(e).__name__ == "ContinueInstance"]
    assert "TokensParked" in [f.kind for f in run.facts]


def test_a_retry_under_the_same_bound_updates_the_one_incident_and_a_higher_bound_runs_on() -> None:
    run = Run(fork_bomb(), services=_services(max_tokens=50))
    run.start()
    [incident] = run.cp.incidents.values()
    run.retry(incident.id)
    [again] = run.cp.incidents.values()  # the same incident, a second attempt
    assert again.id == incident.id and again.attempts == 2 and len(run.cp.tokens) == 50
    run.services = _services(max_tokens=80)  # the operator raised DORMANT_MAX_TOKENS
    run.retry(incident.id)
    assert run.cp.incidents[incident.id].state.value == "retried"  # the fork went through
    # The parked tokens ran on with it, and the loop, still a fork bomb, met the new
    # bound: again one incident, not thirty.
    [last] = [i for i in run.cp.incidents.values() if not i.state.closed]
    assert "would pass the limit of 80 (DORMANT_MAX_TOKENS)" in last.cause
    assert len(run.cp.tokens) == 80


def test_a_fork_refused_at_the_bound_adds_none_of_its_branches() -> None:
    """Checked for all branches at once: a fork that added some before the refusal
    would run those twice once its retry forks again."""
    b = ProcessBuilder("wide")
    b.start_event("s").parallel_gateway("fork")
    b.user_task("a").user_task("b").user_task("c")
    b.sequence("s", "fork")
    for branch in ("a", "b", "c"):
        b.sequence("fork", branch)
    run = Run(b.build(), services=_services(max_tokens=2))
    run.start()
    [incident] = run.cp.incidents.values()
    assert "2 more at 'fork' would pass the limit of 2" in incident.cause
    assert [t.node_id for t in run.cp.tokens.values()] == ["fork"]
    run.services = _services(max_tokens=3)
    run.retry(incident.id)
    assert sorted(t.node_id for t in run.cp.tokens.values()) == ["a", "b", "c"]


def test_inner_instances_holding_local_copies_stop_at_the_checkpoint_bound() -> None:
    b = ProcessBuilder("mi")
    b.start_event("s").service_task(
        "each",
        "work",
        loop=LoopSpec(sequential=False, input_collection="=items", input_element="item"),
        inputs=(IoMapping("=blob", "local"),),
    ).end_event("e")
    b.sequence("s", "each", "e")
    run = Run(b.build(), services=_services(max_checkpoint_bytes=200_000))
    run.start({"items": list(range(30)), "blob": "y" * 20_000})
    incidents = list(run.cp.incidents.values())
    assert incidents and {(i.node_id, i.cause_class) for i in incidents} == {
        ("each", "LimitExceeded")
    }
    assert "more than the limit of 200,000 (DORMANT_MAX_CHECKPOINT_BYTES)" in incidents[0].cause
    held = sum(len(str(s.variables)) for s in run.cp.scopes.values())
    assert held < 260_000, "stopped at the bound, not after all 30 copies"


def test_within_the_checkpoint_bound_the_same_model_runs() -> None:
    b = ProcessBuilder("mi")
    b.start_event("s").service_task(
        "each",
        "work",
        loop=LoopSpec(sequential=False, input_collection="=items", input_element="item"),
        inputs=(IoMapping("=blob", "local"),),
    ).end_event("e")
    b.sequence("s", "each", "e")
    run = Run(b.build(), services=_services(max_checkpoint_bytes=2_000_000))
    run.start({"items": list(range(30)), "blob": "y" * 20_000})
    assert not run.cp.incidents and len(run.waits(kind="job")) == 30


def _two_big_then(then: str, **fields: object) -> ProcessDefinition:
    """Two script tasks write 600 KB each (each fits), then ``then`` uses both."""
    b = ProcessBuilder("two")
    b.start_event("s")
    b.script_task("a", "=big", result_variable="a").script_task("b", "=big", result_variable="b")
    if then == "job":
        b.service_task("use", "work", **fields)
    elif then == "throw":
        b.intermediate_throw_event("use", message("out"), **fields)
    elif then == "call":
        b.call_activity("use", "child", **fields)
    elif then == "map":
        b.task("use", **fields)
    b.end_event("e")
    b.sequence("s", "a", "b", "use", "e")
    return b.build()


@pytest.mark.parametrize(
    ("then", "fields", "what", "effect"),
    [
        ("job", {}, "the job input of", DispatchJob),
        (
            "throw",
            {"inputs": (IoMapping("=a", "p1"), IoMapping("=b", "p2"))},
            "the input mappings of",
            ThrowMessage,
        ),
        (
            "call",
            {"propagate_all_parent_variables": True},
            "the inputs of call activity",
            StartChild,
        ),
        (
            "map",
            {"inputs": (IoMapping("=a", "p1"), IoMapping("=b", "p2"))},
            "the input mappings of",
            None,
        ),
    ],
)
def test_a_whole_that_is_over_the_variables_bound_is_an_incident_before_it_is_sent(
    then: str, fields: dict[str, object], what: str, effect: type | None
) -> None:
    run = Run(_two_big_then(then, **fields))
    step = run.start({"big": BIG})
    incident = run.incident("use")
    assert incident.cause_class == "InvalidVariables"
    assert what in incident.cause and "(DORMANT_MAX_VARIABLES_BYTES)" in incident.cause
    assert len(incident.cause) < 300
    if effect is not None:
        assert run.effects_of(effect, step) == []


def test_a_job_result_over_the_variables_bound_is_an_incident_at_its_node() -> None:
    b = ProcessBuilder("res")
    b.start_event("s").service_task("work", "work").end_event("e")
    b.sequence("s", "work", "e")
    run = Run(b.build())
    run.start()
    run.complete_job("work", a=BIG, b=BIG)
    incident = run.incident("work")
    assert "the result of" in incident.cause and "DORMANT_MAX_VARIABLES_BYTES" in incident.cause
    assert "a" not in run.variables


def test_a_multi_instance_output_is_charged_to_the_checkpoint() -> None:
    b = ProcessBuilder("out")
    b.start_event("s").script_task(
        "each",
        "=blob",
        result_variable="r",
        loop=LoopSpec(
            sequential=False,
            input_collection="=items",
            input_element="item",
            output_collection="results",
            output_element="=r",
        ),
    ).end_event("e")
    b.sequence("s", "each", "e")
    run = Run(b.build(), services=_services(max_checkpoint_bytes=300_000))
    run.start({"items": list(range(40)), "blob": "z" * 10_000})
    assert run.status == "active_incidents"
    assert {i.cause_class for i in run.cp.incidents.values()} == {"LimitExceeded"}


def test_the_bounds_are_settings_with_defaults() -> None:
    s = Settings.from_env({})
    assert s.limits.max_tokens == 20_000 == Limits().max_tokens
    assert s.limits.max_checkpoint_bytes == 16 * 1_048_576
    s = Settings.from_env({"DORMANT_MAX_TOKENS": "500", "DORMANT_MAX_CHECKPOINT_BYTES": "5000000"})
    assert s.limits.max_tokens == 500 and s.limits.max_checkpoint_bytes == 5_000_000


def test_a_computed_multi_instance_collection_is_bounded_like_a_variable() -> None:
    """``for i in 1..2000 return blob`` is 2,000 references to one string in FEEL and
    2,000 copies in the checkpoint: held to DORMANT_MAX_VARIABLES_BYTES first."""
    b = ProcessBuilder("coll")
    b.start_event("s").service_task(
        "each",
        "work",
        loop=LoopSpec(
            sequential=True, input_collection="=for i in 1..2000 return blob", input_element="x"
        ),
    ).end_event("e")
    b.sequence("s", "each", "e")
    run = Run(b.build())
    run.start({"blob": "q" * 1_000})
    incident = run.incident("each")
    assert incident.cause_class == "InvalidVariables"
    assert "the input collection of" in incident.cause
    assert not run.waits(kind="job")


def test_incident_snapshots_are_charged_and_left_out_past_the_checkpoint_bound() -> None:
    """Each incident keeps a copy of the variables its node saw: the incidents of many
    inner instances would copy them once each. Past the bound the copy is left out."""
    from dormant.engine_core.inputs import encoded_size

    b = ProcessBuilder("mi")
    b.start_event("s").service_task(
        "each",
        "work",
        loop=LoopSpec(sequential=False, input_collection="=items", input_element="item"),
        inputs=(IoMapping("={f: function(n) f(n + 1)}.f(1)", "local"),),  # fails: recursion
    ).end_event("e")
    b.sequence("s", "each", "e")
    run = Run(b.build(), services=_services(max_checkpoint_bytes=100_000))
    run.start({"items": list(range(30)), "blob": "w" * 5_000})
    incidents = list(run.cp.incidents.values())
    assert len(incidents) > 20, "enough incidents to pass the bound with their copies"
    kept = sum(encoded_size(i.data) for i in incidents if i.data)
    assert kept + encoded_size(run.variables) <= 100_000
    left_out = [i for i in incidents if not i.data]
    assert left_out and all("variables snapshot left out" in i.cause for i in left_out)


@pytest.mark.parametrize(
    ("variable", "raw"),
    [("DORMANT_MAX_TOKENS", "0"), ("DORMANT_MAX_CHECKPOINT_BYTES", "-1")],
)
def test_an_unusable_bound_setting_is_refused_naming_the_variable(variable: str, raw: str) -> None:
    from dormant.engine_core.errors import InvalidSetting

    with pytest.raises(InvalidSetting, match=variable):
        Settings.from_env({variable: raw})
