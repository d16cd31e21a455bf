"""``dormant api``: the Camunda 8 REST API app under uvicorn (docs/camunda-api.md).

Its credentials are the console's (``DORMANT_CONSOLE_AUTH``, ``_VIEWER_AUTH``,
``_TOKEN``, ``_HOSTS``), read and checked by the console's own settings: with none it
serves loopback only. Proxy headers are trusted as the console trusts them
(``FORWARDED_ALLOW_IPS``), so a proxied request is never taken for a local one.
"""

from __future__ import annotations

import logging
import os

from dormant.tasks.api.app import create_app
from dormant.tasks.console.config import ConsoleConfig
from dormant.tasks.console.listening import serve_then_announce

__all__ = ["serve"]


def serve(*, host: str, port: int) -> None:
    config = ConsoleConfig.from_env(host=host, port=port)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(config=config)
    auth = "credentials required" if config.has_credentials else "no credentials (loopback)"
    serve_then_announce(
        app,
        lambda: logging.getLogger("dormant.api").info(
            "Camunda 8 REST API on http://%s:%d/v2 (%s) ready.", host, port, auth
        ),
        host=host,
        port=port,
        access_log=False,
        log_level="warning",
        proxy_headers=True,
        forwarded_allow_ips=os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1"),
    )
