"""``dormant api``: the Camunda 8 REST API app under uvicorn (docs/camunda-api.md)."""

from __future__ import annotations

import logging

import uvicorn

from dormant.tasks.api.app import create_app

__all__ = ["serve"]


def serve(*, host: str, port: int) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app()
    logging.getLogger("dormant.api").info(
        "Camunda 8 REST API on http://%s:%d/v2 ready.", host, port
    )
    uvicorn.run(app, host=host, port=port, access_log=False, log_level="warning")
