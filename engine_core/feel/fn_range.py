"""``range(from)``, DMN 1.4: a range from its FEEL text, such as ``"[1..10)"``."""

from __future__ import annotations

from typing import Any

from lark import Token, Tree

from dormant.engine_core.errors import ExpressionError
from dormant.engine_core.feel import ops
from dormant.engine_core.feel.builtins import builtin
from dormant.engine_core.feel.compiler import compile_tree
from dormant.engine_core.feel.scope import Scope
from dormant.engine_core.feel.syntax import name_of, parse
from dormant.engine_core.feel.values import Range, kind_of

__all__: list[str] = []

_RANGES = ("range_cc", "range_co", "range_oc", "range_oo")
_CONSTRUCTORS = ("date", "date and time", "time", "duration")


def _literal(tree: Any) -> bool:
    """An end point must be a literal: a number, string, ``@"..."`` or ``date("...")``."""
    if not isinstance(tree, Tree):
        return False
    if tree.data in ("number", "string", "at_literal", "null"):
        return True
    if tree.data == "neg":
        return _literal(tree.children[0])
    if tree.data == "call":
        callee, args = tree.children
        if not (isinstance(callee, Tree) and callee.data == "var" and isinstance(args, Tree)):
            return False
        return (
            name_of(callee.children[0]) in _CONSTRUCTORS
            and args.data == "positional"
            and len(args.children) == 1
            and isinstance(args.children[0], Tree)
            and args.children[0].data == "string"
        )
    return False


@builtin("range", "from")
def range_from(text: Any) -> Any:
    if not isinstance(text, str):
        return None
    body = text.strip()
    if body.startswith("]"):
        body = "(" + body[1:]
    if body.endswith("["):
        body = body[:-1] + ")"
    try:
        tree = parse(body, "start")
    except ExpressionError:
        return None
    node = tree.children[0]
    if not (
        isinstance(node, Tree)
        and node.data in _RANGES
        and all(_literal(c) for c in node.children if not isinstance(c, Token))
    ):
        return None
    value = compile_tree(node)(Scope({}))
    if not isinstance(value, Range) or value.start is None or value.end is None:
        return None
    if kind_of(value.start) != kind_of(value.end) or ops.less(value.end, value.start) is not False:
        return None
    return value
