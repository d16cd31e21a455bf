"""Model documents and job types at the trust boundary: how bytes are decoded, how deep
a document may nest, and which job types a model may never name (deploy time and run
time). Each refusal is one classified line naming what was refused and why.
"""

from __future__ import annotations

import codecs
import re
from xml.etree.ElementTree import Element, SubElement

import pytest

from dormant.engine_core.builder import ProcessBuilder
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.errors import InvalidModel
from dormant.engine_core.job_types import reserved_job_type
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.xml_input import check_depth, model_text
from tests.core.enginekit import Run

DOC = '<?xml version="1.0" encoding="{}"?><definitions name="caf\u00e9"/>'


@pytest.mark.parametrize(
    ("data", "text"),
    [
        pytest.param(DOC.format("ISO-8859-1").encode("latin-1"), "caf\u00e9", id="latin-1"),
        pytest.param(DOC.format("UTF-8").encode("utf-8"), "caf\u00e9", id="utf-8"),
        pytest.param(b'<definitions name="caf\xc3\xa9"/>', "caf\u00e9", id="no-declaration"),
        pytest.param(
            codecs.BOM_UTF16_LE + '<definitions name="caf\u00e9"/>'.encode("utf-16-le"),
            "caf\u00e9",
            id="utf-16-bom",
        ),
        # expat cannot read UTF-7; the declaration is ASCII and Python decodes the rest.
        pytest.param(
            DOC.format("UTF-7").encode("utf-7"), "caf\u00e9", id="declared-only-python-reads"
        ),
    ],
)
def test_bytes_decode_as_their_mark_or_declaration_says(data: bytes, text: str) -> None:
    decoded = model_text(data)
    assert text in decoded and not decoded.startswith("\ufeff")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(
            DOC.format("x-no-such-codec").encode("latin-1"),
            "the document declares encoding 'x-no-such-codec', which dormant cannot decode; "
            "save it as UTF-8",
            id="unknown-codec",
        ),
        pytest.param(
            DOC.format("UTF-8").encode("latin-1"),
            "the document is not valid UTF-8: byte 60 (invalid continuation byte)",
            id="not-what-it-declares",
        ),
        pytest.param(
            b'<definitions name="caf\xe9"/>',
            "the document is not valid UTF-8: byte 22",
            id="undeclared-not-utf-8",
        ),
    ],
)
def test_bytes_that_do_not_decode_are_one_invalid_model_line(data: bytes, reason: str) -> None:
    with pytest.raises(InvalidModel) as refused:
        model_text(data)
    assert reason in str(refused.value)
    if "byte" in reason:  # the offset is the first byte that does not decode
        assert f"byte {data.index(0xE9)} " in str(refused.value)


def test_a_str_document_is_taken_as_already_decoded() -> None:
    text = DOC.format("ISO-8859-1")
    assert model_text(text) is text


def _nested(depth: int) -> Element:
    root = element = Element("{urn:x}root")
    for _ in range(depth - 1):
        element = SubElement(element, "{urn:x}deep")
    return root


def test_nesting_is_refused_past_the_limit_naming_the_element() -> None:
    check_depth(_nested(5), limit=5)
    with pytest.raises(InvalidModel, match="more than 5 levels deep") as refused:
        check_depth(_nested(6), limit=5)
    assert "deep" in str(refused.value)


# -- reserved job types ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("job_type", "namespace"),
    [
        ("dormant.cancel", "'dormant.' (dormant's engine tasks)"),
        ("  Dormant.Incident.Resolve ", "'dormant.' (dormant's engine tasks)"),
        ("dormant", "'dormant.' (dormant's engine tasks)"),
        ("celery.chain", "'celery.' (Celery's built-ins)"),
        ("CELERY", "'celery.' (Celery's built-ins)"),
        ("charge-card", None),
        ("dormantly", None),
        ("my.celery.task", None),
    ],
)
def test_reserved_job_type_namespaces(job_type: str, namespace: str | None) -> None:
    reason = reserved_job_type(job_type)
    if namespace is None:
        assert reason is None
    else:
        assert reason is not None
        assert f"job type {job_type!r} is in the reserved namespace {namespace}" in reason


def _job(job_type: str, **fields: object) -> ProcessDefinition:
    b = ProcessBuilder("jobs")
    b.start_event("s").service_task("work", job_type, **fields).end_event("e")
    b.sequence("s", "work", "e")
    return b.build()


def test_a_static_reserved_job_type_is_refused_at_deploy() -> None:
    with pytest.raises(
        InvalidModel, match=re.escape("serviceTask 'work': job type 'celery.chord'")
    ):
        _job("celery.chord")


def test_a_computed_job_type_in_a_reserved_namespace_is_an_incident_not_a_dispatch() -> None:
    run = Run(_job("=kind"))
    step = run.start({"kind": "dormant.cancel"})
    incident = run.incident("work")
    assert "job type 'dormant.cancel' is in the reserved namespace 'dormant.'" in incident.cause
    assert incident.cause_class == "ExpressionError"
    assert not run.waits(kind="job") and run.effects_of(DispatchJob, step) == []


def test_job_retries_that_are_not_a_number_are_an_incident() -> None:
    run = Run(_job("charge", job_retries="=tries"))
    run.start({"tries": "many"})
    incident = run.incident("work")
    assert "job retries '=tries'" in incident.cause and "is not a number" in incident.cause
    assert not run.waits(kind="job")


@pytest.mark.parametrize(
    ("kind", "evaluated"),
    [("", "a str"), ("   ", "a str"), (True, "the boolean True"), (None, "null")],
)
def test_a_computed_job_type_that_is_not_a_non_empty_string_is_an_incident(
    kind: object, evaluated: str
) -> None:
    run = Run(_job("=kind"))
    run.start({"kind": kind})
    incident = run.incident("work")
    assert incident.cause == (
        f"job type '=kind' of 'work' evaluated to {evaluated}, expected a non-empty string"
    )
    assert not run.waits(kind="job")
