"""The Camunda 8 corpus: every real model either reads or is refused naming one of its ids.

"Runs unchanged" starts here: a model that uses only elements dormant supports must
deploy. The floor below sits just under today's count so a regression fails loudly;
raise it when support grows.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.errors import InvalidModel, ModelError, UnsupportedElement
from tests.conformance import CAMUNDA8

MODELS = sorted(CAMUNDA8.glob("*.bpmn"))
PARSED_FLOOR = 73  # of 73: every file reads (business rule tasks call DMN decisions)


def test_the_corpus_is_there() -> None:
    """A missing corpus fails loudly: a conformance test that skips proves nothing."""
    assert len(MODELS) == 73, f"expected the 73 Camunda 8 models at {CAMUNDA8}, found {len(MODELS)}"


def _ids(xml: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', xml))


@pytest.mark.parametrize("path", MODELS, ids=[p.name for p in MODELS])
def test_model_reads_or_is_refused_by_id(path: Path) -> None:
    xml = path.read_text(encoding="utf-8")
    try:
        definitions = read_bpmn(xml)
    except UnsupportedElement as exc:
        assert exc.element_id in _ids(xml), str(exc)
        return
    except InvalidModel as exc:
        assert any(repr(i) in str(exc) for i in _ids(xml)), str(exc)
        return
    assert definitions
    for d in definitions:
        assert d.key in _ids(xml)
        assert set(d.nodes) <= _ids(xml)


def test_corpus_counts() -> None:
    parsed = 0
    reasons: Counter[str] = Counter()
    for path in MODELS:
        try:
            read_bpmn(path.read_bytes())
            parsed += 1
        except UnsupportedElement as exc:
            reasons[
                f"unsupported {exc.element_type}: {str(exc).split(': ', 1)[1].split(';')[0]}"
            ] += 1
        except ModelError as exc:
            reasons[f"{type(exc).__name__}: {exc}"] += 1
    print(f"\ncamunda8 corpus: {parsed}/{len(MODELS)} parsed, {sum(reasons.values())} refused")
    for reason, count in reasons.most_common():
        print(f"  {count} x {reason}")
    assert parsed >= PARSED_FLOOR
