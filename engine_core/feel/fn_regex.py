"""The regular-expression built-ins: ``matches``, ``replace``, ``split``, ``extract``.

Patterns are XPath's, run on a linear-time engine (``xpath_regex``). Each call pays its
worst case before it runs, input bytes times the pattern's program size
(``limits.charge_regex``: a call into RE2 cannot be interrupted), and each match found
is one step more; a pattern past ``regex_program_size`` is refused at compile; and
``replace`` holds its result to the string bound while it grows (a replacement may be
far longer than what it replaces).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dormant.engine_core.feel import limits
from dormant.engine_core.feel.builtins import builtin
from dormant.engine_core.feel.xpath_regex import compile_xpath

__all__: list[str] = []


def _strs(*values: Any) -> bool:
    return all(isinstance(v, str) for v in values)


def _regex(pattern: str, flags: Any, s: str) -> Any:
    """An XPath regex on the linear-time engine (see ``xpath_regex``), its program held
    to ``regex_program_size`` and its run over ``s`` paid for; a bad one raises.

    Every built-in that runs a pattern gets it here, so none can run one unpaid."""
    if flags is not None and not isinstance(flags, str):
        raise ValueError("bad flags")
    rx = compile_xpath(pattern, flags or "")
    limits.check_regex_program(pattern, rx.programsize)
    limits.charge_regex(pattern, rx.programsize, len(s.encode("utf-8", "surrogatepass")))
    return rx


def _matches(rx: Any, s: str) -> Iterator[Any]:
    """Every match of ``rx`` in ``s``, each one step of the budget (a match is work)."""
    for m in rx.finditer(s):
        limits.charge()
        yield m


@builtin("matches", "input", "pattern", "flags?")
def matches(s: Any, pattern: Any, flags: Any = None) -> Any:
    if not _strs(s, pattern):
        return None
    return _regex(pattern, flags, s).search(s) is not None


def _replacement(repl: str, groups: int, literal: bool) -> list[str | int]:
    """XPath's replacement text as literal pieces and group numbers (``$1``, ``\\$``)."""
    if literal:
        return [repl]
    pieces: list[str | int] = []
    text: list[str] = []
    i = 0
    while i < len(repl):
        c = repl[i]
        if c == "\\":
            if i + 1 >= len(repl) or repl[i + 1] not in "\\$":
                raise ValueError("bad escape in replacement")
            text.append(repl[i + 1])
            i += 2
        elif c == "$":
            j = i + 1
            if j >= len(repl) or not repl[j].isdigit():
                raise ValueError("bad group reference in replacement")
            number = int(repl[j])
            j += 1
            while j < len(repl) and repl[j].isdigit() and number * 10 + int(repl[j]) <= groups:
                number = number * 10 + int(repl[j])
                j += 1
            pieces.append("".join(text))
            text = []
            pieces.append(number if number <= groups else -1)
            i = j
        else:
            text.append(c)
            i += 1
    pieces.append("".join(text))
    return pieces


@builtin("replace", "input", "pattern", "replacement", "flags?")
def replace(s: Any, pattern: Any, repl: Any, flags: Any = None) -> Any:
    if not _strs(s, pattern, repl):
        return None
    rx = _regex(pattern, flags, s)
    if rx.fullmatch("") is not None and pattern in ("", ".*"):
        return None
    pieces = _replacement(repl, rx.groups, "q" in (flags or ""))
    out: list[str] = []
    size, end = 0, 0
    for m in _matches(rx, s):
        chunk = [s[end : m.start()]]
        for piece in pieces:
            if isinstance(piece, str):
                chunk.append(piece)
            elif piece >= 0:
                chunk.append(m.group(piece) or "")
        end = m.end()
        size += sum(len(c) for c in chunk)
        limits.check_string(size)
        out.extend(chunk)
    out.append(s[end:])
    return "".join(out)


@builtin("split", "string", "delimiter")
def split(s: Any, delimiter: Any) -> Any:
    if not _strs(s, delimiter) or delimiter == "":
        return None
    rx = _regex(delimiter, None, s)
    parts, end = [], 0
    for m in _matches(rx, s):
        parts.append(s[end : m.start()])
        end = m.end()
    parts.append(s[end:])
    return parts


@builtin("extract", "string", "pattern")
def extract(s: Any, pattern: Any) -> Any:
    if not _strs(s, pattern):
        return None
    return [m.group(0) for m in _matches(_regex(pattern, None, s), s)]
