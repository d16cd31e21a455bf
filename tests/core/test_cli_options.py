"""Every option of every ``dormant`` command reaches its own parameter (issue 28).

``instances migrate --to 2 --version 1`` once bound both options to one parameter, so
the version filter was lost and the target became version 1. The class of that bug is
two options sharing a destination, or an option whose value lands elsewhere: this walk
gives every option of every command a value of its own, parses the command line as
``dormant`` would, and checks each value arrives at the parameter of that option.
Parsing only: no command runs, so this needs no database (the commands themselves are
run against a real one in tests/integration/test_cli_classes.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click
import pytest

from dormant.tasks.cli import cli


def _commands(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


COMMANDS = dict(_commands(cli))


def _value(param: click.Parameter, n: int) -> tuple[list[str], Any]:
    """Command-line words giving ``param`` a value no other parameter gets, and that value
    as the command should receive it."""
    kind = param.type
    if isinstance(kind, click.Choice):
        raw: str = str(kind.choices[n % len(kind.choices)])
        parsed: Any = raw
    elif isinstance(kind, click.types.IntParamType):
        low = getattr(kind, "min", None) or 0
        parsed = low + 1 + n
        raw = str(parsed)
    elif isinstance(kind, click.types.FloatParamType):
        parsed = 1.5 + n
        raw = str(parsed)
    else:
        raw = parsed = f"v{n}-{param.name}"
    if getattr(param, "multiple", False) or (param.nargs == -1):
        return [raw], (parsed,)
    return [raw], parsed


def _line(command: click.Command) -> tuple[list[str], dict[str, Any]]:
    words: list[str] = []
    expected: dict[str, Any] = {}
    arguments: list[str] = []
    for n, param in enumerate(command.params):
        if isinstance(param, click.Argument):
            raw, parsed = _value(param, n)
            arguments += raw
            expected[str(param.name)] = parsed
            continue
        assert isinstance(param, click.Option)
        if param.hidden or param.name == "help":
            continue
        flag = max(param.opts, key=len)
        if param.is_flag:
            words.append(flag)
            expected[str(param.name)] = True
            continue
        raw, parsed = _value(param, n)
        words += [flag, *raw]
        expected[str(param.name)] = parsed
    return [*words, *arguments], expected


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_each_option_reaches_its_own_parameter(path: str) -> None:
    command = COMMANDS[path]
    names = [p.name for p in command.params]
    assert len(names) == len(set(names)), f"dormant {path}: two options share a parameter"
    words, expected = _line(command)
    ctx = command.make_context(path, words)
    for name, value in expected.items():
        assert ctx.params[name] == value, f"dormant {path} {' '.join(words)}: {name}"


def test_the_walk_finds_every_command() -> None:
    # The walk is only as good as its reach: the operations commands are registered
    # by functions, and a group added later must show up here too.
    for path in ("instances migrate", "instances set-variables", "incidents retry", "worker"):
        assert path in COMMANDS
