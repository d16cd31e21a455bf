"""The operators' web console (``dormant console``): see docs/console.md."""

from tasks.console.app import create_app
from tasks.console.config import ConsoleConfig

__all__ = ["ConsoleConfig", "create_app"]
