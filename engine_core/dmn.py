"""Read DMN decisions (as Camunda Modeler saves them) and evaluate them, purely.

``read_dmn(source) -> list[Decision]`` takes DMN 1.3/1.4/1.5 XML; ``evaluate_decision(
decisions, decision_id, variables)`` returns the decision's result as a JSON value in
Camunda 8's shape, which is what a business rule task writes into its result variable:

* a single-hit table (UNIQUE, FIRST, ANY, PRIORITY) with one output -> the value;
  with several outputs -> a context ``{output name: value}``;
* COLLECT (without aggregation), RULE ORDER, OUTPUT ORDER -> a list of such values;
  COLLECT with SUM / MIN / MAX / COUNT -> the aggregate;
* no rule matched -> null, whatever the hit policy (Camunda 8: no default outputs);
* a literal-expression decision -> the expression's value.

``explain_decision`` evaluates the same way and also says how: for every decision
evaluated (the required ones first) its result, its table's input values and the
rules that made the result (for a single-hit policy the one rule chosen, for a
multi-hit policy every rule that matched, in the result's order) with their output
values -- what Camunda's API reports as ``evaluatedInputs`` and ``matchedRules``.

A decision's required decisions (``informationRequirement/requiredDecision``) are
evaluated first; their results are visible to it by the required decision's id and by
its name (Camunda 8 resolves both).

Like ``bpmn.py``, the reader refuses what it would not run: business knowledge models,
decision services, boxed contexts / invocations / relations, default output entries,
PRIORITY without output values -- each with ``UnsupportedElement`` naming the element.
Every FEEL text is compiled at read time, so a syntax error refuses the file at deploy
(``InvalidModel``) instead of parking every instance that reaches the decision.

At run time FEEL itself is null-propagating (a failing input expression is null, and
null matches only ``-``); what DMN forbids -- UNIQUE with two matches, ANY with
differing outputs, an aggregate over non-numbers -- raises ``DecisionEvaluationError``,
which the engine turns into an incident at the business rule task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from xml.etree.ElementTree import Element, ParseError

import defusedxml  # type: ignore[import-untyped]
import defusedxml.ElementTree as SafeET  # type: ignore[import-untyped]

from dormant.engine_core.errors import (
    DecisionEvaluationError,
    DecisionNotDeployed,
    ExpressionError,
    InvalidModel,
    UnsupportedElement,
    shorten,
)
from dormant.engine_core.feel import compile_expression, evaluate, evaluate_unary_tests, to_json
from dormant.engine_core.inputs import check_model_name
from dormant.engine_core.xml_input import check_depth, model_text

__all__ = [
    "DMN_NAMESPACES",
    "Decision",
    "DecisionEvaluation",
    "DecisionTable",
    "EvaluatedInput",
    "EvaluatedOutput",
    "MatchedRule",
    "Rule",
    "TableInput",
    "TableOutput",
    "evaluate_decision",
    "explain_decision",
    "is_dmn",
    "read_dmn",
]

# DMN 1.3, 1.4, 1.5: what Camunda Modeler writes for Camunda 8.
DMN_NAMESPACES = frozenset(
    {
        "https://www.omg.org/spec/DMN/20191111/MODEL/",
        "https://www.omg.org/spec/DMN/20211108/MODEL/",
        "https://www.omg.org/spec/DMN/20230324/MODEL/",
    }
)
SINGLE_HIT = frozenset({"UNIQUE", "FIRST", "ANY", "PRIORITY"})
MULTI_HIT = frozenset({"COLLECT", "RULE ORDER", "OUTPUT ORDER"})
AGGREGATIONS = frozenset({"SUM", "MIN", "MAX", "COUNT"})

# Children of <definitions> / <decision> that carry no behaviour.
_IGNORED_TOP = frozenset(
    {
        "inputData",
        "knowledgeSource",
        "textAnnotation",
        "association",
        "group",
        "description",
        "extensionElements",
        "itemDefinition",
        "DMNDI",
    }
)
_ZEEBE = "http://camunda.org/schema/zeebe/1.0"
_IGNORED_IN_DECISION = frozenset(
    {
        "description",
        "extensionElements",
        "variable",
        "question",
        "allowedAnswers",
        "authorityRequirement",
        "supportedObjective",
        "impactedPerformanceIndicator",
        "decisionMaker",
        "decisionOwner",
        "usingProcess",
        "usingTask",
    }
)


@dataclass(frozen=True, slots=True)
class TableInput:
    expression: str  # FEEL, no leading "="
    label: str | None = None
    id: str = ""


@dataclass(frozen=True, slots=True)
class TableOutput:
    name: str | None
    type_ref: str | None = None
    # ``outputValues`` as FEEL values (JSON form): the order PRIORITY / OUTPUT ORDER use.
    values: tuple[Any, ...] = ()
    id: str = ""
    label: str | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    inputs: tuple[str, ...]  # unary tests; "-" matches anything
    outputs: tuple[str, ...]  # FEEL expressions; "" is null


@dataclass(frozen=True, slots=True)
class DecisionTable:
    hit_policy: str
    aggregation: str | None
    inputs: tuple[TableInput, ...]
    outputs: tuple[TableOutput, ...]
    rules: tuple[Rule, ...]


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision. Exactly one of ``table`` / ``literal`` is set."""

    id: str
    name: str | None
    required: tuple[str, ...] = ()  # ids of the decisions it requires
    table: DecisionTable | None = None
    literal: str | None = None
    variable: str | None = None  # the <variable name>, if any
    # zeebe:versionTag: what a business rule task bound by versionTag asks for.
    version_tag: str | None = None


# -- reading --------------------------------------------------------------------------


def _local(el: Element) -> tuple[str, str]:
    tag = el.tag
    if tag.startswith("{"):
        ns, _, name = tag[1:].partition("}")
        return ns, name
    return "", tag


def _parse(source: str | bytes) -> Element:
    try:
        root: Element = SafeET.fromstring(model_text(source), forbid_dtd=True)
    except ParseError as exc:
        raise InvalidModel(f"the document is not well-formed XML: {exc}") from exc
    except defusedxml.DefusedXmlException as exc:
        raise InvalidModel(f"the document uses a forbidden XML construct: {exc}") from exc
    check_depth(root)
    return root


def is_dmn(source: str | bytes) -> bool:
    """Whether ``source`` is a DMN document (by its root element's namespace), so a
    deploy can tell a .dmn from a .bpmn by content, never by file name."""
    try:
        root = _parse(source)
    except InvalidModel:
        return False
    ns, name = _local(root)
    return name == "definitions" and "omg.org/spec/DMN/" in ns


def read_dmn(source: str | bytes) -> list[Decision]:
    """Every decision of a DMN document, in document order."""
    root = _parse(source)
    ns, name = _local(root)
    if name != "definitions" or ns not in DMN_NAMESPACES:
        raise InvalidModel(
            f"not a DMN 1.3/1.4/1.5 document: root element {{{ns}}}{name} "
            f"(expected definitions in one of {sorted(DMN_NAMESPACES)})"
        )
    decisions: list[Decision] = []
    for el in root:
        kind = _local(el)[1]
        if kind == "decision":
            decisions.append(_read_decision(el))
        elif kind not in _IGNORED_TOP:
            raise _refuse(el, f"a DMN {kind} is not supported")
    if not decisions:
        raise InvalidModel("the DMN document defines no decision")
    _check_requirements(decisions)
    return decisions


def _refuse(el: Element, why: str) -> UnsupportedElement:
    return UnsupportedElement(el.get("id", "?"), _local(el)[1], el.get("name"), why)


def _text(el: Element | None) -> str:
    """The ``<text>`` child of an entry or expression ("" when absent)."""
    if el is None:
        return ""
    for child in el:
        if _local(child)[1] == "text":
            return (child.text or "").strip()
    return ""


def _child(el: Element, name: str) -> Element | None:
    return next((c for c in el if _local(c)[1] == name), None)


def _compile(text: str, where: str) -> None:

    try:
        compile_expression(text)
    except ExpressionError as exc:
        raise InvalidModel(f"{where}: not valid FEEL: {exc}") from exc


def _compile_tests(text: str, where: str) -> None:

    try:
        evaluate_unary_tests(text, None, {})  # compiles (cached); the verdict is unused
    except ExpressionError as exc:
        raise InvalidModel(f"{where}: not valid FEEL unary tests: {exc}") from exc


def _read_decision(el: Element) -> Decision:
    did = el.get("id")
    if not did:
        raise InvalidModel("a DMN decision has no id")
    check_model_name(did, "decision id")
    check_model_name(el.get("name"), f"decision {shorten(did, 40)}: name")
    required: list[str] = []
    table: DecisionTable | None = None
    literal: str | None = None
    variable: str | None = None
    version_tag: str | None = None
    for child in el:
        kind = _local(child)[1]
        if kind == "extensionElements":
            for ext in child:
                if _local(ext) == (_ZEEBE, "versionTag"):
                    version_tag = (ext.get("value") or "").strip() or None
                    check_model_name(version_tag, f"decision {shorten(did, 40)}: version tag")
        elif kind == "informationRequirement":
            ref = _child(child, "requiredDecision")
            if ref is not None:
                href = ref.get("href", "")
                if not href.startswith("#") or len(href) < 2:
                    raise _refuse(child, f"requiredDecision href {href!r} is not a local '#id'")
                required.append(href[1:])
        elif kind == "knowledgeRequirement":
            raise _refuse(el, "business knowledge models (knowledgeRequirement) are not supported")
        elif kind == "variable":
            variable = child.get("name") or None
        elif kind == "decisionTable":
            table = _read_table(did, child)
        elif kind == "literalExpression":
            literal = _text(child)
            if not literal:
                raise InvalidModel(f"decision {did!r}: the literal expression is empty")
            _compile(literal, f"decision {did!r}: literal expression")
        elif kind not in _IGNORED_IN_DECISION:
            raise _refuse(el, f"a decision whose logic is a {kind} is not supported")
    if table is None and literal is None:
        raise _refuse(el, "a decision needs a decision table or a literal expression")
    return Decision(
        did, el.get("name") or None, tuple(required), table, literal, variable, version_tag
    )


def _read_table(did: str, el: Element) -> DecisionTable:

    policy = (el.get("hitPolicy") or "UNIQUE").strip().upper()
    aggregation = (el.get("aggregation") or "").strip().upper() or None
    where = f"decision {did!r}"
    if policy not in SINGLE_HIT | MULTI_HIT:
        raise _refuse(el, f"hit policy {policy!r} is not supported")
    if aggregation is not None and (policy != "COLLECT" or aggregation not in AGGREGATIONS):
        raise _refuse(el, f"aggregation {aggregation!r} with hit policy {policy!r}")
    inputs: list[TableInput] = []
    outputs: list[TableOutput] = []
    rules: list[Rule] = []
    for child in el:
        kind = _local(child)[1]
        if kind == "input":
            text = _text(_child(child, "inputExpression"))
            if not text:
                raise InvalidModel(f"{where}: input {child.get('id')!r} has no inputExpression")
            _compile(text, f"{where}: input {child.get('label') or child.get('id')!r}")
            inputs.append(TableInput(text, child.get("label"), child.get("id") or ""))
        elif kind == "output":
            if _child(child, "defaultOutputEntry") is not None:
                raise _refuse(child, "default output entries are not supported")
            values_text = _text(_child(child, "outputValues"))
            values: tuple[Any, ...] = ()
            if values_text:
                _compile(f"[{values_text}]", f"{where}: output values")
                listed = to_json(evaluate(f"[{values_text}]", {}))
                values = tuple(listed) if isinstance(listed, list) else ()
            outputs.append(
                TableOutput(
                    child.get("name") or None,
                    child.get("typeRef"),
                    values,
                    child.get("id") or "",
                    child.get("label"),
                )
            )
        elif kind == "rule":
            rules.append(_read_rule(where, child))
        elif kind not in ("description", "extensionElements", "annotation"):
            raise _refuse(child, f"a {kind} in a decision table is not supported")
    if not outputs:
        raise InvalidModel(f"{where}: the decision table has no output")
    if len(outputs) > 1 and not all(o.name for o in outputs):
        raise InvalidModel(f"{where}: a table with several outputs needs a name on each output")
    if aggregation is not None and len(outputs) > 1:
        raise _refuse(el, f"aggregation {aggregation} over several outputs")
    if policy in ("PRIORITY", "OUTPUT ORDER") and not any(o.values for o in outputs):
        raise _refuse(el, f"hit policy {policy} needs output values to order by")
    for rule in rules:
        if len(rule.inputs) != len(inputs) or len(rule.outputs) != len(outputs):
            raise InvalidModel(
                f"{where}: rule {rule.id!r} has {len(rule.inputs)} input and "
                f"{len(rule.outputs)} output entries; the table has {len(inputs)} and "
                f"{len(outputs)}"
            )
    return DecisionTable(policy, aggregation, tuple(inputs), tuple(outputs), tuple(rules))


def _read_rule(where: str, el: Element) -> Rule:
    rid = el.get("id") or "?"
    ins: list[str] = []
    outs: list[str] = []
    for child in el:
        kind = _local(child)[1]
        if kind == "inputEntry":
            text = _text(child) or "-"
            _compile_tests(text, f"{where}: rule {rid!r} input entry {text!r}")
            ins.append(text)
        elif kind == "outputEntry":
            text = _text(child)
            if text:
                _compile(text, f"{where}: rule {rid!r} output entry")
            outs.append(text)
    return Rule(rid, tuple(ins), tuple(outs))


def _check_requirements(decisions: list[Decision]) -> None:
    ids: set[str] = set()
    for d in decisions:
        if d.id in ids:
            raise InvalidModel(f"two DMN decisions share the id {d.id!r}")
        ids.add(d.id)
    for d in decisions:
        for r in d.required:
            if r not in ids:
                raise InvalidModel(
                    f"decision {d.id!r} requires {r!r}, which is not a decision of this file"
                )
    by_id = {d.id: d for d in decisions}

    def visit(did: str, path: tuple[str, ...]) -> None:
        if did in path:
            raise InvalidModel(f"decisions require each other in a cycle: {' -> '.join(path)}")
        for r in by_id[did].required:
            visit(r, (*path, did))

    for d in decisions:
        visit(d.id, ())


# -- evaluating -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EvaluatedInput:
    id: str
    name: str  # the input's label, else its expression
    value: Any  # JSON


@dataclass(frozen=True, slots=True)
class EvaluatedOutput:
    id: str
    name: str  # the output's name, else its label
    value: Any  # JSON


@dataclass(frozen=True, slots=True)
class MatchedRule:
    id: str
    index: int  # 1-based position in the table
    outputs: tuple[EvaluatedOutput, ...]


@dataclass(frozen=True, slots=True)
class DecisionEvaluation:
    """How one decision came to its result (``explain_decision``)."""

    decision_id: str
    result: Any  # JSON, as ``evaluate_decision`` returns it
    inputs: tuple[EvaluatedInput, ...] = ()
    matched: tuple[MatchedRule, ...] = ()


def evaluate_decision(
    decisions: Mapping[str, Decision],
    decision_id: str,
    variables: Mapping[str, Any],
    *,
    now: datetime | None = None,
) -> Any:
    """The result of ``decision_id`` as a JSON value (module docstring: its shape)."""

    return to_json(_evaluate(decisions, decision_id, dict(variables), now, (), None))


def explain_decision(
    decisions: Mapping[str, Decision],
    decision_id: str,
    variables: Mapping[str, Any],
    *,
    now: datetime | None = None,
) -> list[DecisionEvaluation]:
    """Every decision evaluated for ``decision_id``, each required one before the
    decision requiring it, ``decision_id``'s own last (module docstring). Raises as
    ``evaluate_decision`` does."""

    trace: list[DecisionEvaluation] = []
    _evaluate(decisions, decision_id, dict(variables), now, (), trace)
    return trace


def _evaluate(
    decisions: Mapping[str, Decision],
    decision_id: str,
    context: dict[str, Any],
    now: datetime | None,
    path: tuple[str, ...],
    trace: list[DecisionEvaluation] | None,
) -> Any:
    decision = decisions.get(decision_id)
    if decision is None:
        needed = f" (required by {path[-1]!r})" if path else ""
        raise DecisionNotDeployed(
            f"no DMN decision {decision_id!r} is deployed{needed}; deploy the .dmn file that "
            "defines it (`dormant deploy FILE.dmn`), then retry the incident"
        )
    if decision_id in path:
        raise DecisionEvaluationError(f"decisions require each other: {' -> '.join(path)}")
    if decision.required:
        context = dict(context)
        for rid in decision.required:
            value = _evaluate(decisions, rid, context, now, (*path, decision_id), trace)
            required = decisions[rid]
            for name in {rid, required.name, required.variable} - {None}:
                context[str(name)] = value
    if decision.literal is not None:
        result = evaluate(decision.literal, context, now=now)
        if trace is not None:
            trace.append(DecisionEvaluation(decision_id, to_json(result)))
        return result
    assert decision.table is not None
    return _evaluate_table(decision, decision.table, context, now, trace)


def _evaluate_table(
    decision: Decision,
    table: DecisionTable,
    context: dict[str, Any],
    now: datetime | None,
    trace: list[DecisionEvaluation] | None,
) -> Any:

    values = [evaluate(i.expression, context, now=now) for i in table.inputs]
    matched: list[tuple[Rule, Any]] = []
    for rule in table.rules:
        if all(
            test == "-" or evaluate_unary_tests(test, value, context) is True
            for test, value in zip(rule.inputs, values, strict=True)
        ):
            row = [evaluate(o, context, now=now) if o else None for o in rule.outputs]
            matched.append((rule, row))
    result = _hit(decision, table, matched)
    if trace is not None:
        # The rules the result came from: a single-hit policy's one, else all of them.
        made = matched[:1] if table.hit_policy in SINGLE_HIT else matched
        position = {id(rule): n for n, rule in enumerate(table.rules, 1)}
        trace.append(
            DecisionEvaluation(
                decision.id,
                to_json(result),
                tuple(
                    EvaluatedInput(i.id, i.label or i.expression, to_json(v))
                    for i, v in zip(table.inputs, values, strict=True)
                ),
                tuple(
                    MatchedRule(
                        rule.id,
                        position[id(rule)],
                        tuple(
                            EvaluatedOutput(o.id, o.name or o.label or "", to_json(v))
                            for o, v in zip(table.outputs, row, strict=True)
                        ),
                    )
                    for rule, row in made
                ),
            )
        )
    return result


def _hit(decision: Decision, table: DecisionTable, matched: list[tuple[Rule, Any]]) -> Any:
    """The hit policy applied to the matched rules (in place: PRIORITY and OUTPUT ORDER
    sort them, so the rule a single hit chose comes first)."""
    if not matched:
        return None
    policy = table.hit_policy
    label = f"decision {decision.id!r} (hit policy {policy})"
    if policy == "UNIQUE" and len(matched) > 1:
        raise DecisionEvaluationError(
            f"{label}: rules {', '.join(repr(r.id) for r, _ in matched)} all match; "
            "UNIQUE allows one"
        )
    if policy == "ANY" and any(row != matched[0][1] for _, row in matched):
        raise DecisionEvaluationError(
            f"{label}: rules {', '.join(repr(r.id) for r, _ in matched)} match with "
            "different outputs; ANY needs them equal"
        )
    if policy in ("PRIORITY", "OUTPUT ORDER"):
        matched.sort(key=lambda m: _priority(table.outputs, m[1]))  # stable: rule order next
    results = [_shape(table.outputs, row) for _, row in matched]
    if policy in SINGLE_HIT:
        return results[0]
    if table.aggregation is None:
        return results
    return _aggregate(label, table.aggregation, results)


def _priority(outputs: tuple[TableOutput, ...], row: list[Any]) -> tuple[int, ...]:
    """Index of each output value in its output's ``outputValues`` (unlisted last)."""

    key = []
    for out, value in zip(outputs, row, strict=True):
        if out.values:
            j = to_json(value)
            key.append(out.values.index(j) if j in out.values else len(out.values))
    return tuple(key)


def _shape(outputs: tuple[TableOutput, ...], row: list[Any]) -> Any:
    if len(outputs) == 1:
        return row[0]
    return {str(o.name): v for o, v in zip(outputs, row, strict=True)}


def _aggregate(label: str, aggregation: str, results: list[Any]) -> Any:
    if aggregation == "COUNT":
        return Decimal(len(results))
    present = [r for r in results if r is not None]
    if not present:
        return None
    if aggregation == "SUM":
        if not all(isinstance(r, Decimal) for r in present):
            raise DecisionEvaluationError(f"{label}: SUM over values that are not all numbers")
        return sum(present, Decimal(0))
    try:
        return min(present) if aggregation == "MIN" else max(present)
    except TypeError as exc:
        raise DecisionEvaluationError(
            f"{label}: {aggregation} over values that cannot be compared"
        ) from exc
