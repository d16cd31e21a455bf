"""Model inputs hardened in the readers (issue 8, item 8, the model side).

* A BPMN or DMN document is decoded as its XML declaration (or byte-order mark) says:
  a valid ISO-8859-1 or UTF-16 file deploys, and its non-ASCII names survive; a ``str``
  input still works whatever its declaration says.
* Nesting is bounded: 1000 nested sub-processes, or a document nested thousands of
  elements deep, are refused with one classified line naming the limit — never a
  ``RecursionError`` at deploy.
* Size is bounded at the edge: ``Client.deploy`` and ``dormant deploy`` read at most
  ``DORMANT_MAX_MODEL_BYTES`` (+1) bytes, so ``dormant deploy /dev/zero`` ends at once
  with a one-line error naming the setting.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dormant.engine_core.bpmn import MAX_SCOPE_DEPTH, read_bpmn
from dormant.engine_core.dmn import read_dmn
from dormant.engine_core.errors import InvalidModel, InvalidSetting
from dormant.engine_core.xml_input import MAX_XML_DEPTH, model_text
from dormant.persistence.settings import Settings
from dormant.persistence.store import Store

REPO = Path(__file__).resolve().parents[2]

BPMN_NS = "http://www.omg.org/spec/BPMN/20100524/MODEL"
DMN_NS = "https://www.omg.org/spec/DMN/20191111/MODEL/"


def bpmn(encoding: str, name: str = "Café crème") -> str:
    return (
        f'<?xml version="1.0" encoding="{encoding}"?>\n'
        f'<bpmn:definitions xmlns:bpmn="{BPMN_NS}" id="d">'
        f'<bpmn:process id="enc" isExecutable="true">'
        f'<bpmn:startEvent id="start"/><bpmn:userTask id="u" name="{name}"/>'
        '<bpmn:endEvent id="end"/>'
        '<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="u"/>'
        '<bpmn:sequenceFlow id="f2" sourceRef="u" targetRef="end"/>'
        "</bpmn:process></bpmn:definitions>"
    )


def dmn(encoding: str) -> str:
    return (
        f'<?xml version="1.0" encoding="{encoding}"?>\n'
        f'<definitions xmlns="{DMN_NS}" id="defs" name="d" namespace="x">'
        '<decision id="greeting" name="Grüße"><literalExpression><text>"Grüß Gott"</text>'
        "</literalExpression></decision></definitions>"
    )


ENCODED = [
    pytest.param("ISO-8859-1", "latin-1", id="iso-8859-1"),
    pytest.param("UTF-16", "utf-16", id="utf-16-bom"),
    pytest.param("UTF-16LE", "utf-16-le", id="utf-16le"),
    pytest.param("UTF-8", "utf-8-sig", id="utf-8-bom"),
    pytest.param("windows-1252", "cp1252", id="windows-1252"),
    pytest.param("UTF-32", "utf-32", id="utf-32"),
    pytest.param("UTF-7", "utf-7", id="utf-7"),  # one the XML parser itself cannot read
]


@pytest.mark.parametrize(("declared", "codec"), ENCODED)
def test_a_model_is_decoded_as_its_xml_declaration_says(declared: str, codec: str) -> None:
    data = bpmn(declared).encode(codec)
    assert "Café crème" in model_text(data)
    (from_bytes,) = read_bpmn(data)
    (from_text,) = read_bpmn(model_text(data))
    assert from_bytes.node("u").name == from_text.node("u").name == "Café crème"


@pytest.mark.parametrize(("declared", "codec"), ENCODED)
def test_a_dmn_is_decoded_as_its_xml_declaration_says(declared: str, codec: str) -> None:
    (decision,) = read_dmn(dmn(declared).encode(codec))
    assert decision.name == "Grüße"
    (again,) = read_dmn(model_text(dmn(declared).encode(codec)))
    assert again.name == "Grüße"


def test_a_str_input_works_whatever_its_declaration_says() -> None:
    for declared in ("ISO-8859-1", "UTF-16", "UTF-8"):
        (d,) = read_bpmn(bpmn(declared))
        assert d.node("u").name == "Café crème"


def test_bytes_that_are_not_in_the_declared_encoding_are_one_classified_line() -> None:
    bad = bpmn("UTF-8").replace("Café", "Caf\udce9").encode("utf-8", "surrogateescape")
    with pytest.raises(InvalidModel) as caught:
        model_text(bad)
    assert "UTF-8" in str(caught.value) and "\n" not in str(caught.value)
    unknown = bpmn("x-no-such-encoding").encode("ascii", "replace")
    with pytest.raises(InvalidModel, match="x-no-such-encoding"):
        model_text(unknown)
    for reader in (read_bpmn, read_dmn):  # the readers decode through the same door
        with pytest.raises(InvalidModel, match="x-no-such-encoding"):
            reader(unknown)


@pytest.mark.parametrize(("declared", "codec"), ENCODED[:3])
def test_the_store_deploys_an_encoded_file_and_keeps_its_names(
    declared: str, codec: str, tmp_path: Path
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite3'}")
    now = datetime(2026, 1, 5, tzinfo=UTC)
    try:
        (first,) = store.deployments.deploy(bpmn(declared).encode(codec), now)
        (again,) = store.deployments.deploy(bpmn(declared).encode(codec), now)
        assert (first.key, first.version) == ("enc", 1)
        assert again.version == 1  # the same document, decoded the same way
        definition, _ = store.deployments.definition("enc", 1)
        assert definition.node("u").name == "Café crème"
        # Read back from the stored text by a process that never saw the file.
        fresh = Store(f"sqlite:///{tmp_path / 'db.sqlite3'}")
        try:
            from dormant.persistence import deployments

            deployments._PARSED.clear()
            reread, _ = fresh.deployments.definition("enc", 1)
            assert reread.node("u").name == "Café crème"
        finally:
            fresh.close()
        (decision,) = store.deployments.deploy(dmn(declared).encode(codec), now)
        assert decision.key == "greeting"
    finally:
        store.close()


def _nested_sub_processes(depth: int) -> str:
    inner = '<bpmn:startEvent id="s0"/>'
    for i in range(depth):
        inner = (
            f'<bpmn:subProcess id="sp{i}"><bpmn:startEvent id="st{i}"/>{inner}</bpmn:subProcess>'
            if i
            else f'<bpmn:subProcess id="sp{i}">{inner}</bpmn:subProcess>'
        )
    return (
        f'<bpmn:definitions xmlns:bpmn="{BPMN_NS}" id="d">'
        f'<bpmn:process id="deep" isExecutable="true"><bpmn:startEvent id="start"/>{inner}'
        "</bpmn:process></bpmn:definitions>"
    )


@pytest.mark.parametrize("depth", [MAX_SCOPE_DEPTH + 1, 1000, 5000])
def test_deeply_nested_sub_processes_are_refused_naming_the_limit(depth: int) -> None:
    with pytest.raises(InvalidModel) as caught:
        read_bpmn(_nested_sub_processes(depth))
    message = str(caught.value)
    assert "nest" in message and "\n" not in message
    assert str(MAX_SCOPE_DEPTH) in message or str(MAX_XML_DEPTH) in message


def test_a_document_nested_deeper_than_the_xml_limit_is_refused() -> None:
    deep = "<bpmn:extensionElements>" * 20000 + "</bpmn:extensionElements>" * 20000
    doc = (
        f'<bpmn:definitions xmlns:bpmn="{BPMN_NS}" id="d"><bpmn:process id="p" '
        f'isExecutable="true">{deep}</bpmn:process></bpmn:definitions>'
    )
    with pytest.raises(InvalidModel, match=f"{MAX_XML_DEPTH} levels"):
        read_bpmn(doc)
    dmn_doc = f'<definitions xmlns="{DMN_NS}" id="x">{"<a>" * 20000}{"</a>" * 20000}</definitions>'
    with pytest.raises(InvalidModel, match=f"{MAX_XML_DEPTH} levels"):
        read_dmn(dmn_doc)


def _valid_nesting(depth: int) -> str:
    """start -> sp0 -> end, where sp<i> is start -> sp<i+1> -> end, ``depth`` levels."""
    inner = ""
    for i in reversed(range(depth)):
        child = f"sp{i + 1}" if inner else f"t{i}"
        body = inner or f'<bpmn:task id="{child}"/>'
        inner = (
            f'<bpmn:subProcess id="sp{i}"><bpmn:startEvent id="s{i}"/>{body}'
            f'<bpmn:endEvent id="e{i}"/>'
            f'<bpmn:sequenceFlow id="a{i}" sourceRef="s{i}" targetRef="{child}"/>'
            f'<bpmn:sequenceFlow id="b{i}" sourceRef="{child}" targetRef="e{i}"/>'
            "</bpmn:subProcess>"
        )
    return (
        f'<bpmn:definitions xmlns:bpmn="{BPMN_NS}" id="d">'
        f'<bpmn:process id="nested" isExecutable="true"><bpmn:startEvent id="start"/>{inner}'
        '<bpmn:endEvent id="end"/>'
        '<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="sp0"/>'
        '<bpmn:sequenceFlow id="f2" sourceRef="sp0" targetRef="end"/>'
        "</bpmn:process></bpmn:definitions>"
    )


def test_nesting_within_the_limit_deploys_and_runs() -> None:
    from tests.core.enginekit import Run

    (definition,) = read_bpmn(_valid_nesting(MAX_SCOPE_DEPTH))
    run = Run(definition)
    run.start()
    assert run.status == "completed"
    with pytest.raises(InvalidModel, match=f"more than {MAX_SCOPE_DEPTH} levels"):
        read_bpmn(_valid_nesting(MAX_SCOPE_DEPTH + 1))


@pytest.mark.parametrize("backoff", ["P9999999999D", "PT99999999999999999999S", "P900000000D"])
def test_a_retry_backoff_past_the_calendar_is_refused_at_deploy(backoff: str) -> None:
    doc = (
        f'<bpmn:definitions xmlns:bpmn="{BPMN_NS}" xmlns:dormant="http://dormant.dev/schema/1.0"'
        ' id="d"><bpmn:process id="p" isExecutable="true"><bpmn:startEvent id="s"/>'
        '<bpmn:task id="t"><bpmn:extensionElements><dormant:retryPolicy attempts="2" '
        f'backoff="{backoff}"/></bpmn:extensionElements></bpmn:task>'
        '<bpmn:sequenceFlow id="f" sourceRef="s" targetRef="t"/></bpmn:process>'
        "</bpmn:definitions>"
    )
    with pytest.raises(InvalidModel, match=r"'t'.*retryPolicy"):
        read_bpmn(doc)
    (ok,) = read_bpmn(doc.replace(backoff, "P366D"))
    assert ok.node("t").retry_policy is not None


def test_the_model_size_limit_is_a_setting_with_a_default() -> None:
    assert Settings.from_env({}).max_model_bytes == 4 * 1024 * 1024
    assert Settings.from_env({"DORMANT_MAX_MODEL_BYTES": "1000"}).max_model_bytes == 1000
    with pytest.raises(InvalidSetting, match="DORMANT_MAX_MODEL_BYTES"):
        Settings.from_env({"DORMANT_MAX_MODEL_BYTES": "0"})


def test_client_deploy_refuses_a_model_over_the_limit_before_reading_it_all(
    tmp_path: Path,
) -> None:
    from dormant.tasks.client import Client

    big = tmp_path / "big.bpmn"
    big.write_text(bpmn("UTF-8", name="x" * 5000))
    client = Client(f"sqlite:///{tmp_path / 'db.sqlite3'}", f"sqla+sqlite:///{tmp_path / 'b'}")
    client._store.settings = Settings.from_env(
        {}, **(client._store.settings.model_dump() | {"max_model_bytes": 2000})
    )
    try:
        for source in (big, str(big), big.read_text(), big.read_bytes()):
            with pytest.raises(InvalidModel, match="DORMANT_MAX_MODEL_BYTES=2000"):
                client.deploy(source)
        with pytest.raises(InvalidModel, match="DORMANT_MAX_MODEL_BYTES=2000"):
            client.deploy(Path("/dev/zero"))
        small = tmp_path / "small.bpmn"
        small.write_bytes(bpmn("ISO-8859-1").encode("latin-1"))
        assert client.deploy(small).key == "enc"
        # A document pasted as text with its byte-order mark is a document, not a path.
        assert client.deploy("\ufeff" + bpmn("UTF-8")).key == "enc"
    finally:
        client._store.close()


def test_dormant_deploy_dev_zero_is_a_one_line_error_naming_the_limit(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "DORMANT_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DORMANT_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}",
        "DORMANT_MAX_MODEL_BYTES": "100000",
    }
    done = subprocess.run(
        [sys.executable, "-m", "dormant.tasks.cli", "deploy", "/dev/zero"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "DORMANT_MAX_MODEL_BYTES=100000" in lines[0] and "/dev/zero" in lines[0]
    latin = tmp_path / "latin.bpmn"
    latin.write_bytes(bpmn("ISO-8859-1").encode("latin-1"))
    ok = subprocess.run(
        [sys.executable, "-m", "dormant.tasks.cli", "deploy", str(latin)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["enc", "1"]
