"""XPath (XML Schema) regular expressions, as ``matches``, ``replace``, ``split`` take them.

They run on RE2 (google-re2), an automaton engine whose time is linear in the input
whatever the pattern: a model's ``matches(s, "(a+)+$")`` cannot backtrack
exponentially and hold a worker. RE2 has no back-references: one to a group that can
match only one text (``(ab)\\1``) is that text again, and is rewritten so; any other
(``(a+)\\1``) is refused with an ``ExpressionError`` naming why, rather than run on a
backtracking engine. Patterns past RE2's program size (``(a{1000}){1000}``) are
invalid, hence null, like any other malformed pattern.

What is translated from XPath to RE2: ``.`` matches neither ``\\n`` nor ``\\r``;
``$`` is the very end unless ``m``; flag ``x`` drops whitespace outside character
classes (even after a backslash); ``\\d``, ``\\w``, ``\\s``, ``\\i``, ``\\c`` by XPath's
definitions (Unicode categories, not ASCII); ``\\p{Is<Block>}`` for the blocks listed
below; character class subtraction ``[A-Z-[OI]]`` (computed once into a plain class);
and what XPath forbids (``\\0``, a back-reference in a class, an unknown escape) is a
``ValueError``, which the built-ins answer with null.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import re2

from dormant.engine_core.errors import ExpressionError

__all__ = ["compile_xpath"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False

# XPath's multi-character escapes, as an RE2 class body (usable inside [...] too).
_CLASS_ESCAPES = {
    "d": r"\p{Nd}",
    "D": r"\P{Nd}",
    "s": r" \t\n\r",
    "S": r"\x00-\x08\x0b\x0c\x0e-\x1f\x{21}-\x{10FFFF}",
    "w": r"\p{L}\p{M}\p{N}\p{S}",
    "W": r"\p{P}\p{Z}\p{C}",
    "i": r"\p{L}_:",
    "c": r"\p{L}\p{M}\p{N}._:\-\x{B7}",
}
_NEGATED_ONLY = {"I": _CLASS_ESCAPES["i"], "C": _CLASS_ESCAPES["c"]}
_SINGLE_ESCAPES = set("nrt\\|.-^?*+{}()[]$")
_BLOCKS = {
    "IsBasicLatin": r"\x00-\x7f",
    "IsLatin-1Supplement": r"\x{80}-\x{FF}",
    "IsLatinExtended-A": r"\x{100}-\x{17F}",
    "IsLatinExtended-B": r"\x{180}-\x{24F}",
    "IsGreek": r"\x{370}-\x{3FF}",
    "IsGreekandCoptic": r"\x{370}-\x{3FF}",
    "IsCyrillic": r"\x{400}-\x{4FF}",
    "IsHebrew": r"\x{590}-\x{5FF}",
    "IsArabic": r"\x{600}-\x{6FF}",
    "IsCJKUnifiedIdeographs": r"\x{4E00}-\x{9FFF}",
}
_CATEGORIES = frozenset(
    "L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps Pe Pi Pf Po "
    "S Sm Sc Sk So Z Zs Zl Zp C Cc Cf Co".split()
)
_SPACE = " \t\n\r"
_CATEGORY_NAME = re.compile(r"\{([\w\-]+)\}")


@functools.lru_cache(maxsize=512)
def compile_xpath(pattern: str, flags: str) -> Any:
    """``pattern`` with XPath ``flags`` (s, m, i, x, q) as a compiled RE2 pattern."""
    if set(flags) - set("smixq"):
        raise ValueError("bad flags")
    prefix = ("i" if "i" in flags else "") + ("m" if "m" in flags else "")
    if "q" in flags:
        body = re2.escape(pattern)
    else:
        if "x" in flags:
            pattern = _strip_space(pattern)
        body = _Translator(pattern, "s" in flags, "m" in flags).run()
    return _compile(f"(?{prefix}){body}" if prefix else body)


def _compile(text: str) -> Any:
    try:
        return re2.compile(text, options=_OPTIONS)
    except re2.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None


def _strip_space(pattern: str) -> str:
    out, depth = [], 0
    for c in pattern:
        if c == "[":
            depth += 1
        elif c == "]" and depth:
            depth -= 1
        if c in _SPACE and not depth:
            continue
        out.append(c)
    return "".join(out)


_FIXED_TEXT = re.compile(r"(?:[^\\.\[\](){}*+?|^$]|\\[nrt\\|.\-^?*+{}()\[\]$])*")


class _Translator:
    def __init__(self, pattern: str, dotall: bool, multiline: bool) -> None:
        self.p, self.i, self.dotall, self.multiline = pattern, 0, dotall, multiline
        self.open: list[tuple[int, int]] = []  # (group number, start) of open groups
        self.groups: dict[int, str] = {}  # closed group number -> its translation
        self.count = 0
        self.out: list[str] = []

    def run(self) -> str:
        out = self.out
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == "(" and not p.startswith("(?", self.i):
                self.count += 1
                self.open.append((self.count, len(out)))
                out.append(c)
                self.i += 1
            elif c == ")" and self.open:
                number, start = self.open.pop()
                self.groups[number] = "".join(out[start + 1 :])
                out.append(c)
                self.i += 1
            elif c == "\\" and self.i + 1 < len(p) and p[self.i + 1] in "123456789":
                out.append(self._back_reference())
            elif c == "\\":
                out.append(self._escape(in_class=False))
            elif c == "[":
                out.append(self._class())
            elif c == ".":
                out.append("(?s:.)" if self.dotall else r"[^\n\r]")
                self.i += 1
            elif c == "$" and not self.multiline:
                out.append(r"\z")
                self.i += 1
            else:
                out.append(c)
                self.i += 1
        return "".join(out)

    def _back_reference(self) -> str:
        """``\\N`` of a closed group that can match only one text is that text again;
        any other back-reference is refused: RE2 has none, and a backtracking engine
        would bring the exponential time back."""
        self.i += 1
        j = self.i
        while j < len(self.p) and self.p[j].isdigit() and int(self.p[self.i : j + 1]) <= self.count:
            j += 1
        number = int(self.p[self.i : max(j, self.i + 1)])
        self.i = max(j, self.i + 1)
        source = self.groups.get(number)
        if source is None and number > self.count:
            raise ValueError(f"back-reference to group {number}, which does not exist")
        raw = self._raw_group(number)
        if source is not None and raw is not None and _FIXED_TEXT.fullmatch(raw):
            return f"(?:{source})"
        raise ExpressionError(
            f"the regular expression {self.p!r} uses a back-reference (\\{number}) to a group "
            "that can match more than one text; patterns run on a linear-time engine, which "
            "supports back-references only to fixed text"
        )

    def _raw_group(self, number: int) -> str | None:
        """The XPath source of capturing group ``number`` (found again by counting)."""
        depth_starts: list[int] = []
        seen = 0
        i = 0
        p = self.p
        while i < len(p):
            c = p[i]
            if c == "\\":
                i += 2
                continue
            if c == "[":
                while i < len(p) and p[i] != "]":
                    i += 2 if p[i] == "\\" else 1
            elif c == "(" and not p.startswith("(?", i):
                seen += 1
                depth_starts.append(i if seen == number else -1)
            elif c == ")" and depth_starts:
                start = depth_starts.pop()
                if start >= 0:
                    return p[start + 1 : i]
            i += 1
        return None

    def _escape(self, in_class: bool) -> str:
        p, i = self.p, self.i
        if i + 1 >= len(p):
            raise ValueError("dangling backslash")
        c = p[i + 1]
        self.i = i + 2
        if c in "pP":
            m = _CATEGORY_NAME.match(p, i + 2)
            if m is None:
                raise ValueError("bad category")
            self.i = m.end()
            body = _category(m.group(1), negated=c == "P")
            return body if in_class else f"[{body}]"
        if c in _CLASS_ESCAPES:
            body = _CLASS_ESCAPES[c]
            return body if in_class else f"[{body}]"
        if c in _NEGATED_ONLY:
            if in_class:
                raise ValueError(f"\\{c} is not supported inside a character class")
            return f"[^{_NEGATED_ONLY[c]}]"
        if c.isdigit():
            raise ValueError("back-reference not allowed here")
        if c in _SINGLE_ESCAPES:
            return "\\" + c
        raise ValueError(f"unknown escape \\{c}")

    def _class(self) -> str:
        """``[...]`` starting at ``self.i``, with XPath's ``-[...]`` subtraction."""
        p = self.p
        self.i += 1
        negated = p.startswith("^", self.i)
        if negated:
            self.i += 1
        body: list[str] = []
        subtract = None
        first = True
        while True:
            if self.i >= len(p):
                raise ValueError("unterminated class")
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            if c == "-" and p.startswith("[", self.i + 1):
                self.i += 1
                subtract = self._class()
                if not p.startswith("]", self.i):
                    raise ValueError("bad class subtraction")
                self.i += 1
                break
            if c == "\\":
                body.append(self._escape(in_class=True))
            else:
                body.append("\\" + c if c in "[]" else c)
                self.i += 1
            first = False
        base = f"[{'^' if negated else ''}{''.join(body)}]"
        return _subtracted(base, subtract) if subtract else base


def _category(name: str, negated: bool) -> str:
    if name in _CATEGORIES:
        return ("\\P" if negated else "\\p") + "{" + name + "}"
    block = _BLOCKS.get(name)
    if block is None:
        raise ValueError(f"unsupported category {name}")
    if negated:
        return _subtracted(r"[\x{0}-\x{10FFFF}]", f"[{block}]")[1:-1]
    return block


@functools.cache
def _every_character() -> str:
    return "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


@functools.lru_cache(maxsize=64)
def _subtracted(base: str, subtract: str) -> str:
    """``base`` minus ``subtract`` as one plain class (RE2 has no class arithmetic).

    Both are matched once against every code point; the result is cached per pattern.
    """
    everything = _every_character()
    keep = set(_compile(base).findall(everything)) - set(_compile(subtract).findall(everything))
    points = sorted(ord(c) for c in keep)
    if not points:
        return r"[^\x{0}-\x{10FFFF}]"
    ranges: list[str] = []
    start = prev = points[0]
    for cp in [*points[1:], -1]:
        if cp == prev + 1:
            prev = cp
            continue
        ranges.append(f"\\x{{{start:X}}}" + (f"-\\x{{{prev:X}}}" if prev != start else ""))
        start = prev = cp
    return "[" + "".join(ranges) + "]"
