"""XPath (XML Schema) regular expressions, as ``matches`` and ``replace`` take them, in Python.

What differs from Python's ``re`` and is translated: ``.`` matches neither ``\\n`` nor
``\\r``; ``$`` is the very end unless ``m``; flag ``x`` drops whitespace outside character
classes (even after a backslash); ``\\p{..}``/``\\P{..}`` categories and blocks; character
class subtraction ``[A-Z-[OI]]``; and what XPath forbids (``\\0``, a back-reference in a
class) is a ``ValueError``.
"""

from __future__ import annotations

import re

__all__ = ["compile_xpath"]

# \p{name} as the body of a character class (inside []) where one exists.
_BODIES = {
    "IsBasicLatin": r"\x00-\x7f",
    "Lu": "A-Z",
    "Ll": "a-z",
    "N": r"\d",
    "Nd": r"\d",
    "IsLatin-1Supplement": r"\x80-\xff",
    "P": r"!-/:-@\[-`{-~",
    "Zs": r" \xa0",
}
# \p{name} outside a class, when no body above fits.
_WHOLE = {"L": r"[^\W\d_]", "Lu": "[A-Z]", "Ll": "[a-z]"}
_SPACE = " \t\n\r"


def compile_xpath(pattern: str, flags: str) -> re.Pattern[str]:
    """``pattern`` with XPath ``flags`` (s, m, i, x, q) as a compiled Python regex."""
    if set(flags) - set("smixq"):
        raise ValueError("bad flags")
    value = (re.I if "i" in flags else 0) | (re.M if "m" in flags else 0)
    if "q" in flags:
        return re.compile(re.escape(pattern), value)
    if "x" in flags:
        pattern = _strip_space(pattern)
    return re.compile(_Translator(pattern, "s" in flags, "m" in flags).run(), value)


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


class _Translator:
    def __init__(self, pattern: str, dotall: bool, multiline: bool) -> None:
        self.p, self.i, self.dotall, self.multiline = pattern, 0, dotall, multiline

    def run(self) -> str:
        out: list[str] = []
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == "\\":
                out.append(self._escape(in_class=False))
            elif c == "[":
                out.append(self._class())
            elif c == ".":
                out.append("(?s:.)" if self.dotall else r"[^\n\r]")
                self.i += 1
            elif c == "$" and not self.multiline:
                out.append(r"\Z")
                self.i += 1
            else:
                out.append(c)
                self.i += 1
        return "".join(out)

    def _escape(self, in_class: bool) -> str:
        p, i = self.p, self.i
        if i + 1 >= len(p):
            raise ValueError("dangling backslash")
        c = p[i + 1]
        if c in "pP":
            m = re.compile(r"\{([\w\-]+)\}").match(p, i + 2)
            if m is None:
                raise ValueError("bad category")
            self.i = m.end()
            name = m.group(1)
            body = _BODIES.get(name)
            if in_class:
                if body is None or c == "P":
                    raise ValueError(f"unsupported category {name}")
                return body
            if body is not None:
                return f"[{'^' if c == 'P' else ''}{body}]"
            if name in _WHOLE and c == "p":
                return _WHOLE[name]
            raise ValueError(f"unsupported category {name}")
        if c.isdigit() and (in_class or c == "0"):
            raise ValueError("back-reference not allowed here")
        self.i = i + 2
        return "\\" + c

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
        return f"(?:(?!{subtract}){base})" if subtract else base
