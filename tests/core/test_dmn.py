"""DMN decisions: reading (and refusing) and evaluating, table-driven, pure.

``table(...)`` writes a decision table the way Camunda Modeler saves it, so each case
is one line of inputs, outputs and rules; the expected result is Camunda 8's shape.
"""

# ruff: noqa: E501  (table-driven: one case, one line of XML)
from __future__ import annotations

from typing import Any

import pytest

from dormant.engine_core.dmn import evaluate_decision, is_dmn, read_dmn
from dormant.engine_core.errors import (
    DecisionEvaluationError,
    DecisionNotDeployed,
    InvalidModel,
    UnsupportedElement,
)

DMN13 = "https://www.omg.org/spec/DMN/20191111/MODEL/"
DMN15 = "https://www.omg.org/spec/DMN/20230324/MODEL/"


def definitions(*decisions: str, ns: str = DMN13, extra: str = "") -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<definitions xmlns="{ns}" id="defs" name="D" '
        'namespace="http://camunda.org/schema/1.0/dmn">'
        + "".join(decisions)
        + extra
        + "</definitions>"
    )


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def table(
    did: str,
    inputs: list[str],
    outputs: list[str | tuple[str, str]],
    rules: list[tuple[list[str], list[str]]],
    hit: str = "UNIQUE",
    aggregation: str | None = None,
    requires: tuple[str, ...] = (),
) -> str:
    """Outputs are names, or (name, outputValues text) for PRIORITY / OUTPUT ORDER."""
    agg = f' aggregation="{aggregation}"' if aggregation else ""
    xml = f'<decision id="{did}" name="{did.title()}">'
    for r in requires:
        xml += f'<informationRequirement id="ir_{did}_{r}"><requiredDecision href="#{r}"/></informationRequirement>'
    xml += f'<decisionTable id="t_{did}" hitPolicy="{hit}"{agg}>'
    for i, expr in enumerate(inputs):
        xml += f'<input id="i{i}" label="In {i}"><inputExpression id="ie{i}" typeRef="string"><text>{_esc(expr)}</text></inputExpression></input>'
    for j, out in enumerate(outputs):
        name, values = (out, None) if isinstance(out, str) else out
        xml += f'<output id="o{j}" name="{name}" typeRef="string">'
        if values:
            xml += f'<outputValues id="ov{j}"><text>{_esc(values)}</text></outputValues>'
        xml += "</output>"
    for k, (ins, outs) in enumerate(rules):
        xml += f'<rule id="r{k}">'
        xml += "".join(
            f'<inputEntry id="r{k}i{n}"><text>{_esc(t)}</text></inputEntry>'
            for n, t in enumerate(ins)
        )
        xml += "".join(
            f'<outputEntry id="r{k}o{n}"><text>{_esc(t)}</text></outputEntry>'
            for n, t in enumerate(outs)
        )
        xml += "</rule>"
    return xml + "</decisionTable></decision>"


def literal(
    did: str, expression: str, requires: tuple[str, ...] = (), variable: str | None = None
) -> str:
    xml = f'<decision id="{did}" name="{did.title()}">'
    if variable:
        xml += f'<variable id="v_{did}" name="{variable}"/>'
    for r in requires:
        xml += f'<informationRequirement id="ir_{did}_{r}"><requiredDecision href="#{r}"/></informationRequirement>'
    return (
        xml
        + f'<literalExpression id="le_{did}"><text>{_esc(expression)}</text></literalExpression></decision>'
    )


def run(xml: str, did: str, **variables: Any) -> Any:
    decisions = {d.id: d for d in read_dmn(xml)}
    return evaluate_decision(decisions, did, variables)


SCORES = [  # (input tests) -> (grade, points); rules overlap on purpose
    ([">= 90"], ['"A"', "3"]),
    ([">= 50"], ['"B"', "2"]),
    (["-"], ['"C"', "1"]),
]


def one_out(rules: list[tuple[list[str], list[str]]], n: int) -> list[tuple[list[str], list[str]]]:
    return [(ins, [outs[n]]) for ins, outs in rules]


CASES: list[tuple[str, str, dict[str, Any], Any]] = [
    # (case, decision XML of decision "d", variables, expected result)
    (
        "unique, one output",
        table("d", ["score"], ["grade"], [(["< 50"], ['"low"']), ([">= 50"], ['"high"'])]),
        {"score": 70},
        "high",
    ),
    (
        "unique, no match is null",
        table("d", ["score"], ["grade"], [(["< 50"], ['"low"'])]),
        {"score": 70},
        None,
    ),
    (
        "unique, two outputs give a context",
        table("d", ["score"], ["grade", "points"], [([">= 50"], ['"B"', "2"])]),
        {"score": 70},
        {"grade": "B", "points": 2},
    ),
    (
        "dash matches anything, null too",
        table("d", ["score"], ["grade"], [(["-"], ['"any"'])]),
        {},
        "any",
    ),
    (
        "null input matches no test",
        table("d", ["score"], ["grade"], [(["< 50"], ['"low"'])]),
        {},
        None,
    ),
    (
        "first",
        table("d", ["score"], ["grade"], one_out(SCORES, 0), hit="FIRST"),
        {"score": 95},
        "A",
    ),
    (
        "any, equal outputs",
        table("d", ["score"], ["grade"], [([">= 50"], ['"ok"']), (["> 10"], ['"ok"'])], hit="ANY"),
        {"score": 60},
        "ok",
    ),
    (
        "priority by output values",
        table("d", ["score"], [("grade", '"A","B","C"')], one_out(SCORES, 0)[::-1], hit="PRIORITY"),
        {"score": 95},
        "A",
    ),
    (
        "collect",
        table("d", ["score"], ["grade"], one_out(SCORES, 0), hit="COLLECT"),
        {"score": 60},
        ["B", "C"],
    ),
    (
        "collect, two outputs",
        table("d", ["score"], ["grade", "points"], SCORES, hit="COLLECT"),
        {"score": 60},
        [{"grade": "B", "points": 2}, {"grade": "C", "points": 1}],
    ),
    (
        "collect, no match is null",
        table("d", ["score"], ["grade"], [(["< 0"], ['"x"'])], hit="COLLECT"),
        {"score": 60},
        None,
    ),
    (
        "collect sum",
        table("d", ["score"], ["points"], one_out(SCORES, 1), hit="COLLECT", aggregation="SUM"),
        {"score": 95},
        6,
    ),
    (
        "collect min",
        table("d", ["score"], ["points"], one_out(SCORES, 1), hit="COLLECT", aggregation="MIN"),
        {"score": 95},
        1,
    ),
    (
        "collect max",
        table("d", ["score"], ["points"], one_out(SCORES, 1), hit="COLLECT", aggregation="MAX"),
        {"score": 60},
        2,
    ),
    (
        "collect count",
        table("d", ["score"], ["points"], one_out(SCORES, 1), hit="COLLECT", aggregation="COUNT"),
        {"score": 60},
        2,
    ),
    (
        "rule order",
        table("d", ["score"], ["grade"], one_out(SCORES, 0)[::-1], hit="RULE ORDER"),
        {"score": 95},
        ["C", "B", "A"],
    ),
    (
        "output order",
        table(
            "d", ["score"], [("grade", '"A","B","C"')], one_out(SCORES, 0)[::-1], hit="OUTPUT ORDER"
        ),
        {"score": 95},
        ["A", "B", "C"],
    ),
    (
        "two inputs, unary test lists",
        table(
            "d",
            ["season", "guests"],
            ["dish"],
            [(['"Fall","Winter"', "<= 8"], ['"Stew"']), (['"Fall","Winter"', "> 8"], ['"Roast"'])],
        ),
        {"season": "Fall", "guests": 10},
        "Roast",
    ),
    (
        "input expression and output entry are FEEL",
        table("d", ["amount * 2"], ["fee"], [(["[10..100]"], ["amount / 10"])]),
        {"amount": 20},
        2,
    ),
    (
        "literal expression",
        literal("d", 'if age >= 18 then "adult" else "minor"'),
        {"age": 20},
        "adult",
    ),
    ("dmn 1.5 namespace", literal("d", "1 + 1"), {}, 2),
]


@pytest.mark.parametrize(
    ("case", "decision", "variables", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_decision_results(
    case: str, decision: str, variables: dict[str, Any], expected: Any
) -> None:
    ns = DMN15 if "1.5" in case else DMN13
    assert run(definitions(decision, ns=ns), "d", **variables) == expected


def test_required_decisions_are_evaluated_first_and_visible_by_id_and_name() -> None:
    xml = definitions(
        table(
            "d",
            ["season", "guestCount"],
            ["dish"],
            [(['"Fall"', "-"], ['"Stew"']), (['"Winter"', "-"], ['"Roast"'])],
            requires=("season", "guestCount"),
        ),
        literal("season", 'if month > 9 then "Fall" else "Winter"', variable="season"),
        literal("guestCount", "adults + kids"),
        literal("byName", 'Season + "!"', requires=("season",)),
    )
    assert run(xml, "d", month=10, adults=2, kids=1) == "Stew"
    assert run(xml, "byName", month=1) == "Winter!"


def test_unique_with_two_matches_is_an_evaluation_error() -> None:
    xml = definitions(table("d", ["score"], ["grade"], one_out(SCORES, 0)))
    with pytest.raises(DecisionEvaluationError, match=r"rules 'r1', 'r2' all match; UNIQUE"):
        run(xml, "d", score=60)


def test_any_with_different_outputs_is_an_evaluation_error() -> None:
    xml = definitions(table("d", ["score"], ["grade"], one_out(SCORES, 0), hit="ANY"))
    with pytest.raises(DecisionEvaluationError, match="ANY"):
        run(xml, "d", score=60)


def test_sum_over_strings_is_an_evaluation_error() -> None:
    xml = definitions(
        table("d", ["score"], ["grade"], one_out(SCORES, 0), hit="COLLECT", aggregation="SUM")
    )
    with pytest.raises(DecisionEvaluationError, match="SUM"):
        run(xml, "d", score=60)


def test_unknown_decision_names_it_and_says_to_deploy() -> None:
    decisions = {d.id: d for d in read_dmn(definitions(literal("d", "1")))}
    with pytest.raises(DecisionNotDeployed, match=r"'other' is deployed.*dormant deploy FILE.dmn"):
        evaluate_decision(decisions, "other", {})


REFUSED = [
    # (case, extra XML in <definitions>, element id named, element type)
    (
        "business knowledge model",
        '<businessKnowledgeModel id="bkm" name="B"/>',
        "bkm",
        "businessKnowledgeModel",
    ),
    ("decision service", '<decisionService id="svc" name="S"/>', "svc", "decisionService"),
    (
        "boxed context",
        '<decision id="ctx" name="C"><context id="c1"/></decision>',
        "ctx",
        "decision",
    ),
    (
        "knowledge requirement",
        '<decision id="kr" name="K"><knowledgeRequirement id="k1"><requiredKnowledge href="#bkm"/></knowledgeRequirement><literalExpression id="l"><text>1</text></literalExpression></decision>',
        "kr",
        "decision",
    ),
    (
        "invocation",
        '<decision id="inv" name="I"><invocation id="i1"/></decision>',
        "inv",
        "decision",
    ),
    (
        "unknown hit policy",
        table("hp", ["x"], ["y"], [(["-"], ["1"])], hit="SOMETHING"),
        "t_hp",
        "decisionTable",
    ),
    (
        "priority without output values",
        table("pr", ["x"], ["y"], [(["-"], ["1"])], hit="PRIORITY"),
        "t_pr",
        "decisionTable",
    ),
    (
        "aggregation with rule order",
        table("ag", ["x"], ["y"], [(["-"], ["1"])], hit="RULE ORDER", aggregation="SUM"),
        "t_ag",
        "decisionTable",
    ),
]


@pytest.mark.parametrize(
    ("case", "extra", "element_id", "element_type"), REFUSED, ids=[c[0] for c in REFUSED]
)
def test_unsupported_elements_are_refused_by_name(
    case: str, extra: str, element_id: str, element_type: str
) -> None:
    with pytest.raises(UnsupportedElement) as info:
        read_dmn(definitions(literal("ok", "1"), extra=extra))
    assert (info.value.element_id, info.value.element_type) == (element_id, element_type)


MALFORMED = [
    ("not XML", "<definitions", "not well-formed"),
    (
        "a DTD",
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><definitions xmlns="' + DMN13 + '"/>',
        "forbidden",
    ),
    (
        "BPMN, not DMN",
        '<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"/>',
        "not a DMN",
    ),
    ("no decision", definitions(), "no decision"),
    (
        "bad FEEL in an output entry",
        definitions(table("d", ["x"], ["y"], [(["-"], ["1 +"])])),
        "not valid FEEL",
    ),
    ("bad unary test", definitions(table("d", ["x"], ["y"], [(["<<"], ["1"])])), "unary tests"),
    ("missing required decision", definitions(literal("d", "1", requires=("gone",))), "'gone'"),
    (
        "cycle",
        definitions(literal("a", "1", requires=("b",)), literal("b", "1", requires=("a",))),
        "cycle",
    ),
    (
        "rule with too few entries",
        definitions(table("d", ["x", "z"], ["y"], [(["-"], ["1"])])),
        "rule 'r0'",
    ),
]


@pytest.mark.parametrize(("case", "xml", "message"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_documents_are_invalid_models(case: str, xml: str, message: str) -> None:
    with pytest.raises(InvalidModel, match=message):
        read_dmn(xml)


def test_is_dmn_tells_dmn_from_bpmn_by_namespace() -> None:
    assert is_dmn(definitions(literal("d", "1")))
    assert not is_dmn('<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"/>')
    assert not is_dmn("not xml")


# -- explaining: what Camunda's API reports as evaluatedInputs and matchedRules -------------


def explain(xml: str, did: str, **variables: Any) -> list[Any]:
    from dormant.engine_core.dmn import explain_decision

    decisions = {d.id: d for d in read_dmn(xml)}
    trace = explain_decision(decisions, did, variables)
    assert trace[-1].result == evaluate_decision(decisions, did, variables)
    return [
        (
            step.decision_id,
            [(i.id, i.name, i.value) for i in step.inputs],
            [(r.id, r.index, [(o.id, o.name, o.value) for o in r.outputs]) for r in step.matched],
        )
        for step in trace
    ]


@pytest.mark.parametrize(
    ("hit", "score", "matched"),
    [
        # single hit: the one rule the result came from, not every rule that matched
        ("FIRST", 95, [("r0", 1, [("o0", "grade", "A"), ("o1", "points", 3)])]),
        ("FIRST", 60, [("r1", 2, [("o0", "grade", "B"), ("o1", "points", 2)])]),
        (
            "PRIORITY",
            60,
            [("r2", 3, [("o0", "grade", "C"), ("o1", "points", 1)])],
        ),
        # multi hit: every rule that matched, in the result's order
        (
            "RULE ORDER",
            60,
            [
                ("r1", 2, [("o0", "grade", "B"), ("o1", "points", 2)]),
                ("r2", 3, [("o0", "grade", "C"), ("o1", "points", 1)]),
            ],
        ),
    ],
)
def test_explain_names_the_inputs_and_the_rules_that_made_the_result(
    hit: str, score: int, matched: list[Any]
) -> None:
    outputs: list[str | tuple[str, str]] = [("grade", '"C","B","A"'), "points"]
    xml = definitions(table("g", ["score"], outputs, SCORES, hit=hit))
    ((did, inputs, rules),) = explain(xml, "g", score=score)
    assert did == "g" and inputs == [("i0", "In 0", score)]
    assert rules == matched


def test_explain_lists_required_decisions_first_and_no_match_matches_nothing() -> None:
    xml = definitions(
        literal("tier", 'if amount > 100 then "big" else "small"', variable="tier"),
        table("route", ["tier"], ["queue"], [(['"big"'], ['"desk"'])], requires=("tier",)),
    )
    assert explain(xml, "route", amount=500) == [
        ("tier", [], []),
        ("route", [("i0", "In 0", "big")], [("r0", 1, [("o0", "queue", "desk")])]),
    ]
    assert explain(xml, "route", amount=5) == [
        ("tier", [], []),
        ("route", [("i0", "In 0", "small")], []),
    ]
