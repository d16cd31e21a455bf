"""The bounds every FEEL evaluation runs under, and the budget that enforces them.

A model and its variables are untrusted: without bounds one expression can hold a
worker (and the instance's row lock) for hours or take gigabytes (``for x in
1..1000000000 return x``, a string doubled 31 times). So every evaluation draws on a
``Budget``: evaluation steps (loop iterations, function calls, and the items a built-in
walks), the length of any string it builds, the size of any list it builds, the depth
of user function calls, the written-out size of a result's strings. Past a bound the
evaluation stops at once with ``ExpressionLimitExceeded`` (an ``ExpressionError``): at
run time the engine turns it into an incident at the element, at deploy into a
refusal. The bounds are counts, not time: the core reads no clock, and a count gives
the same verdict on every machine.

The budget travels in a context variable rather than through every built-in's
signature: built-ins stay plain functions, and a built-in called outside an evaluation
(a test) simply runs unbudgeted. Regular expressions run on a linear-time engine
(``xpath_regex``), but linear in the input *times the pattern's program*: at worst RE2
walks every instruction of the program for every byte (``(a?){900}a{900}`` over 80 KB is
13 s in one call, which no soft time limit interrupts). So a regex built-in pays that
product in steps before it calls the engine (``charge_regex``), and a pattern whose
program is past ``regex_program_size`` is refused at compile (docs/limits.md, bounded
FEEL).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from dormant.engine_core.errors import ExpressionLimitExceeded

__all__ = [
    "DEFAULT_LIMITS",
    "Budget",
    "Limits",
    "budget",
    "charge",
    "charge_regex",
    "check_collection",
    "check_regex_program",
    "check_string",
    "current",
]

# Input bytes times program instructions that cost one step. At worst RE2 spends about
# 25 ns on one such unit, a FEEL step one to four microseconds: charging one step per
# 32 units prices a regex's worst case several times higher than the loop it replaces,
# so the step bound holds a regex to well under the time it holds a loop to.
REGEX_UNITS_PER_STEP = 32


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one evaluation; the defaults are the one place they are set."""

    steps: int = 1_000_000
    string_length: int = 1_000_000
    collection_size: int = 100_000
    call_depth: int = 64
    nesting_depth: int = 100
    expression_length: int = 100_000
    # Characters of the strings a result holds, counted once per reference: what the
    # result costs written out (``for i in 1..90000 return s`` with a 1 MB ``s``).
    result_size: int = 10_000_000
    # Instructions of a compiled regular expression: what RE2 may walk for each input
    # byte. XPath's ``\w`` alone is about 1,500 (it spans Unicode categories).
    regex_program_size: int = 20_000


DEFAULT_LIMITS = Limits()


class Budget:
    """What one evaluation has used so far of its ``Limits``."""

    __slots__ = ("depth", "limits", "steps")

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.steps = 0
        self.depth = 0

    def charge(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.limits.steps:
            raise ExpressionLimitExceeded(
                f"FEEL evaluation exceeded its step budget of {self.limits.steps:,} steps "
                "(a loop, a recursion, a built-in over too many items, or a result that "
                "writes out to too many values)",
                limit="steps",
            )

    def check_string(self, length: int) -> None:
        if length > self.limits.string_length:
            raise ExpressionLimitExceeded(
                f"FEEL evaluation built a string of {length:,} characters, over the limit of "
                f"{self.limits.string_length:,}",
                limit="string_length",
            )

    def check_collection(self, size: int) -> None:
        if size > self.limits.collection_size:
            raise ExpressionLimitExceeded(
                f"FEEL evaluation built a list of {size:,} items, over the limit of "
                f"{self.limits.collection_size:,}",
                limit="collection_size",
            )

    def check_result_size(self, chars: int) -> None:
        if chars > self.limits.result_size:
            raise ExpressionLimitExceeded(
                f"FEEL evaluation returned a value whose strings add up to {chars:,} "
                f"characters once written out, over the limit of {self.limits.result_size:,}",
                limit="result_size",
            )

    def check_regex_program(self, pattern: str, size: int) -> None:
        if size > self.limits.regex_program_size:
            raise ExpressionLimitExceeded(
                f"FEEL regular expression {_quoted(pattern)} compiles to a program of "
                f"{size:,} instructions, over the limit of {self.limits.regex_program_size:,}",
                limit="regex_program_size",
            )

    def charge_regex(self, pattern: str, program_size: int, input_bytes: int) -> None:
        """The worst case of one regex call, charged before it runs: RE2 cannot be
        stopped once called, so the bound must be decided before the call."""
        try:
            self.charge(-(-input_bytes * program_size // REGEX_UNITS_PER_STEP))
        except ExpressionLimitExceeded:
            raise ExpressionLimitExceeded(
                f"FEEL regular expression {_quoted(pattern)} ({program_size:,} instructions) "
                f"over an input of {input_bytes:,} bytes would exceed the step budget of "
                f"{self.limits.steps:,} steps (one step per {REGEX_UNITS_PER_STEP} input bytes "
                "times instructions)",
                limit="steps",
            ) from None

    @contextmanager
    def call(self) -> Iterator[None]:
        """One level of user function call; recursion past ``call_depth`` stops."""
        self.depth += 1
        try:
            if self.depth > self.limits.call_depth:
                raise ExpressionLimitExceeded(
                    f"FEEL function calls nested deeper than {self.limits.call_depth} "
                    "(unbounded recursion?)",
                    limit="call_depth",
                )
            yield
        finally:
            self.depth -= 1


_CURRENT: ContextVar[Budget | None] = ContextVar("feel_budget", default=None)


def current() -> Budget | None:
    return _CURRENT.get()


@contextmanager
def budget(limits: Limits | None) -> Iterator[Budget]:
    """Run an evaluation under ``limits``; a nested evaluation shares the outer budget."""
    outer = _CURRENT.get()
    if outer is not None and limits is None:
        yield outer
        return
    fresh = Budget(limits or DEFAULT_LIMITS)
    token = _CURRENT.set(fresh)
    try:
        yield fresh
    finally:
        _CURRENT.reset(token)


def charge(n: int = 1) -> None:
    b = _CURRENT.get()
    if b is not None:
        b.charge(n)


def check_string(length: int) -> None:
    b = _CURRENT.get()
    if b is not None:
        b.check_string(length)


def check_collection(size: int) -> None:
    b = _CURRENT.get()
    if b is not None:
        b.check_collection(size)


def check_regex_program(pattern: str, size: int) -> None:
    b = _CURRENT.get()
    if b is not None:
        b.check_regex_program(pattern, size)


def charge_regex(pattern: str, program_size: int, input_bytes: int) -> None:
    b = _CURRENT.get()
    if b is not None:
        b.charge_regex(pattern, program_size, input_bytes)


def _quoted(pattern: str) -> str:
    """A pattern as an error quotes it: one line, and short."""
    return repr(pattern if len(pattern) <= 60 else pattern[:57] + "...")
