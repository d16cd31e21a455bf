"""``dormant console``: the app under uvicorn, its access log ours, not uvicorn's.

uvicorn's own access log prints the query string (filters hold business keys), so it
is off; security.AccessLog writes one line per request without it. Proxy headers
(``X-Forwarded-For`` / ``-Proto``) are trusted from ``FORWARDED_ALLOW_IPS`` (uvicorn's
setting; default 127.0.0.1), so a proxy on the same machine gives the client's address
and scheme.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount

from dormant.tasks.api import oauth
from dormant.tasks.api.app import PREFIX, v2_app
from dormant.tasks.client import Client
from dormant.tasks.console.app import create_app
from dormant.tasks.console.config import ConsoleConfig
from dormant.tasks.console.listening import serve_then_announce
from dormant.tasks.console.throttle import SignInThrottle
from dormant.tasks.metrics import console_route

__all__ = ["console_app", "serve"]


def console_app(
    config: ConsoleConfig, *, client: Client | None = None, extra_routes: Sequence[BaseRoute] = ()
) -> Starlette:
    """The console as ``dormant console`` serves it: the pages, and the Camunda API's
    routes under ``/v2`` (the very app ``dormant api`` serves, docs/camunda-api.md),
    guarded by the API's guard with this console's credentials, roles and sign-in
    throttle."""
    client = client if client is not None else Client()
    throttle = SignInThrottle()
    api = Mount(PREFIX, app=v2_app(client, config, throttle))
    token = Mount(oauth.PATH, app=oauth.oauth_app(config, throttle))
    return create_app(
        config, client=client, extra_routes=extra_routes, throttle=throttle, mounts=[api, token]
    )


def serve(*, host: str, port: int, read_only: bool, root_path: str = "") -> None:
    config = ConsoleConfig.from_env(host=host, port=port, read_only=read_only)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    app = console_app(config, extra_routes=[console_route()])  # Prometheus: docs/metrics.md
    mode = "read-only" if read_only else "actions enabled"
    auth = "credentials required for actions" if config.has_credentials else "no sign-in (loopback)"
    serve_then_announce(
        app,
        lambda: logging.getLogger("dormant.console").info(
            "console on http://%s:%d%s (%s, %s) ready.", host, port, root_path, mode, auth
        ),
        host=host,
        port=port,
        root_path=root_path,
        access_log=False,
        proxy_headers=True,
        forwarded_allow_ips=os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1"),
        log_level="info",
    )
