"""``Writes``: several rows as one ordered recordset, prebuilt statements' parameters.

A prebuilt statement (the same object at every trigger) names its parameters; two of
them in one flush under the same name would silently share one value, so a second one
is either refused (``add``) or built afresh (``add_rows``). Rows keep their order.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, create_engine, select

from dormant.persistence.tables import facts
from dormant.persistence.writes import Writes
from tests.conftest import _truncate

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    _truncate(pg_url)
    e = create_engine(pg_url)
    try:
        yield e
    finally:
        e.dispose()


def _rows(instance_id: str, kinds: list[str]) -> list[dict[str, object]]:
    return [
        {"instance_id": instance_id, "revision": 1, "at": NOW, "kind": k, "details": {"k": k}}
        for k in kinds
    ]


def test_two_recordsets_of_one_table_in_one_flush_both_land_in_order(engine: Engine) -> None:
    with engine.begin() as conn:
        writes = Writes(conn)
        writes.add_rows(facts, _rows("a", ["a1", "a2", "a3"]))
        assert not writes.binds("facts_rows")  # the prebuilt statement took the name
        writes.add_rows(facts, _rows("b", ["b1", "b2"]))  # built afresh, its own value
        writes.flush()
        assert writes.binds("facts_rows")  # a flush frees the names
    with engine.connect() as conn:
        got = [
            (r.instance_id, r.kind, r.details, r.at)
            for r in conn.execute(select(facts).order_by(facts.c.id))
        ]
    # Each recordset in its rows' order (the two CTEs of one statement run in no order).
    assert [g[1] for g in got if g[0] == "a"] == ["a1", "a2", "a3"]
    assert [g[1] for g in got if g[0] == "b"] == ["b1", "b2"]
    assert {(g[1], g[2]["k"], g[3]) for g in got} == {
        (k, k, NOW) for k in ("a1", "a2", "a3", "b1", "b2")
    }


def test_a_parameter_name_queued_twice_is_refused(engine: Engine) -> None:
    with engine.begin() as conn:
        writes = Writes(conn)
        writes.add_rows(facts, _rows("a", ["a1", "a2"]))
        statement = writes._queued[0][0]
        with pytest.raises(ValueError, match="facts_rows"):
            writes.add(statement, params={"facts_rows": "[]"})


def test_a_naive_datetime_in_a_recordset_row_is_refused(engine: Engine) -> None:
    with engine.begin() as conn:
        writes = Writes(conn)
        rows = _rows("a", ["a1", "a2"])
        rows[1]["at"] = datetime(2026, 12, 1, 12, 0)
        with pytest.raises(ValueError, match="naive datetime"):
            writes.add_rows(facts, rows)
