"""Extract feel-scala's published test cases into cases.json (run by hand, not by pytest).

    python tests/core/feel_scala/extract.py FEEL_SCALA_CHECKOUT [COMMIT] > cases.json

Reads ``src/test/scala/**/*Test.scala`` of a feel-scala checkout and keeps every
statement of the forms

    evaluateExpression("<expr>"[, variables]) should returnResult(<value>) | returnNull()
        | failWith(...) | failToParse() | (returnNull() and reportFailure(...))
    eval("<expr>"[, variables]) should be(<Val...>)
    evaluateUnaryTests("<tests>", <input>[, variables]) should returnResult(<value>)

whose expected value is a literal this script can read (numbers, strings, booleans,
null, lists, maps, java.time values parsed from text, feel-scala's ``Val*`` wrappers).
Everything else (custom contexts, functions passed in, clock-dependent cases) is
skipped and counted in ``skipped``. Values are written tagged, e.g.
``{"number": "1.5"}``, ``{"date": "2020-01-01"}``, ``{"list": [...]}``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any


class Unsupported(Exception):
    pass


class Reader:
    """A tiny recursive-descent reader for the Scala literals the tests use."""

    def __init__(self, text: str, i: int = 0) -> None:
        self.t, self.i = text, i

    def ws(self) -> None:
        while True:
            m = re.compile(r"\s+|//[^\n]*").match(self.t, self.i)
            if not m or m.end() == self.i:
                return
            self.i = m.end()

    def peek(self, s: str) -> bool:
        self.ws()
        return self.t.startswith(s, self.i)

    def take(self, s: str) -> None:
        if not self.peek(s):
            raise Unsupported(f"expected {s!r} at {self.t[self.i : self.i + 30]!r}")
        self.i += len(s)

    def string(self) -> str:
        self.ws()
        if self.t.startswith('"""', self.i):
            end = self.t.index('"""', self.i + 3)
            while self.t.startswith('"', end + 3):
                end += 1
            s = self.t[self.i + 3 : end]
            self.i = end + 3
            if self.peek(".stripMargin"):
                self.take(".stripMargin")
                s = re.sub(r"(?m)^\s*\|", "", s)
            return s
        if not self.t.startswith('"', self.i):
            raise Unsupported("not a string")
        j = self.i + 1
        out = []
        while self.t[j] != '"':
            c = self.t[j]
            if c == "\\":
                n = self.t[j + 1]
                if n == "u":
                    out.append(chr(int(self.t[j + 2 : j + 6], 16)))
                    j += 6
                    continue
                out.append({"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'"}[n])
                j += 2
                continue
            out.append(c)
            j += 1
        self.i = j + 1
        s = "".join(out)
        if self.peek(".stripMargin"):
            self.take(".stripMargin")
        return s

    def strings(self) -> str:
        """A string literal, or several joined with ``+``."""
        s = self.string()
        while (self.peek("+") and not self.peek("+ ")) or self.peek('+ "'):
            self.take("+")
            s += self.string()
        return s

    def args(self) -> list[Any]:
        self.take("(")
        out: list[Any] = []
        while not self.peek(")"):
            out.append(self.value())
            if self.peek(","):
                self.take(",")
        self.take(")")
        return out

    def value(self) -> Any:
        self.ws()
        t, i = self.t, self.i
        if t.startswith('"', i):
            return {"string": self.strings()}
        m = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?[LlDdFf]?(?![\w.])").match(t, i)
        if m:
            self.i = m.end()
            return {"number": m.group(0).rstrip("LlDdFf")}
        m = re.compile(r"[A-Za-z_][\w.]*").match(t, i)
        if not m:
            raise Unsupported(f"value at {t[i : i + 30]!r}")
        name = m.group(0)
        self.i = m.end()
        if name in ("true", "false"):
            return {"boolean": name == "true"}
        if name in ("null", "ValNull"):
            return None
        if name in ("List.empty", "Nil", "Seq.empty", "List.empty[Any]"):
            return {"list": []}
        if name in ("Map.empty", "Map.empty[String, Any]"):
            return {"context": {}}
        if name in ("List", "Seq", "Vector", "Array", "ValList", "java.util.List.of"):
            return {"list": self.args()}
        if name == "Map":
            self.take("(")
            ctx: dict[str, Any] = {}
            while not self.peek(")"):
                key = self.string()
                self.take("->")
                ctx[key] = self.value()
                if self.peek(","):
                    self.take(",")
            self.take(")")
            return {"context": ctx}
        if name in ("ValNumber", "BigDecimal", "ValString", "ValBoolean"):
            [inner] = self.args()
            if name == "BigDecimal" and "string" in (inner or {}):
                return {"number": inner["string"]}
            return inner
        if name == "ValError":
            self.args()
            return {"error": True}
        # java.time parsers, feel-scala's Val wrappers (a string is converted implicitly)
        # and the test helpers of FeelEngineTest (date("..."), dayTimeDuration("..."), ...).
        parsers = {
            "LocalDate.parse": "date",
            "ValDate": "date",
            "date": "date",
            "LocalTime.parse": "time",
            "ValLocalTime": "time",
            "localTime": "time",
            "LocalDateTime.parse": "datetime",
            "ValLocalDateTime": "datetime",
            "localDateTime": "datetime",
            "ZonedDateTime.parse": "zoned",
            "OffsetDateTime.parse": "zoned",
            "ValDateTime": "zoned",
            "dateTime": "zoned",
            "OffsetTime.parse": "offsettime",
            "ZonedTime.parse": "offsettime",
            "ValTime": "offsettime",
            "time": "offsettime",
            "Duration.parse": "duration",
            "ValDayTimeDuration": "duration",
            "dayTimeDuration": "duration",
            "Period.parse": "period",
            "ValYearMonthDuration": "period",
            "yearMonthDuration": "period",
        }
        if name in parsers:
            [inner] = self.args()
            kind = parsers[name]
            if isinstance(inner, dict) and len(inner) == 1 and kind in inner:
                return inner
            if not isinstance(inner, dict) or "string" not in inner:
                raise Unsupported(name)
            return {kind: inner["string"]}
        if name == "LocalDate.of":
            y, mo, d = (int(a["number"]) for a in self.args())
            return {"date": f"{y:04d}-{mo:02d}-{d:02d}"}
        if name == "LocalTime.of":
            parts = [int(a["number"]) for a in self.args()] + [0, 0]
            return {"time": f"{parts[0]:02d}:{parts[1]:02d}:{parts[2]:02d}"}
        if name in (
            "Duration.ofDays",
            "Duration.ofHours",
            "Duration.ofMinutes",
            "Duration.ofSeconds",
        ):
            [n] = self.args()
            unit = {"Days": "D", "Hours": "H", "Minutes": "M", "Seconds": "S"}[name[11:]]
            body = f"P{n['number']}D" if unit == "D" else f"PT{n['number']}{unit}"
            return {"duration": body}
        if name in ("Period.ofYears", "Period.ofMonths"):
            [n] = self.args()
            return {"period": f"P{n['number']}{'Y' if name.endswith('Years') else 'M'}"}
        raise Unsupported(name)


STATEMENT = re.compile(r"\b(evaluateExpression|eval|evaluateUnaryTests)\s*\(")


def named(reader: Reader) -> str | None:
    m = re.compile(r"\s*(\w+)\s*=(?!=)").match(reader.t, reader.i)
    if m:
        reader.i = m.end()
        return m.group(1)
    return None


def read_case(text: str, start: int, fn: str) -> dict[str, Any]:
    r = Reader(text, start)
    r.take("(")
    expression: str | None = None
    variables: dict[str, Any] = {}
    input_value: Any = None
    position = 0
    while not r.peek(")"):
        name = named(r)
        if name in (None, "expression") and expression is None and (fn != "eval" or True):
            if (fn == "evaluateUnaryTests" and position == 1) or name == "inputValue":
                input_value = r.value()
            else:
                expression = r.strings()
        elif name in ("variables", None) and (r.peek("Map(") or r.peek("Map.empty")):
            ctx = r.value()
            variables = ctx["context"]
        elif name == "inputValue" or (fn == "evaluateUnaryTests" and position == 1):
            input_value = r.value()
        else:
            raise Unsupported(f"argument {name}")
        position += 1
        if r.peek(","):
            r.take(",")
    r.take(")")
    r.take("should")
    wrapped = r.peek("(")
    if wrapped:
        r.take("(")
    case: dict[str, Any] = {"expression": expression, "variables": variables}
    if fn == "evaluateUnaryTests":
        case["unary_input"] = input_value
    if r.peek("returnResult"):
        r.take("returnResult")
        [value] = r.args()
        case["outcome"], case["expected"] = "value", value
    elif r.peek("returnNull()"):
        r.take("returnNull()")
        case["outcome"], case["expected"] = "null", None
    elif r.peek("failWith") or r.peek("failToParse"):
        case["outcome"], case["expected"] = "error", None
    elif r.peek("be(") or r.peek("be ("):
        r.take("be")
        [value] = r.args()
        if isinstance(value, dict) and value.get("error"):
            case["outcome"], case["expected"] = "error", None
        elif value is None:
            case["outcome"], case["expected"] = "null", None
        else:
            case["outcome"], case["expected"] = "value", value
    else:
        raise Unsupported("matcher")
    if expression is None:
        raise Unsupported("no expression")
    return case


def extract(root: Path, commit: str | None = None) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    skipped = 0
    for path in sorted((root / "src" / "test" / "scala").rglob("*Test.scala")):
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(root))
        for m in STATEMENT.finditer(text):
            if text[max(0, m.start() - 4) : m.start()].endswith("def "):
                continue
            try:
                case = read_case(text, m.end() - 1, m.group(1))
            except (Unsupported, ValueError, KeyError, IndexError, TypeError):
                skipped += 1
                continue
            if re.search(r"\b(now|today)\s*\(", case["expression"]):
                skipped += 1  # feel-scala's tests pin their own clock
                continue
            case["id"] = f"{path.stem}:{text.count(chr(10), 0, m.start()) + 1}"
            case["file"] = rel
            cases.append(case)
    commit = (
        commit
        or subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    )
    return {
        "source": "https://github.com/camunda/feel-scala",
        "commit": commit,
        "licence": "Apache-2.0 (the cases are taken from feel-scala's test suite)",
        "skipped": skipped,
        "cases": cases,
    }


if __name__ == "__main__":
    json.dump(extract(Path(sys.argv[1]), *sys.argv[2:3]), sys.stdout, indent=1)
    sys.stdout.write("\n")
