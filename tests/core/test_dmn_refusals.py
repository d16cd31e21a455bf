"""DMN decisions a reader refuses (each naming the decision and the reason) and the
evaluation edges of aggregation and of requirements across deployments.
"""

# ruff: noqa: E501  (table-driven: one case, one line of XML)
from __future__ import annotations

import pytest

from dormant.engine_core.dmn import evaluate_decision, read_dmn
from dormant.engine_core.errors import DecisionEvaluationError, InvalidModel, UnsupportedElement
from tests.core.test_dmn import definitions, literal, run, table

_OUT = '<output id="o0" name="y" typeRef="string"/>'
_RULE = '<rule id="r0"><inputEntry id="e0"><text>-</text></inputEntry><outputEntry id="e1"><text>1</text></outputEntry></rule>'
_IN = '<input id="i0"><inputExpression id="ie0"><text>x</text></inputExpression></input>'


def _table(body: str, attrs: str = "") -> str:
    return (
        f'<decision id="d" name="D"><decisionTable id="t"{attrs}>{body}</decisionTable></decision>'
    )


INVALID = [
    pytest.param(
        '<decision name="Nameless"><literalExpression id="l"><text>1</text></literalExpression></decision>',
        "a DMN decision has no id",
        id="no-id",
    ),
    pytest.param(
        '<decision id="d"><literalExpression id="l"><text> </text></literalExpression></decision>',
        "decision 'd': the literal expression is empty",
        id="empty-literal",
    ),
    pytest.param(
        _table('<input id="i0"><inputExpression id="ie0"/></input>' + _OUT),
        "decision 'd': input 'i0' has no inputExpression",
        id="input-without-expression",
    ),
    pytest.param(
        _table(_IN + _RULE), "decision 'd': the decision table has no output", id="no-output"
    ),
    pytest.param(
        _table(_IN + _OUT + '<output id="o1" typeRef="string"/>'),
        "decision 'd': a table with several outputs needs a name on each output",
        id="unnamed-output",
    ),
    pytest.param(
        literal("d", "1") + literal("d", "2"),
        "two DMN decisions share the id 'd'",
        id="duplicate-id",
    ),
]


@pytest.mark.parametrize(("decisions", "reason"), INVALID)
def test_a_decision_that_cannot_be_read_is_an_invalid_model(decisions: str, reason: str) -> None:
    with pytest.raises(InvalidModel) as refused:
        read_dmn(definitions(decisions))
    assert reason in str(refused.value)


UNSUPPORTED = [
    pytest.param(
        '<decision id="d"><informationRequirement id="ir"><requiredDecision href="other"/></informationRequirement><literalExpression id="l"><text>1</text></literalExpression></decision>',
        "requiredDecision href 'other' is not a local '#id'",
        "ir",
        id="non-local-href",
    ),
    pytest.param(
        '<decision id="d"><variable id="v" name="d"/></decision>',
        "a decision needs a decision table or a literal expression",
        "d",
        id="no-logic",
    ),
    pytest.param(
        _table(
            _IN
            + '<output id="o0" name="y"><defaultOutputEntry id="de"><text>1</text></defaultOutputEntry></output>'
        ),
        "default output entries are not supported",
        "o0",
        id="default-output",
    ),
    pytest.param(
        _table(_IN + _OUT + '<crosstab id="x1"/>'),
        "a crosstab in a decision table is not supported",
        "x1",
        id="unknown-table-child",
    ),
    pytest.param(
        _table(_IN + _OUT + '<output id="o1" name="z"/>', ' hitPolicy="COLLECT" aggregation="SUM"'),
        "aggregation SUM over several outputs",
        "t",
        id="aggregation-over-outputs",
    ),
]


@pytest.mark.parametrize(("decisions", "reason", "element_id"), UNSUPPORTED)
def test_an_unsupported_decision_shape_is_refused_by_element(
    decisions: str, reason: str, element_id: str
) -> None:
    with pytest.raises(UnsupportedElement) as refused:
        read_dmn(definitions(decisions))
    assert reason in str(refused.value)
    assert refused.value.element_id == element_id


def test_an_aggregate_over_no_present_values_is_null_and_count_counts_them() -> None:
    rules = [(["-"], ["null"]), (["-"], ["null"])]
    for aggregation, expected in (("SUM", None), ("MAX", None), ("COUNT", 2)):
        xml = definitions(table("d", ["x"], ["y"], rules, hit="COLLECT", aggregation=aggregation))
        assert run(xml, "d", x=1) == expected, aggregation


def test_an_aggregate_over_values_that_cannot_be_compared_is_an_evaluation_error() -> None:
    xml = definitions(
        table(
            "d", ["x"], ["y"], [(["-"], ['"a"']), (["-"], ["1"])], hit="COLLECT", aggregation="MAX"
        )
    )
    with pytest.raises(DecisionEvaluationError, match="MAX over values that cannot be compared"):
        run(xml, "d", x=1)


def test_decisions_deployed_apart_that_require_each_other_are_an_evaluation_error() -> None:
    """Each document is valid alone; the latest versions of both, lent together, loop."""
    (first, _) = read_dmn(definitions(literal("a", "b + 1", requires=("b",)), literal("b", "1")))
    (second, _) = read_dmn(definitions(literal("b", "a + 1", requires=("a",)), literal("a", "1")))
    decisions = {"a": first, "b": second}
    with pytest.raises(DecisionEvaluationError, match="decisions require each other: a -> b"):
        evaluate_decision(decisions, "a", {})
