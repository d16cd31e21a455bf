"""The operators' web console (``dormant console``): see docs/console.md."""

from dormant.tasks.console.app import create_app
from dormant.tasks.console.config import ConsoleConfig

__all__ = ["ConsoleConfig", "create_app"]
