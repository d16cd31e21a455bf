"""A package's public names loaded on first use (PEP 562): the packages' ``__init__``
files hand their name -> module table to ``lazy_names`` and export what it returns as
their module ``__getattr__`` and ``__dir__``, so importing one module of a package does
not import every module its ``__init__`` re-exports."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, homes: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose public names live in the
    modules ``homes`` names. A name loaded once becomes a plain attribute."""

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return getattr_, dir_
