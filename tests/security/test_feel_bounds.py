"""FEEL under hostile input: every bound stops an evaluation with a classified error.

Each case is one a model author can write to hold a worker or take its memory; each
would run for minutes or gigabytes without the bound it names (see docs/limits.md,
"Bounded FEEL"). Pure and fast: the bounds are counts, so these run in milliseconds
and say the same on every machine.
"""

from __future__ import annotations

from typing import Any

import pytest

from dormant.engine_core.builder import ProcessBuilder
from dormant.engine_core.errors import ExpressionError, ExpressionLimitExceeded, InvalidModel
from dormant.engine_core.expression_check import check_expressions
from dormant.engine_core.feel import evaluate
from dormant.engine_core.feel.limits import DEFAULT_LIMITS, Limits
from tests.core.enginekit import Run

DOUBLING = (
    "{" + ", ".join(['a0: "xx"'] + [f"a{i}: a{i - 1} + a{i - 1}" for i in range(1, 32)]) + "}"
)


SHARED = (
    '{a: for i in 1..100 return "x", b: for i in 1..100 return a, '
    "c: for i in 1..100 return b, d: for i in 1..100 return c}.d"
)


def refused(expression: str, limit: str, variables: dict[str, Any] | None = None) -> str:
    with pytest.raises(ExpressionLimitExceeded) as info:
        evaluate(expression, variables or {})
    assert info.value.limit == limit, str(info.value)
    message = str(info.value)
    assert "\n" not in message and len(message) < 600
    return message


@pytest.mark.parametrize(
    ("expression", "limit"),
    [
        ("count(for x in 1..1000000000 return x)", "collection_size"),
        ('string join(for i in 1..10000000 return "a")', "collection_size"),
        (DOUBLING, "string_length"),
        ("sum(for x in 1..1000 return count(for y in 1..1000 return 1))", "steps"),
        ("count(for x in 1..90000 return list contains(big, x))", "steps"),
        ("{f: function(n) f(n + 1)}.f(1)", "call_depth"),
        ("flatten(for i in 1..400 return big)", "collection_size"),
        ("concatenate(big, big)", "collection_size"),
        ("string(for i in 1..100 return for j in 1..100 return text)", "string_length"),
        ('replace(text, "a", text)', "string_length"),
        (SHARED, "steps"),  # 400 steps to build, 10^8 values to write out
    ],
)
def test_each_bound_stops_its_hostile_expression(expression: str, limit: str) -> None:
    variables = {"big": list(range(90_000)), "text": "a" * 5_000}
    message = refused(expression, limit, variables)
    assert f"{expression[:40]}" in message  # the message quotes the expression


def test_exponential_regex_runs_in_linear_time() -> None:
    """Backtracking engines take minutes on this at 30 characters; RE2 takes microseconds,
    so a 200,000-character input is answered, no step budget needed."""
    assert evaluate('matches(s, "(a+)+$")', {"s": "a" * 200_000 + "b"}) is False
    assert evaluate('matches(s, "(a|aa)*c")', {"s": "a" * 200_000}) is False
    assert evaluate('replace(s, "(a+)+b", "x")', {"s": "a" * 1_000 + "b"}) == "x"


# No match, so one RE2 call walks the whole program for every byte: 0.5 s here, 13 s at
# 80 KB, and no soft time limit interrupts a call into RE2.
REGEX_BOMB = "(a?){900}a{900}"
REGEX_BOMB_INPUT = ("a" * 800 + "b") * 10


@pytest.mark.parametrize(
    "expression",
    [
        f'matches(s, "{REGEX_BOMB}")',
        f'replace(s, "{REGEX_BOMB}", "x")',
        f'split(s, "{REGEX_BOMB}")',
        f'extract(s, "{REGEX_BOMB}")',
    ],
)
def test_every_regex_built_in_pays_input_times_program_before_it_runs(expression: str) -> None:
    message = refused(expression, "steps", {"s": REGEX_BOMB_INPUT})
    assert "4,504 instructions" in message and "8,010 bytes" in message


def test_a_regex_program_past_its_bound_is_refused_at_compile_naming_the_limit() -> None:
    """XPath's ``\\w`` spans Unicode categories (about 1,500 instructions): twenty of
    them are past the 20,000 a pattern may compile to, whatever the input."""
    message = refused('matches("a", "\\w{20}")', "regex_program_size")
    assert "over the limit of 20,000" in message
    assert evaluate('matches(s, "^\\w+@\\w+$")', {"s": "a" * 5_000 + "@b"}) is True


def test_a_regex_the_linear_engine_cannot_run_is_refused_not_nulled() -> None:
    with pytest.raises(ExpressionError, match="back-reference"):
        evaluate('matches("aa", "(a+)\\1")', {})
    assert evaluate('matches("abab", "^(ab)\\1$")', {}) is True  # fixed text: rewritten
    assert evaluate('matches("a", "(a")', {}) is None  # malformed is null, as before


def test_long_sums_and_chains_evaluate_without_recursion() -> None:
    assert evaluate("+".join(["1"] * 1_000), {}) == 1_000
    assert evaluate(" and ".join(["true"] * 1_000), {}) is True
    assert evaluate(" or ".join(["false"] * 1_000), {}) is False
    assert evaluate("*".join(["1"] * 1_000) + " - 1", {}) == 0


def test_deep_nesting_is_a_classified_error_never_recursion() -> None:
    refused("[" * 500 + "1" + "]" * 500, "nesting_depth")
    refused("-" * 2_000 + "1", "nesting_depth")
    deep: list[Any] = []
    for _ in range(20_000):
        deep = [deep]
    refused("count(x)", "nesting_depth", {"x": deep})  # a variable nested 20,000 deep


def test_expression_length_is_bounded() -> None:
    refused("1" + " " * DEFAULT_LIMITS.expression_length, "expression_length")


def test_quantifiers_and_ranges_are_lazy_within_the_budget() -> None:
    assert evaluate("some x in 1..1000000000 satisfies x > 3", {}) is True
    assert evaluate("every x in 1..1000000000 satisfies x < 3", {}) is False
    with pytest.raises(ExpressionLimitExceeded, match="step budget of 10,000"):
        evaluate("every x in 1..1000000000 satisfies x > 0", {}, limits=Limits(steps=10_000))


def test_limits_are_overridable_per_evaluation() -> None:
    tight = Limits(steps=50, collection_size=10, string_length=10)
    with pytest.raises(ExpressionLimitExceeded):
        evaluate("for x in 1..11 return x", {}, limits=tight)
    with pytest.raises(ExpressionLimitExceeded):
        evaluate('"abcdef" + "abcdef"', {}, limits=tight)
    with pytest.raises(ExpressionLimitExceeded):
        evaluate("sum(for x in 1..8 return sum(for y in 1..8 return y))", {}, limits=tight)
    assert evaluate("for x in 1..11 return x", {}) == list(range(1, 12))
    roomy = Limits(collection_size=200_000)
    assert evaluate("count(for x in 1..150000 return x)", {}, limits=roomy) == 150_000


def test_a_bound_at_run_time_is_an_incident_at_the_node() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").script_task(
        "bad", "=count(for x in 1..1000000000 return x)", result_variable="n"
    ).end_event("e")
    b.sequence("s", "bad", "e")
    run = Run(b.build())
    run.start()
    incident = run.incident("bad")
    assert incident.cause_class == "ExpressionError"
    assert "over the limit of 100,000" in incident.cause
    assert run.status == "active_incidents"
    assert run.token_nodes() == ["bad:incident"]


def test_deploy_checks_long_sums_and_refuses_deep_nesting_with_one_line() -> None:
    """Every expression is compiled at deploy: a 500-term sum (a RecursionError before)
    compiles; nesting past the bound refuses the model, naming the element."""

    def model(script: str) -> Any:
        b = ProcessBuilder("p")
        b.start_event("s").script_task("calc", script, result_variable="n").end_event("e")
        b.sequence("s", "calc", "e")
        return b.build()

    check_expressions(model("=" + " + ".join(["x"] * 500)))
    with pytest.raises(InvalidModel) as info:
        check_expressions(model("=" + "[" * 1_000 + "1" + "]" * 1_000))
    message = str(info.value)
    assert "'calc'" in message and "nested deeper than 100 levels" in message
    assert "\n" not in message
