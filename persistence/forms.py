"""Camunda Forms deployed beside processes and decisions (``.form`` files).

A form is a JSON document with an ``id`` and ``components`` (the form-js schema, as
Camunda Modeler saves it). A user task links it by ``zeebe:formDefinition
formId="ID"``; the console's tasklist draws the latest deployed version of that id and
checks a completion's values against it (tasks/console/forms.py). Deploy tells a form
from a BPMN or DMN document by its content, never by its file name, and reads and
refuses it before anything is written, as it does models.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, insert, select

from dormant.engine_core.errors import InvalidModel
from dormant.persistence.tables import forms

__all__ = ["ParsedForm", "insert_form", "is_form", "latest_form", "parse_form"]


@dataclass(frozen=True, slots=True)
class ParsedForm:
    form_id: str
    text: str
    checksum: str


def is_form(text: str) -> bool:
    """A JSON object, not XML: the only kind of document deploy reads that starts so."""
    return text.lstrip().startswith("{")


def parse_form(text: str, name: str | None = None) -> ParsedForm:
    """The form's id and its text; ``InvalidModel`` when it is not a form."""
    where = f"form {name!r}" if name else "the form"
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise InvalidModel(f"{where} is not JSON: {exc}") from None
    except RecursionError:
        raise InvalidModel(f"{where} nests too deep to read") from None
    if not isinstance(schema, dict) or not isinstance(schema.get("components"), list):
        raise InvalidModel(f"{where} has no list of components: not a Camunda Form")
    form_id = schema.get("id")
    if not isinstance(form_id, str) or not form_id or len(form_id) > 255:
        raise InvalidModel(
            f"{where} needs an id (a string of 1 to 255 characters): a user task links "
            'it by zeebe:formDefinition formId="…"'
        )
    checksum = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return ParsedForm(form_id, text, checksum)


def latest_form(conn: Connection, form_id: str) -> tuple[int, str, str] | None:
    """(version, checksum, text) of the newest deployed version of ``form_id``."""
    row = conn.execute(
        select(forms.c.version, forms.c.checksum, forms.c.source)
        .where(forms.c.form_id == form_id)
        .order_by(forms.c.version.desc())
        .limit(1)
    ).first()
    return None if row is None else (int(row.version), str(row.checksum), str(row.source))


def insert_form(conn: Connection, parsed: ParsedForm, now: datetime, deployment_key: int) -> int:
    """A new version of the form, in ``deployment_key``; its version."""
    latest = conn.execute(
        select(func.max(forms.c.version)).where(forms.c.form_id == parsed.form_id)
    ).scalar()
    version = 1 if latest is None else int(latest) + 1
    conn.execute(
        insert(forms).values(
            form_id=parsed.form_id,
            version=version,
            checksum=parsed.checksum,
            source=parsed.text,
            deployed_at=now,
            deployment_key=deployment_key,
        )
    )
    return version
