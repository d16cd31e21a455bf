"""Turns lark's parse tree into nested Python closures, once per expression text.

A closure tree is evaluated far faster than re-walking the parse tree, and it is built
once (``compile_expression`` is cached), so a trigger that evaluates the same condition
again pays only for the closures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from lark import Token, Tree

from dormant.engine_core.errors import ExpressionError
from dormant.engine_core.feel import limits, ops
from dormant.engine_core.feel.builtins import BUILTINS, CLOCK_FUNCTIONS, feel_property
from dormant.engine_core.feel.iteration import domain
from dormant.engine_core.feel.scope import MISSING, Scope, invoke, invoke_overloads
from dormant.engine_core.feel.syntax import name_of, temporal_literal, unquote
from dormant.engine_core.feel.values import FeelFunction, Range, UnaryTest, kind_of

__all__ = ["Node", "compile_tree"]

Node = Callable[[Scope], Any]


def _const(value: Any) -> Node:
    return lambda scope: value


def compile_tree(tree: Any) -> Node:
    kind = tree.data if isinstance(tree, Tree) else None
    handler = _HANDLERS.get(str(kind))
    if handler is None:
        raise ExpressionError(f"unsupported FEEL construct {kind!r}")
    return handler(tree)


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[[Tree[Token]], Node]:
    def build(tree: Tree[Token]) -> Node:
        left, right = compile_tree(tree.children[0]), compile_tree(tree.children[-1])
        return lambda s: fn(left(s), right(s))

    return build


def _var(tree: Tree[Token]) -> Node:
    name = name_of(tree.children[0])
    overloads = BUILTINS.get(name)

    def var(scope: Scope) -> Any:
        value = scope.lookup(name)
        if value is MISSING:
            if overloads is not None:
                return FeelFunction(
                    name, overloads[0].params, lambda *a: invoke_overloads(overloads, a), 0, True
                )
            return None
        return value

    return var


def _compare(tree: Tree[Token]) -> Node:
    left, right = compile_tree(tree.children[0]), compile_tree(tree.children[2])
    op = str(tree.children[1].children[0])  # type: ignore[union-attr]
    if op == "=":
        return lambda s: ops.equal(left(s), right(s))
    if op == ">":
        return lambda s: ops.less(right(s), left(s))
    if op == "<":
        return lambda s: ops.less(left(s), right(s))
    return lambda s: ops.compare(op, left(s), right(s))


def _operands(tree: Tree[Token], kinds: Mapping[str, Any]) -> tuple[Node, list[tuple[Any, Node]]]:
    """A left-leaning chain ``a + b - c + ...`` as its first operand and (op, operand)s.

    Walked in a loop, not by recursion, so a 500-term sum compiles and evaluates in a
    flat loop instead of 500 nested frames.
    """
    rest: list[tuple[Any, Any]] = []
    node: Any = tree
    while isinstance(node, Tree) and node.data in kinds:
        rest.append((kinds[node.data], node.children[-1]))
        node = node.children[0]
    first = compile_tree(node)
    return first, [(op, compile_tree(operand)) for op, operand in reversed(rest)]


def _arithmetic(tree: Tree[Token]) -> Node:
    kinds = _ADDITIVE if tree.data in _ADDITIVE else _MULTIPLICATIVE
    first, rest = _operands(tree, kinds)
    if len(rest) == 1:
        fn, right = rest[0]
        return lambda s: fn(first(s), right(s))

    def chain(s: Scope) -> Any:
        value = first(s)
        for fn, operand in rest:
            value = fn(value, operand(s))
        return value

    return chain


_ADDITIVE = {"add": ops.add, "sub": ops.sub}
_MULTIPLICATIVE = {"mul": ops.mul, "div": ops.div}


def _and(tree: Tree[Token]) -> Node:
    first, rest = _operands(tree, {"and_": None})

    def and_(s: Scope) -> Any:
        acc = first(s)
        for _, operand in rest:
            if acc is False:
                return False
            b = operand(s)
            if b is False:
                return False
            acc = True if acc is True and b is True else None
        return acc

    return and_


def _or(tree: Tree[Token]) -> Node:
    first, rest = _operands(tree, {"or_": None})

    def or_(s: Scope) -> Any:
        acc = first(s)
        for _, operand in rest:
            if acc is True:
                return True
            b = operand(s)
            if b is True:
                return True
            acc = False if acc is False and b is False else None
        return acc

    return or_


def _between(tree: Tree[Token]) -> Node:
    x, lo, hi = (compile_tree(c) for c in tree.children)

    def between(s: Scope) -> Any:
        v = x(s)
        a, b = ops.compare("<=", lo(s), v), ops.compare("<=", v, hi(s))
        if a is False or b is False:
            return False
        return True if a and b else None

    return between


def _cmp_test(tree: Tree[Token]) -> Node:
    op = str(tree.children[0].children[0])  # type: ignore[union-attr]
    end = compile_tree(tree.children[1])

    def test(s: Scope) -> Any:
        e = end(s)
        if op == "<":
            return Range(None, e, False, False, True)
        if op == "<=":
            return Range(None, e, False, True, True)
        if op == ">":
            return Range(e, None, False, False, True)
        if op == ">=":
            return Range(e, None, True, False, True)
        if op == "=":
            return UnaryTest(lambda v: ops.equal(v, e), op, e)
        return UnaryTest(lambda v: ops.compare("!=", v, e), op, e)

    return test


def _in(tree: Tree[Token]) -> Node:
    left, right = compile_tree(tree.children[0]), compile_tree(tree.children[1])

    def in_(s: Scope) -> Any:
        value, test = left(s), right(s)
        if isinstance(test, list):
            limits.charge(len(test))
        return ops.in_test(value, test)

    return in_


def _put_list(tree: Tree[Token]) -> Node:
    tests = [compile_tree(c) for c in tree.children]

    def any_of(s: Scope) -> Any:
        values = [t(s) for t in tests]
        return UnaryTest(lambda v: _any_test(v, values))

    return any_of


def _any_test(value: Any, tests: list[Any]) -> bool | None:
    results = [ops.in_test(value, t) for t in tests]
    if True in results:
        return True
    return None if None in results else False


def _instance_of(tree: Tree[Token]) -> Node:
    value = compile_tree(tree.children[0])
    check = _type_check(tree.children[2])
    return lambda s: check(value(s))


def _type_check(tree: Any) -> Callable[[Any], bool]:
    name = name_of(tree.children[0])
    if tree.data == "simple_type":
        if name == "Any":
            return lambda v: v is not None
        if name == "Null":
            return lambda v: v is None
        return lambda v: kind_of(v) == name
    if name in ("list", "range") and len(tree.children) >= 2:
        inner = _type_check(tree.children[1])
        if name == "list":
            return lambda v: isinstance(v, list) and all(inner(x) for x in v)
        return lambda v: (
            isinstance(v, Range) and all(inner(x) for x in (v.start, v.end) if x is not None)
        )
    if name == "context":
        fields = [
            (name_of(f.children[0]), _type_check(f.children[1]))
            for f in tree.children[1:]
            if isinstance(f, Tree) and f.data == "field_type"
        ]
        return lambda v: isinstance(v, dict) and all(k in v and check(v[k]) for k, check in fields)
    if name == "function":
        return lambda v: isinstance(v, FeelFunction)
    return lambda v: False


def _path(tree: Tree[Token]) -> Node:
    base = compile_tree(tree.children[0])
    key = name_of(tree.children[1])
    return lambda s: feel_property(base(s), key)


def _filter(tree: Tree[Token]) -> Node:
    base, cond = compile_tree(tree.children[0]), compile_tree(tree.children[1])

    def filter_(s: Scope) -> Any:
        src = base(s)
        if src is None:
            return None
        items = src if isinstance(src, list) else [src]
        kept = []
        for i, item in enumerate(items):
            limits.charge()
            local = {"item": item}
            if isinstance(item, dict):
                local.update(item)
            verdict = cond(s.child(local))
            if i == 0 and isinstance(verdict, Decimal):
                return _index(items, verdict)
            if verdict is True:
                kept.append(item)
        return kept

    return filter_


def _index(items: list[Any], index: Decimal) -> Any:
    if index != index.to_integral_value():
        return None
    i = int(index)
    if i > 0 and i <= len(items):
        return items[i - 1]
    if i < 0 and -i <= len(items):
        return items[i]
    return None


def _call(tree: Tree[Token]) -> Node:
    callee_tree, args_tree = tree.children
    if args_tree is None:
        args: Callable[[Scope], Any] = _const(())
    elif args_tree.data == "positional":  # type: ignore[union-attr]
        parts = [compile_tree(c) for c in args_tree.children]  # type: ignore[union-attr]
        args = lambda s: [p(s) for p in parts]  # noqa: E731
    else:
        named = [
            (name_of(c.children[0]), compile_tree(c.children[1]))  # type: ignore[union-attr]
            for c in args_tree.children  # type: ignore[union-attr]
        ]
        args = lambda s: {k: p(s) for k, p in named}  # noqa: E731
    if isinstance(callee_tree, Tree) and callee_tree.data == "var":
        name = name_of(callee_tree.children[0])
        overloads = BUILTINS.get(name)
        clock = CLOCK_FUNCTIONS.get(name)

        def call_named(s: Scope) -> Any:
            fn = s.lookup(name)
            if isinstance(fn, FeelFunction):
                return invoke(fn, args(s))
            if fn is MISSING:
                if clock is not None:
                    return clock(s.now) if not args(s) and s.now is not None else None
                if name == "uuid":
                    return s.ids() if not args(s) and s.ids is not None else None
                if overloads is not None:
                    return invoke_overloads(overloads, args(s))
            return None

        return call_named
    callee = compile_tree(callee_tree)

    def call(s: Scope) -> Any:
        fn = callee(s)
        return invoke(fn, args(s)) if isinstance(fn, FeelFunction) else None

    return call


def _list(tree: Tree[Token]) -> Node:
    items = [compile_tree(c) for c in tree.children if isinstance(c, Tree)]  # not `[]`
    return lambda s: [i(s) for i in items]


def _range(start_in: bool, end_in: bool) -> Callable[[Tree[Token]], Node]:
    def build(tree: Tree[Token]) -> Node:
        lo, hi = compile_tree(tree.children[0]), compile_tree(tree.children[1])

        def range_(s: Scope) -> Any:
            a, b = lo(s), hi(s)
            if a is not None and b is not None and kind_of(a) != kind_of(b):
                return None
            return Range(a, b, start_in, end_in)

        return range_

    return build


def _context(tree: Tree[Token]) -> Node:
    entries = []
    for entry in tree.children:
        if entry is None:
            continue
        key_tree, value_tree = entry.children  # type: ignore[union-attr]
        if isinstance(key_tree, Token):
            key = unquote(str(key_tree)) if key_tree.type == "STRING" else str(key_tree)
        else:
            key = name_of(key_tree)
        entries.append((key, compile_tree(value_tree)))

    def context(s: Scope) -> Any:
        result: dict[str, Any] = {}
        inner = s.child(result)
        for key, value in entries:
            if key in result:
                return None
            result[key] = value(inner)
        return result

    return context


def _if(tree: Tree[Token]) -> Node:
    cond, then, other = (compile_tree(c) for c in tree.children)
    return lambda s: then(s) if cond(s) is True else other(s)


def _iterations(trees: list[Any]) -> list[tuple[str, Node, Node | None]]:
    return [
        (
            name_of(t.children[0]),
            compile_tree(t.children[1]),
            compile_tree(t.children[2])
            if len(t.children) > 2 and t.children[2] is not None
            else None,
        )
        for t in trees
    ]


def _items(scope: Scope, src: Node, upto: Node | None) -> Sequence[Any] | None:
    return domain(src(scope), None if upto is None else upto(scope), upto is not None)


def _for(tree: Tree[Token]) -> Node:
    iters = _iterations(tree.children[:-1])
    body = compile_tree(tree.children[-1])

    def for_(s: Scope) -> Any:
        results: list[Any] = []
        budget = limits.current()

        def loop(level: int, scope: Scope) -> bool:
            if level == len(iters):
                if budget is not None:
                    budget.charge()
                    budget.check_collection(len(results) + 1)
                results.append(body(scope.child({"partial": results})))
                return True
            name, src, upto = iters[level]
            items = _items(scope, src, upto)
            if items is None:
                return False
            return all(loop(level + 1, scope.child({name: item})) for item in items)

        return results if loop(0, s) else None

    return for_


def _quantified(every: bool) -> Callable[[Tree[Token]], Node]:
    """``some`` / ``every``: stop at the first item that decides, as feel-scala does."""

    def build(tree: Tree[Token]) -> Node:
        iters = _iterations(tree.children[1:-1])
        cond = compile_tree(tree.children[-1])

        def quantified(s: Scope) -> Any:
            decided = False

            def loop(level: int, scope: Scope) -> bool:
                nonlocal decided
                if level == len(iters):
                    limits.charge()
                    verdict = cond(scope)
                    decided = verdict is not True if every else verdict is True
                    return not decided
                name, src, upto = iters[level]
                items = _items(scope, src, upto)
                if items is None:
                    return False
                for item in items:
                    if not loop(level + 1, scope.child({name: item})):
                        return False
                return True

            if not loop(0, s) and not decided:
                return None
            return not decided if every else decided

        return quantified

    return build


def _funcdef(tree: Tree[Token]) -> Node:
    params = tuple(name_of(p.children[0]) for p in tree.children[:-1] if p is not None)  # type: ignore[union-attr]
    body = compile_tree(tree.children[-1])

    def define(s: Scope) -> Any:
        def call(*args: Any) -> Any:
            budget = limits.current()
            if budget is None:
                return body(s.child(dict(zip(params, args, strict=False))))
            with budget.call():
                return body(s.child(dict(zip(params, args, strict=False))))

        return FeelFunction("anonymous", params, call)

    return define


def _number(tree: Tree[Token]) -> Node:
    return _const(Decimal(str(tree.children[0])))


def _at(tree: Tree[Token]) -> Node:
    return _const(temporal_literal(unquote(str(tree.children[0])[1:])))


_HANDLERS: dict[str, Callable[[Any], Node]] = {
    "start": lambda t: compile_tree(t.children[0]),
    "number": _number,
    "string": lambda t: _const(unquote(str(t.children[0]))),
    "at_literal": _at,
    "true": lambda t: _const(True),
    "false": lambda t: _const(False),
    "null": lambda t: _const(None),
    "var": _var,
    "add": _arithmetic,
    "sub": _arithmetic,
    "mul": _arithmetic,
    "div": _arithmetic,
    "pow": _binary(ops.power),
    "neg": lambda t: (lambda inner: lambda s: ops.neg(inner(s)))(compile_tree(t.children[0])),
    "compare": _compare,
    "and_": _and,
    "or_": _or,
    "between": _between,
    "in_": _in,
    "put_list": _put_list,
    "cmp_test": _cmp_test,
    "instance_of": _instance_of,
    "path": _path,
    "filter": _filter,
    "call": _call,
    "list": _list,
    "range_cc": _range(True, True),
    "range_co": _range(True, False),
    "range_oc": _range(False, True),
    "range_oo": _range(False, False),
    "context": _context,
    "if_": _if,
    "for_": _for,
    "some": _quantified(False),
    "every": _quantified(True),
    "funcdef": _funcdef,
}
