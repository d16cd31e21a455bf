"""FEEL text to a lark parse tree, and the small helpers that read tokens of it."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from importlib import resources
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedInput

from dormant.engine_core.errors import ExpressionError, ExpressionLimitExceeded
from dormant.engine_core.feel.limits import DEFAULT_LIMITS, Limits
from dormant.engine_core.feel.temporal import (
    parse_date,
    parse_datetime,
    parse_duration_text,
    parse_time,
)

__all__ = [
    "keyword_names",
    "name_of",
    "parse",
    "parser",
    "quote_keyword_names",
    "temporal_literal",
    "unquote",
    "uses_input",
]


@functools.cache
def parser() -> Lark:
    """The FEEL parser, built on first use: building it from the grammar costs a
    tenth of a second or more, which every process that imports the engine paid at
    start whether it evaluated FEEL or not (a CLI command, beat). A worker builds it
    once before it forks its pool processes (tasks/app.py), so they inherit it."""
    grammar = resources.files("dormant.engine_core.feel").joinpath("feel.lark")
    return Lark(
        grammar.read_text(encoding="utf-8"),
        parser="lalr",
        lexer="contextual",
        start=["start", "unary_tests"],
        maybe_placeholders=True,
    )


def parse(text: str, start: str, limits: Limits = DEFAULT_LIMITS) -> Tree[Token]:
    """Parse ``text``; a syntax error names the character offset where it is.

    The text's length and the tree's nesting depth are bounded, because compiling and
    evaluating recurse once per level: past the bound is a classified error, never a
    ``RecursionError``. Chains of one operator (``1 + 2 + ... + 500``, ``a and b and
    ...``) do not nest: they compile into a loop.
    """
    if len(text) > limits.expression_length:
        raise ExpressionLimitExceeded(
            f"FEEL expression of {len(text):,} characters, over the limit of "
            f"{limits.expression_length:,}",
            limit="expression_length",
        )
    try:
        tree = parser().parse(text, start=start)
    except UnexpectedInput as exc:
        raise _syntax_error(text, exc) from None
    depth = nesting_depth(tree, limits.nesting_depth)
    if depth > limits.nesting_depth:
        raise ExpressionLimitExceeded(
            f"FEEL expression nested deeper than {limits.nesting_depth} levels",
            text if len(text) <= 200 else text[:200] + "...",
            limit="nesting_depth",
        )
    return tree


# Operators whose left-leaning chains compile into a loop (compiler._operands).
_CHAINS = {"add": 1, "sub": 1, "mul": 2, "div": 2, "and_": 3, "or_": 4}


def nesting_depth(tree: Tree[Token], stop: int) -> int:
    """How deep ``tree`` nests (a chain of one operator counts once); stops past ``stop``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if deepest > stop:
                return deepest
        group = _CHAINS.get(str(node.data))
        for i, child in enumerate(node.children):
            if isinstance(child, Tree):
                same = i == 0 and group is not None and _CHAINS.get(str(child.data)) == group
                stack.append((child, depth if same else depth + 1))
    return deepest


def _syntax_error(text: str, exc: UnexpectedInput) -> ExpressionError:
    pos = getattr(exc, "pos_in_stream", None)
    token = getattr(exc, "token", None)
    if isinstance(token, Token) and token.start_pos is not None:
        pos = token.start_pos
    if pos is None or (token is not None and token.type == "$END"):
        pos = len(text)
    found = f"unexpected {text[pos : pos + 10]!r}" if pos < len(text) else "unexpected end"
    return ExpressionError(f"FEEL syntax error: {found}", expression=text, position=pos)


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{6}|.)", re.S)
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "'": "'", "\\": "\\", "b": "\b", "f": "\f"}


def unquote(text: str) -> str:
    def repl(m: re.Match[str]) -> str:
        code = m.group(1)
        if len(code) > 1:
            return chr(int(code[1:], 16))
        return _SIMPLE.get(code, "\\" + code)

    body = _ESCAPE.sub(repl, text[1:-1])
    return (
        body.encode("utf-16", "surrogatepass").decode("utf-16")
        if any(0xD800 <= ord(c) <= 0xDFFF for c in body)
        else body
    )


def name_of(tree: Any) -> str:
    parts = [str(t) for t in tree.children]
    if len(parts) == 1 and parts[0].startswith("`"):
        return parts[0][1:-1]
    return " ".join(" ".join(p.split()) for p in parts)


def temporal_literal(text: str) -> Any:
    if text.startswith(("P", "-P")):
        return parse_duration_text(text)
    if "T" in text:
        return parse_datetime(text)
    if ":" in text:
        return parse_time(text)
    return parse_date(text)


def uses_input(tree: Any) -> bool:
    """Whether a unary-test expression reads ``?`` (then its value is the verdict)."""
    if isinstance(tree, Token):
        return tree.type == "NAME" and str(tree) == "?"
    if isinstance(tree, Tree):
        return any(uses_input(c) for c in tree.children)
    return False


_KEYWORDS = frozenset(
    (
        "in",
        "and",
        "or",
        "between",
        "instance",
        "of",
        "satisfies",
        "return",
        "then",
        "else",
        "for",
        "some",
        "every",
        "if",
        "function",
        "not",
        "true",
        "false",
        "null",
    )
)
_QUOTED = r'"(?:[^"\\]|\\.)*"|`[^`]*`|//[^\n]*|/\*.*?\*/'


def keyword_names(names: Iterable[Any]) -> list[str]:
    """The multi-word ``names`` with a keyword among their words (``days in weekend``)."""
    return [
        n for n in names if isinstance(n, str) and " " in n and not _KEYWORDS.isdisjoint(n.split())
    ]


def quote_keyword_names(text: str, names: list[str]) -> str:
    """``text`` with each of ``names`` (from ``keyword_names``) in backticks, outside strings.

    The grammar ends a name at a keyword, so ``for i in days in weekend return i`` would
    otherwise read ``days in weekend`` as a test; the caller knows which names exist.
    """
    hits = sorted((n for n in names if n.split()[0] in text), key=len, reverse=True)
    if not hits:
        return text
    words = "|".join(r"\s+".join(re.escape(w) for w in n.split()) for n in hits)
    pattern = re.compile(f"{_QUOTED}|(?<![\\w?])({words})(?![\\w?])", re.S)
    return pattern.sub(
        lambda m: f"`{' '.join(m.group(1).split())}`" if m.group(1) else m.group(0), text
    )
