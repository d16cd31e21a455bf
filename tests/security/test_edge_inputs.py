"""Inputs checked at the edge (issue 8, item 8, the data side).

The Client refuses, before anything is written or published, what the database or the
JSON encoder would refuse later: a one-line classified error naming the field and the
limit. The CLI shows the same line (exit 2, no traceback), and a producer that has only
Celery gets its trigger kept as a failed trigger with that line, never a crash deep in
a transaction.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from dormant.engine_core.errors import (
    InvalidField,
    InvalidMessage,
    InvalidSetting,
    InvalidVariables,
)
from dormant.persistence.settings import Settings
from dormant.persistence.tables import inbox
from tests.integration.conftest import Stack
from tests.integration.waitkit import end, message_catch, model, start
from tests.security.kit import failed_for, send_raw

pytestmark = pytest.mark.integration


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def waiting(key: str, name: str) -> str:
    nodes = start() + message_catch("mc", name) + end()
    return model(key, nodes, [("start", "mc"), ("mc", "end")], messages={name: "=id"})


def inbox_rows(stack: Stack) -> int:
    with stack.client._store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(inbox)).scalar_one())


BAD_VARIABLES = [
    ({"v": "a\x00b"}, "variables.v contains a NUL character"),
    ({"v": "lone \ud800"}, "variables.v contains a lone surrogate"),
    ({"v": {"w": nested(100)}}, "nested more than 64 levels"),
    ({"v": "x" * 1_100_000}, "larger than the limit of 1048576 bytes"),
    ({"v": 10**5000}, "more than the limit of 4300 digits"),
    ({"v": float("nan")}, "variables.v is nan"),
    ({"k\x00": 1}, "a key contains a NUL character"),
]


@pytest.mark.parametrize(
    ("variables", "says"),
    BAD_VARIABLES,
    ids=["nul", "surrogate", "deep", "large", "huge-int", "nan", "nul-key"],
)
def test_the_client_refuses_variables_it_could_not_store(
    bare_stack: Stack, variables: dict[str, Any], says: str
) -> None:
    c = bare_stack.client
    c.deploy(waiting("edge-vars", "edge-vars-go"))
    before = inbox_rows(bare_stack)
    for send in (
        lambda: c.start("edge-vars", variables),
        lambda: c.send_message("edge-vars-go", "k", variables),
        lambda: c.signal("edge-vars-go", variables),
    ):
        with pytest.raises(InvalidVariables) as refused:
            send()
        assert says in str(refused.value)
        assert "\n" not in str(refused.value) and len(str(refused.value)) < 400
    assert inbox_rows(bare_stack) == before  # nothing was accepted


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        (lambda c: c.start("edge-f", business_key="b" * 256), InvalidField, "business key"),
        (lambda c: c.start("edge-f", business_key="b\x00"), InvalidField, "NUL"),
        (lambda c: c.send_message("n" * 256, "k"), InvalidMessage, "message name"),
        (lambda c: c.send_message("n", "k" * 256), InvalidMessage, "correlation key"),
        (lambda c: c.send_message("n", "k", message_id="i" * 256), InvalidMessage, "message id"),
        (lambda c: c.send_message("n", "k", ttl=1e300), InvalidMessage, "ttl"),
        (lambda c: c.send_message("n", "k", ttl=-1), InvalidMessage, "ttl"),
        (lambda c: c.send_message("n", "k", ttl=float("inf")), InvalidMessage, "ttl"),
        (lambda c: c.signal("s" * 256), InvalidMessage, "signal name"),
    ],
    ids=[
        "business-key-long",
        "business-key-nul",
        "name-long",
        "key-long",
        "id-long",
        "ttl-huge",
        "ttl-negative",
        "ttl-inf",
        "signal-long",
    ],
)
def test_the_client_refuses_fields_outside_their_limits(
    bare_stack: Stack, call: Any, error: type[Exception], says: str
) -> None:
    c = bare_stack.client
    c.deploy(waiting("edge-f", "edge-f-go"))
    before = inbox_rows(bare_stack)
    with pytest.raises(error) as refused:
        call(c)
    text = str(refused.value)
    assert says in text and "\n" not in text
    assert "255" in text or "ttl" in says or "NUL" in says
    assert inbox_rows(bare_stack) == before


def test_the_cli_prints_one_line_for_each_refusal(bare_stack: Stack) -> None:
    """A 30,000-deep `--var`, a TTL of 1e300, a NUL written as JSON: exit 2, one line."""
    s = bare_stack
    s.client.deploy(waiting("edge-cli", "edge-cli-go"))
    deep = "[" * 30_000 + "]" * 30_000
    for args, says in [
        (("start", "edge-cli", "--var", f"deep={deep}"), "nested too deep"),
        (("send-message", "edge-cli-go", "--key", "k", "--ttl", "1e300"), "ttl"),
        (("start", "edge-cli", "--var", 'v="a\\u0000b"'), "NUL"),
        (("start", "edge-cli", "--business-key", "b" * 300), "business key"),
    ]:
        done = s.run_cli(*args)
        assert done.returncode == 2, (args[:2], done.stdout, done.stderr)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
        assert says in done.stderr and "Traceback" not in done.stderr


def test_the_trigger_tasks_check_the_same_limits(shared_stack: Stack) -> None:
    """A producer with only Celery: too-deep variables and an over-long correlation key
    are refused at the task with the same one line, and the trigger is kept."""
    s = shared_stack
    send_raw(
        s,
        "dormant.message",
        "message.edge-task",
        name="edge-task",
        correlation_key="k",
        variables={"v": nested(100)},
        message_id="edge-task-deep",
    )
    send_raw(
        s,
        "dormant.message",
        "message.edge-task",
        name="edge-task",
        correlation_key="k" * 300,
        variables={},
        message_id="edge-task-key",
    )

    def kept(message_id: str) -> Any:
        def check() -> Any:
            return [
                f
                for f in failed_for(s, task="dormant.message")
                if f.body["kwargs"].get("message_id") == message_id
            ]

        from tests.integration.conftest import wait_for

        return wait_for(check, 30, what=f"{message_id} kept")[0]

    deep = kept("edge-task-deep")
    assert deep.error_class == "InvalidVariables" and "64 levels" in deep.error
    key = kept("edge-task-key")
    assert key.error_class == "InvalidMessage" and "correlation key" in key.error
    assert "255" in key.error


def test_the_limits_are_settings_with_bounds() -> None:
    s = Settings.from_env(
        {"DORMANT_MAX_VARIABLES_BYTES": "4096", "DORMANT_MAX_VARIABLES_DEPTH": "8"}
    )
    assert (s.limits.max_bytes, s.limits.max_depth) == (4096, 8)
    assert (Settings.from_env({}).limits.max_bytes, Settings.from_env({}).limits.max_depth) == (
        1_048_576,
        64,
    )
    for env in ({"DORMANT_MAX_VARIABLES_DEPTH": "5000"}, {"DORMANT_MAX_VARIABLES_BYTES": "10"}):
        with pytest.raises(InvalidSetting, match=next(iter(env))):
            Settings.from_env(env)


def test_the_trigger_batch_size_is_a_bounded_setting() -> None:
    assert Settings.from_env({}).trigger_batch_max == 16
    assert Settings.from_env({"DORMANT_TRIGGER_BATCH_MAX": "1"}).trigger_batch_max == 1
    for value in ("0", "257", "many"):
        with pytest.raises(InvalidSetting, match="DORMANT_TRIGGER_BATCH_MAX") as refused:
            Settings.from_env({"DORMANT_TRIGGER_BATCH_MAX": value})
        if value != "many":
            assert "from 1 to 256" in str(refused.value)


def test_the_job_batch_settings_are_bounded() -> None:
    defaults = Settings.from_env({})
    assert (defaults.job_batch_max, defaults.job_batch_fast_seconds) == (16, 0.01)
    assert defaults.job_batch_seconds == 0.05
    for name, value, says in [
        ("DORMANT_JOB_BATCH_MAX", "0", "from 1 to 256"),
        ("DORMANT_JOB_BATCH_MAX", "257", "from 1 to 256"),
        ("DORMANT_JOB_BATCH_FAST_SECONDS", "0", "at most 1.0 seconds"),
        ("DORMANT_JOB_BATCH_FAST_SECONDS", "5", "at most 1.0 seconds"),
        ("DORMANT_JOB_BATCH_SECONDS", "-1", "at most 60.0 seconds"),
        ("DORMANT_JOB_BATCH_SECONDS", "3600", "at most 60.0 seconds"),
    ]:
        with pytest.raises(InvalidSetting, match=name) as refused:
            Settings.from_env({name: value})
        assert says in str(refused.value)
