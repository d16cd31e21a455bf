"""RFC 9457 problem documents, the API's one shape of a refusal (docs/camunda-api.md):
Modeler shows ``detail`` to its user, the SDKs raise on a missing field, so every
answer that is not a success carries all of ``type``, ``title``, ``status``,
``detail`` and ``instance``."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse

__all__ = ["Problem", "problem"]


class Problem(Exception):
    """An answer that is an RFC 9457 problem document."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail


def problem(
    status: int,
    title: str,
    detail: str,
    instance: str,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        {
            "type": "about:blank",
            "title": title,
            "status": status,
            "detail": detail,
            "instance": instance,
        },
        status_code=status,
        media_type="application/problem+json",
        headers=dict(headers or {}),
    )
