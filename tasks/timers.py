# mypy: disable-error-code="untyped-decorator"
"""Claimed deadlines fired in batches: ``dormant.fire_deadlines``.

One scan claims a burst of due rows at once (100 timers due at one instant are 100
claims). Sent as 100 ``dormant.fire_deadline`` tasks, each pays Celery's per-task cost
(~1.8 ms here) on top of its transaction (~3 ms), and — the larger cost — a worker
reading ``dormant.timers`` and a busy ``dormant`` takes one from each queue in turn
(tasks/app.py), so every timer message lets one other trigger go first. A batch is one
message for up to ``FIRE_BATCH_MAX`` claims: fewer messages, fewer turns.

**How a scan is split** (``batch_size``): ``ceil(claims / FIRE_BATCH_SPREAD)`` per
batch, at least 1 and at most ``FIRE_BATCH_MAX``. The last fire of a burst of ``n`` on
``p`` processes reading the timer queue lands after about ``(n / p) * fire + (batches
/ p) * (per-task cost + the other trigger taken in between)``: the first term is fixed,
the second shrinks with fewer batches down to one per process, and a batch run by one
process is not shared. For 100 claims on one 2-process worker two batches of 50 would
be best; the shipped deployment reads timers with three processes (the worker's two and
the timer worker's one, Procfile and compose.yaml), and a fourth process must not sit
idle on a burst either, hence a spread of 4: 100 claims are 5 batches of 20, taken by
two or three processes in two or three turns each, instead of 50 turns each. Small
scans spread completely (3 claims: three batches of one, fired in parallel as before).

**The cap** (``FIRE_BATCH_MAX`` = 20) bounds a batch's run: the trigger soft time limit
(``DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS``, 30 s) now covers a whole batch, and 20
fires of a few milliseconds each are far below it in normal operation. For the
abnormal case (row-lock waits, a slow database) a batch also watches its own clock:
once it has run for ``FIRE_BATCH_TIME_SHARE`` of the soft limit it starts no further
claim and re-publishes the rest as a new batch (their claims are still held; if one
expired meanwhile and was claimed again, its fire is a harmless skip). Should the soft
limit still strike mid-claim, that claim ends as a single fire would (kept as a failed
trigger when the exception reaches the shell) and the rest is left claimed: it expires
(``DORMANT_DEADLINE_CLAIM_SECONDS``, as long as the soft limit by default, so it has by
then) and the next scan claims it again. Nothing is lost either way: the rows are the
timers, a message only says which claims to fire.

**One claim, one transaction.** Each claim is applied by ``scheduler.fire`` in its own
locked transaction, in the batch's order (the scan's: due time first), exactly as
``dormant.fire_deadline`` applies it: the same call, trigger id, metrics (one
``dormant_triggers_applied`` count of kind ``timer`` and one lateness sample per fire,
one trace span per fire) and log line. A claim whose apply fails is settled by
``fire`` itself (the row kept and backed off); one whose exception reaches the shell is
kept as the failed trigger a single fire would have been — task
``dormant.fire_deadline``, routing key ``timer.fire``, the claim's own arguments and
trigger id — so an operator sees, retries or drops that claim alone; the other claims
of the batch go on.

**Database unavailable** (``OperationalError``, from a fire or from keeping a failure):
the batch task is retried with the claims not yet applied (Celery's ``retry`` with new
arguments), under the shell's backoff and retry count (tasks/triggers.py); once those
run out each remaining claim gets one more try and is kept as a failed trigger if it
fails again, as a single fire is. Re-sending only the rest is the cheaper choice, but
not the one correctness rests on: a redelivered batch (a worker died after some fires
committed) repeats claims already applied, and ``fire`` makes those harmless skips — the
applying transaction deleted the row or moved it to its next due time with the claim
token cleared, and the claim token is checked under the instance lock.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.exc import OperationalError

from dormant.persistence import clock
from dormant.persistence.results import TriggerResult
from dormant.persistence.start_timers import is_start_timer
from dormant.scheduler.deadlines import Claim, ClaimKind, claim_due, fire
from dormant.scheduler.deadlines import release as release_claims
from dormant.tasks import app as app_module
from dormant.tasks import wire
from dormant.tasks.app import TIMER_FIRE_KEY, app, publish, store
from dormant.tasks.metrics import observe_trigger, timer_fired
from dormant.tasks.outbox import consumed, publish_rows
from dormant.tasks.sweeps import SCAN_BATCH, each_row
from dormant.tasks.transient import RETRY_UNBOUNDED
from dormant.tasks.transient import backoff as transient_backoff
from dormant.tasks.triggers import (
    _run,
    describe_result,
    keep_as,
    outbox_rows_of,
    retry_backoff,
)

__all__ = [
    "FIRE_BATCH_MAX",
    "FIRE_BATCH_SPREAD",
    "FIRE_BATCH_TASK",
    "FIRE_BATCH_TIME_SHARE",
    "SINGLE_FIRE_TASK",
    "batch_size",
    "claim_kwargs",
    "fire_batches",
    "fire_call",
    "fire_deadline",
    "fire_deadlines",
    "fire_owner",
    "fire_trigger_id",
    "scan_deadlines",
]

log = logging.getLogger("dormant.triggers")

FIRE_BATCH_TASK = wire.FIRE_DEADLINES
SINGLE_FIRE_TASK = wire.FIRE_DEADLINE
# At most this many claims in one batch (the soft time limit bounds a batch).
FIRE_BATCH_MAX = 20
# A scan's claims are split into about this many batches (processes sharing a burst).
FIRE_BATCH_SPREAD = 4
# Past this share of the soft time limit a batch re-publishes its unstarted claims.
FIRE_BATCH_TIME_SHARE = 0.5
_CLAIM_FIELDS = ("instance_id", "wait_id", "claim_token", "due_at", "kind")


def batch_size(claims: int) -> int:
    """Claims per batch for a scan of ``claims`` (module docstring: why this size)."""
    return max(1, min(FIRE_BATCH_MAX, math.ceil(claims / FIRE_BATCH_SPREAD)))


def fire_batches(claims: Sequence[Claim]) -> list[list[Claim]]:
    """One scan's claims as consecutive batches, in the scan's (due) order."""
    size = batch_size(len(claims))
    return [list(claims[i : i + size]) for i in range(0, len(claims), size)]


def claim_kwargs(claim: Claim) -> dict[str, Any]:
    """A claim as a message carries it: the arguments of a single ``fire_deadline``."""
    return {
        "instance_id": claim.instance_id,
        "wait_id": claim.wait_id,
        "claim_token": claim.claim_token,
        "due_at": claim.due_at.isoformat(),
        "kind": claim.kind.value,
    }


class _NotKept(Exception):
    """A claim failed and even keeping it failed: the batch is retried from it."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _fields(claim: Any) -> dict[str, Any]:
    """The claim's arguments, refused (kept as a failed trigger) if malformed."""
    if not isinstance(claim, dict) or not {"instance_id", "wait_id", "claim_token"} <= set(claim):
        raise ValueError(f"a claim in {FIRE_BATCH_TASK} must name {', '.join(_CLAIM_FIELDS[:3])}")
    unknown = set(claim) - set(_CLAIM_FIELDS)
    if unknown:
        raise ValueError(f"a claim in {FIRE_BATCH_TASK} has unknown fields {sorted(unknown)}")
    return {"due_at": None, "kind": "deadline", **claim}


@observe_trigger  # one count, one lateness sample and one span per fire (tasks/metrics.py)
def _fire_one(task: Task, kind: str, call: Any, claim: Any, *, give_up: bool) -> None:
    """One claim of a batch through the shell of a single fire (module docstring)."""
    body = claim if isinstance(claim, dict) else {"claim": claim}
    tid = fire_trigger_id(*(str(body.get(f)) for f in _CLAIM_FIELDS[:3]))
    owner = fire_owner(body.get("instance_id"), body.get("kind", "deadline"))
    try:
        result = call(tid, clock.now())
    except OperationalError as exc:
        if not give_up:
            raise  # the batch retries from this claim
        log.error("trigger=%s gave up after %s database errors", kind, task.request.retries)
        _keep_claim(kind, body, exc, tid, owner)
        return
    except Exception as exc:
        _keep_claim(kind, body, exc, tid, owner)
        if isinstance(exc, SoftTimeLimitExceeded):
            raise  # the batch stops: its time is up
        return
    publish_rows(outbox_rows_of(result))
    log.info("trigger=%s %s", kind, describe_result(result))


def _keep_claim(kind: str, body: dict[str, Any], exc: Exception, tid: str, owner: Any) -> None:
    try:
        keep_as(SINGLE_FIRE_TASK, TIMER_FIRE_KEY, body, kind, exc, tid, owner)
    except Exception as keep_exc:
        log.error("trigger=%s failed and could not be kept (%s); retrying", kind, keep_exc)
        raise _NotKept(exc) from keep_exc


def _claim_call(claim: Any) -> Any:
    """The fire's ``call``; a malformed claim's raises when called, inside the shell."""
    try:
        f = _fields(claim)
    except ValueError as exc:
        refused = exc

        def refuse(tid: str, now: Any) -> Any:
            raise refused

        return refuse
    return fire_call(
        str(f["instance_id"]), str(f["wait_id"]), str(f["claim_token"]), f["due_at"], f["kind"]
    )


def _republish(rest: list[Any]) -> None:
    """Send the unstarted claims as a new batch; if that fails they stay claimed."""
    try:
        publish(FIRE_BATCH_TASK, TIMER_FIRE_KEY, {"claims": rest})
    except Exception:
        log.exception(
            "%s: %d claim(s) not re-published; they expire and are claimed again",
            FIRE_BATCH_TASK,
            len(rest),
        )


@app.task(name=FIRE_BATCH_TASK, bind=True)
def fire_deadlines(self: Task, claims: list[dict[str, Any]]) -> str:
    """Fire a scan's batch of claims, each in its own transaction (module docstring)."""
    began = time.monotonic()
    budget = app_module.settings.trigger_soft_time_limit_seconds * FIRE_BATCH_TIME_SHARE
    retries = int(self.request.retries or 0)
    give_up = retries >= app_module.settings.transient_retries
    items = list(claims) if isinstance(claims, list) else [claims]
    done = 0
    for i, claim in enumerate(items):
        if i and time.monotonic() - began > budget:
            log.warning(
                "%s: ran %.1f s, re-publishing %d claim(s)",
                FIRE_BATCH_TASK,
                time.monotonic() - began,
                len(items) - i,
            )
            _republish(items[i:])
            break
        try:
            _fire_one(self, "timer", _claim_call(claim), claim, give_up=give_up)
        except OperationalError as exc:
            log.info("trigger=timer database unavailable, retrying %d claim(s)", len(items) - i)
            raise self.retry(
                kwargs={"claims": items[i:]},
                exc=exc,
                countdown=transient_backoff(retries, app_module.settings),
                max_retries=RETRY_UNBOUNDED,
            ) from exc
        except _NotKept as exc:
            raise self.retry(
                kwargs={"claims": items[i:]},
                exc=exc.cause,
                countdown=retry_backoff(min(retries, 6)),
                max_retries=RETRY_UNBOUNDED,
            ) from exc
        except SoftTimeLimitExceeded:
            log.error(
                "%s: soft time limit reached; %d claim(s) left claimed for a later scan",
                FIRE_BATCH_TASK,
                len(items) - i - 1,
            )
            break
        done += 1
    consumed(self.request)
    return f"{done} of {len(items)} claim(s) done"


@app.task(name=wire.FIRE_DEADLINE, bind=True)
def fire_deadline(
    self: Task,
    instance_id: str,
    wait_id: str,
    claim_token: str,
    due_at: str | None = None,
    kind: str = "deadline",
    *,
    inbox_id: str | None = None,
) -> str | None:
    """Fire one claimed deadline. The row is deleted only by the transaction that
    applied it; a failed fire leaves it (with its due time pushed back) for a later scan.
    ``due_at`` (the claimed due time, ISO) measures the timer's lateness; ``kind`` is the
    claim's (``scheduler.ClaimKind``: an instance deadline or a timer start).

    The scan sends batches (``dormant.fire_deadlines``, tasks/timers.py); this one
    task still serves fires queued by earlier releases and a failed fire an operator
    sends again (``inbox_id``: the retry's inbox row, marked processed after)."""
    call = fire_call(instance_id, wait_id, claim_token, due_at, kind)
    tid = fire_trigger_id(instance_id, wait_id, claim_token)
    owner = fire_owner(instance_id, kind)
    return _run(self, "timer", call, inbox_id, tid, instance_id=owner)


def fire_call(
    instance_id: str, wait_id: str, claim_token: str, due_at: str | None, kind: str
) -> Callable[[str, datetime], TriggerResult | None]:
    """The shell's ``call`` for one claimed fire: one locked transaction (``fire``)."""

    def call(tid: str, now: datetime) -> Any:
        outcome = fire(store(), instance_id, wait_id, claim_token, now, ClaimKind(kind))
        timer_fired(due_at, now, outcome.status)
        return outcome

    return call


def fire_trigger_id(instance_id: str, wait_id: str, claim_token: str) -> str:
    """The trigger id of one claim's fire, the same in a batch and alone."""
    return f"deadline:{instance_id}:{wait_id}:{claim_token}"


def fire_owner(instance_id: Any, kind: Any) -> str | None:
    """The instance a failed fire is kept under: the claim's own, unless it is a timer
    start's (no instance yet: its ``instance_id`` is the process key)."""
    if kind == "start_timer" or not isinstance(instance_id, str) or is_start_timer(instance_id):
        return None
    return instance_id


@app.task(name=wire.SCAN_DEADLINES, bind=True, ignore_result=True)
def scan_deadlines(self: Task) -> int:
    """Claim due deadlines (row-locking, with their own expiry) and enqueue their fires.

    The claims go out in batches (``dormant.fire_deadlines``, sized and spread by
    tasks/timers.py) on ``timer.fire`` into ``dormant.timers``: instance timers, timer
    starts and scheduled incident retries are all rows claimed here, so this is the one
    publisher of timer work. A claim whose batch the broker refused is given back at
    once (``scheduler.deadlines.release``); one whose batch is lost after it was sent
    expires and is claimed again. Returns the claims sent.
    """
    try:
        claims = claim_due(store(), clock.now(), SCAN_BATCH)
    except OperationalError as exc:
        log.info("scan_deadlines: database unavailable (%s); next tick retries", type(exc).__name__)
        return 0

    sent: set[Claim] = set()

    def send(batch: list[Claim]) -> None:
        publish(
            FIRE_BATCH_TASK,
            TIMER_FIRE_KEY,  # the timers' own queue (tasks/app.py)
            {"claims": [claim_kwargs(claim) for claim in batch]},
        )
        sent.update(batch)

    # Each batch on its own (tasks/sweeps.py); nothing to park: a claim whose batch
    # was not sent is given back for the next tick (or, if that fails too, expires and
    # is claimed again), and a fire that fails is kept on its deadline row with its
    # error (scheduler/deadlines.py).
    each_row("scan_deadlines", fire_batches(claims), send)
    unsent = [claim for claim in claims if claim not in sent]
    if unsent:
        _give_back(unsent)
    if claims:
        log.info("scan_deadlines: %s due, %s sent", len(claims), len(claims) - len(unsent))
    return len(claims) - len(unsent)


def _give_back(unsent: list[Claim]) -> None:
    try:
        released = release_claims(store(), unsent)
    except Exception as exc:  # the database away too: the claims expire instead
        log.info("scan_deadlines: %s claims not given back (%s)", len(unsent), type(exc).__name__)
        return
    log.info("scan_deadlines: %s claims not sent, given back to the next tick", released)
