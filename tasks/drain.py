# mypy: disable-error-code="untyped-decorator,no-untyped-call"
"""Several triggers per task: a trigger task that finds more triggers queued behind it
takes some of them and applies them all in one transaction (issue 25).

Why: the floor of a trigger is one Celery task and one commit; under a backlog both are
paid again for every trigger. A batch pays one task and one commit for up to
``DORMANT_TRIGGER_BATCH_MAX`` triggers (docs/internals.md, "Several triggers per task";
bench/README.md has the figures).

How, in order:

1. The running trigger task (a start, a message or an ``apply_trigger``) reaches its
   apply (``applied``, called by the shell in tasks/triggers.py). With batching on,
   PostgreSQL and a real broker delivery, it polls the ``dormant`` queue without
   waiting for up to ``max - 1`` more messages, each held unacknowledged by this
   process's own broker channel. An idle queue answers at once with nothing: the batch
   is 1 and the trigger is applied exactly as on its own (latency first). A message
   that is not a batchable trigger is not taken, nor is one the broker flags as
   redelivered (its delivery is counted once, by a task of its own: the poison bound).
   On Redis one script takes them all (tasks/redis_transport.py ``take_queued``): it
   looks at the next 32 queued messages and takes the batchable triggers among them,
   and what it leaves (a job, a signal, a redelivery, a retry's ETA) keeps its place,
   so a queue where starts and jobs alternate batches too. On another broker kombu's
   ``basic_get`` takes the next one, and the first that does not belong ends the poll:
   a redelivered one is given back still flagged, any other is published again as it
   is (same task id, body and headers) and only then acknowledged: a fresh delivery,
   never a "redelivered" one.
2. Each taken trigger's task body runs up to its apply (``collect``): the shell hands
   over its call and trigger id, and nothing else of the body runs yet.
3. The calls run in ONE transaction (persistence/savepoints.py), sorted by the row they
   lock first (the instance id; a message's name and correlation key), so two workers
   batching the same instances take their locks in the same order. Each of the Store's
   transactions inside is a savepoint: a trigger that fails rolls back only its own.
4. After the commit, each taken trigger's task body runs again (``replay``), its apply
   answering with the outcome it had in the transaction: the shell then does what it
   does for a single trigger — publish the outbox rows, keep a failed trigger, retry a
   transient failure (a new message), log. Then the taken messages are acknowledged,
   on Redis in one round trip. The running task's own outcome goes back to its shell
   last; Celery acknowledges it when the task returns (acks late).

What a crash costs: before the commit nothing is applied and no taken message is
acknowledged, so the broker delivers each again. After the commit, a message not yet
acknowledged is delivered again and recognised as applied by its trigger id (the
processed-trigger row written in its savepoint): nothing lost, nothing applied twice. A
commit that fails gives every taken message back to the broker.

"Delivers each again" is at once on RabbitMQ (the dead process's connection drops). On
Redis an unacknowledged message comes back only after the visibility timeout (a
minute by default), so a batch whose process died — a poison trigger past its hard
time limit, the OOM killer — would hold innocent triggers that long. So, on Redis, a
pool process that takes messages lists their delivery tags (its entry
``<pid>:<thread>`` in the hash ``dormant:batch-taken:<host>``) and deletes the entry
once each is acknowledged or given back. One ended by the hard time limit gives back
what it holds on Celery's SIGTERM; for one killed outright, every new pool process of
the host (the one that replaces it among them) gives back the messages listed by a
pool process that no longer runs (``restore_orphans``). Given back flagged as
redelivered, each is then applied alone and its delivery counted once (the poison
bound), as any redelivery is.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery import Task, signals
from celery.exceptions import Retry
from kombu.connection import Connection
from kombu.messaging import Producer

from dormant.persistence import clock, savepoints
from dormant.persistence.results import TriggerResult
from dormant.tasks import app as app_module
from dormant.tasks import metrics, redis_transport, wire
from dormant.tasks.app import EXCHANGE, QUEUE, app, store
from dormant.tasks.lanes import QUARANTINE_KEY_PREFIX, OutOfLaneBudget

__all__ = ["BATCHABLE", "acknowledge", "applied", "collecting", "restore_orphans"]

log = logging.getLogger("dormant.triggers")

# The trigger tasks whose apply is one call into the Store or the router with no
# side effect before the commit: the kinds that queue up under load.
BATCHABLE = frozenset({wire.START, wire.MESSAGE, wire.APPLY_TRIGGER})

Call = Callable[[str, datetime], "TriggerResult | None"]


class _Collected(BaseException):
    """Ends a taken trigger's first pass once its shell handed over its call (a
    BaseException so that no ``except Exception`` on the way takes it for a failure)."""


@dataclass
class _Item:
    """One trigger of a batch: its task, the request its body runs under, its message
    (None for the task already running), and what its apply did."""

    task: Any  # the Celery task (None: a message that is no task of this worker)
    request: dict[str, Any]
    message: Any
    kind: str = "trigger"
    call: Call | None = None
    tid: str = ""
    ok: bool = False
    outcome: Any = None
    seconds: float = 0.0
    order: tuple[str, str] = field(default=("", ""))


class _Pass(threading.local):
    phase: str | None = None  # None, "collect", "batch", "replay"
    item: _Item | None = None


_pass = _Pass()


def collecting() -> bool:
    """Is a taken trigger's body running up to its apply? (A start's job is then never
    run before its instance is written: that would hold the batch's locks for it.)"""
    return _pass.phase == "collect"


def in_batch() -> bool:
    """Is a batch of triggers running on this thread (taking, applying or replaying)? A
    trigger's shell replayed inside it is not the task that took it."""
    return _pass.phase is not None


def applied(task: Task, kind: str, call: Call, tid: str, *, alone: bool = False) -> Any:
    """The shell's apply of one trigger (tasks/triggers.py ``_run``): the call itself,
    or, when triggers are queued behind this one, this trigger's part of a batch.
    ``alone``: this trigger must not share its transaction (a start about to run its
    job first)."""
    phase, item = _pass.phase, _pass.item
    if phase == "collect" and item is not None:
        item.kind, item.call, item.tid = kind, call, tid
        raise _Collected
    if phase == "replay" and item is not None:
        # Counted here, inside the trigger's span (its shell's own count saw no call).
        if item.ok:
            metrics.record_trigger(item.kind, item.outcome, item.seconds)
            return item.outcome
        metrics.record_refusal(item.kind, item.outcome)
        raise item.outcome
    if phase is None and not alone and _may_batch(task):
        return _batch(task, kind, call, tid)
    return call(tid, clock.now())


def _may_batch(task: Task) -> bool:
    request = task.request
    if request.is_eager or request.called_directly or task.name not in BATCHABLE:
        return False
    if app.conf.worker_send_task_events:
        return False  # Flower lists each trigger as the task it ran (tasks/app.py)
    routing_key = str((request.delivery_info or {}).get("routing_key") or "")
    if routing_key.startswith(QUARANTINE_KEY_PREFIX):
        return False  # the quarantine lane's triggers proved expensive: each alone
    return app_module.settings.trigger_batch_max > 1 and store().is_postgres


def _batch(task: Task, kind: str, call: Call, tid: str) -> Any:
    request = task.request
    first = _Item(
        task, {}, None, kind, call, tid, order=_order(task.name, request.args, request.kwargs)
    )
    held = _take()
    _remember(held)
    try:
        return _batch_taken(first, held, call, tid, request.hostname)
    except BaseException as exc:
        if not isinstance(exc, Exception | OutOfLaneBudget):
            # The process is being ended (a hard time limit's SIGTERM comes as
            # SystemExit just before its SIGKILL): what it still holds goes back now;
            # what a SIGKILL leaves listed, the next pool process gives back
            # (``restore_orphans``).
            for message in held:
                if not message.acknowledged:
                    _give_back(message)
        raise
    finally:
        _forget(held)  # each taken message acknowledged or given back


def _batch_taken(first: _Item, held: list[Any], call: Call, tid: str, hostname: Any) -> Any:
    taken = [_collect(message, hostname) for message in held]
    items = [first] + [item for item in taken if item.call is not None]
    if len(items) == 1:
        return call(tid, clock.now())
    now = clock.now()
    try:
        _pass.phase = "batch"
        with savepoints.one_transaction(store().engine) as conn:
            for item in sorted(items, key=lambda i: i.order):
                _apply(item, now)
                if conn.invalidated:
                    # The connection was lost at this trigger: nothing of the batch can
                    # commit, and the triggers after it would only meet the invalidated
                    # connection (SQLAlchemy's PendingRollbackError). The loss is the
                    # batch's error, and its shells retry it as one.
                    raise _lost(item)
    except Exception:
        for item in items[1:]:
            _give_back(item.message)
        raise  # the running trigger's shell retries it (or keeps it) as on its own
    finally:
        _pass.phase = None
    log.info("batch of %s triggers applied in one transaction", len(items))
    # The jobs the batch dispatched go out in one broker round trip after the replays
    # (tasks/app.py ``publishing_together``); the triggers are acknowledged after their
    # replays, as their rows are committed: a job not sent is sent by the sweep.
    with app_module.publishing_together():
        for item in items[1:]:
            _replay(item)
    acknowledge([item.message for item in items[1:]])
    if first.ok:
        return first.outcome
    raise first.outcome


def _lost(item: _Item) -> BaseException:
    """The error that invalidated the batch's connection: the outcome of the trigger
    whose statement met it."""
    if not item.ok and isinstance(item.outcome, BaseException):
        return item.outcome
    return ConnectionError("the batch's database connection was lost")


def _apply(item: _Item, now: datetime) -> None:
    assert item.call is not None
    began = time.perf_counter()
    try:
        item.outcome, item.ok = item.call(item.tid, now), True
    except (Exception, OutOfLaneBudget) as exc:  # rolled back to its savepoint; its shell decides
        item.outcome, item.ok = exc, False
    item.seconds = time.perf_counter() - began


def _collect(message: Any, hostname: str | None) -> _Item:
    """Run the taken message's task body up to its apply; a message that does not get
    there (undecodable, or an argument its body refuses) is published again, to fail
    as a task of its own."""
    try:
        name, args, kwargs, request = _decode(message, hostname)
        task = app.tasks[name]
    except Exception:
        log.debug("message not batched: not a task message this worker decodes")
        _publish_again(message)
        return _Item(None, {}, message)
    item = _Item(task, request, message, order=_order(name, args, kwargs))
    _pass.phase, _pass.item = "collect", item
    task.push_request(**request, **{metrics.BATCH_COLLECT: True})
    finished = False
    try:
        task.run(*args, **kwargs)
        finished = True  # its shell ended it before any apply (a poison trigger kept)
    except _Collected:
        pass
    except Retry:
        finished = True  # its retry is a message of its own now
    except Exception:
        log.debug("task %s[%s] not batched: its body refused it", name, request.get("id"))
    finally:
        task.pop_request()
        _pass.phase = _pass.item = None
    if finished:
        _ack(message, name, request)
    elif item.call is None:
        _publish_again(message)
    return item


def _replay(item: _Item) -> None:
    """The taken trigger's shell, after the commit, with the outcome its apply had
    (its message is acknowledged after every replay: ``acknowledge``)."""
    task, request = item.task, item.request
    args, kwargs, task_id = request["args"], request["kwargs"], request.get("id")
    _pass.phase, _pass.item = "replay", item
    task.push_request(**request)
    # Celery's own signals around it, as its tracer sends them for a task it runs: what
    # watches deliveries through them sees each trigger of a batch once.
    signals.task_prerun.send(sender=task, task_id=task_id, task=task, args=args, kwargs=kwargs)
    state = "SUCCESS"
    try:
        task.run(*args, **kwargs)
    except Retry:
        state = "RETRY"  # the retry is a message of its own now, as for a single task
    except Exception:
        # As Celery does for a task that raised with acks late: logged, acknowledged.
        state = "FAILURE"
        log.exception("task %s[%s] raised", task.name, task_id)
    finally:
        signals.task_postrun.send(
            sender=task, task_id=task_id, task=task, args=args, kwargs=kwargs, state=state
        )
        task.pop_request()
        _pass.phase = _pass.item = None


def _ack(message: Any, name: str, request: dict[str, Any]) -> None:
    try:
        message.ack()
    except Exception:  # delivered again, and recognised as applied by its trigger id
        log.exception("task %s[%s] not acknowledged", name, request.get("id"))


def acknowledge(messages: list[Any]) -> None:
    """Acknowledge taken messages whose work is committed: on Redis in one round trip
    (tasks/redis_transport.py ``ack_together``), else one by one. One that is not
    acknowledged is delivered again and recognised as done (its trigger id, or its
    job's stale result)."""
    try:
        messages = redis_transport.ack_together(messages)
    except Exception:
        log.warning("%s taken messages not acknowledged together", len(messages), exc_info=True)
    for message in messages:
        if message.acknowledged:
            continue
        try:
            message.ack()
        except Exception:
            headers = message.headers or {}
            log.exception("task %s[%s] not acknowledged", headers.get("task"), headers.get("id"))


def _order(name: str, args: Any, kwargs: Any) -> tuple[str, str]:
    """The key a batch locks in: the instance a start or apply_trigger names, else a
    message's name and correlation key (the instances it reaches follow from them)."""
    args, kwargs = list(args or ()), dict(kwargs or {})
    if name == wire.START:
        return ("i", str(kwargs.get("instance_id", args[1] if len(args) > 1 else "")))
    if name == wire.APPLY_TRIGGER:
        return ("i", str(kwargs.get("instance_id", args[0] if args else "")))
    key = kwargs.get("correlation_key", args[1] if len(args) > 1 else "")
    return ("m", f"{kwargs.get('name', args[0] if args else '')}\0{key}")


def _decode(message: Any, hostname: str | None) -> tuple[str, list[Any], dict[str, Any], Any]:
    """A Celery protocol 2 task message as the task name, its arguments and the
    request context its body runs under (what the worker's Request would give it)."""
    headers = dict(message.headers or {})
    args, kwargs, embed = message.decode()
    info = message.delivery_info or {}
    properties = message.properties or {}
    request = {
        **headers,
        **(embed or {}),
        "args": list(args),
        "kwargs": dict(kwargs),
        "delivery_info": {
            "exchange": info.get("exchange"),
            "routing_key": info.get("routing_key"),
            "priority": properties.get("priority"),
            "redelivered": bool(info.get("redelivered")),
        },
        "reply_to": properties.get("reply_to"),
        "correlation_id": properties.get("correlation_id"),
        "hostname": hostname,
        "is_eager": False,
        "called_directly": False,
        "headers": headers,
    }
    return str(headers["task"]), request["args"], request["kwargs"], request


# -- the broker side ---------------------------------------------------------------


class _Broker(threading.local):
    pid: int = 0
    url: str = ""
    connection: Any = None


_broker = _Broker()


def _channel() -> Any:
    """This process's (and thread's) own broker connection for the poll: a pool child
    forked from the worker must not share its parent's socket."""
    url = app_module.settings.broker_url
    if _broker.connection is None or (_broker.pid, _broker.url) != (os.getpid(), url):
        _broker.connection = app.connection_for_read()
        _broker.pid, _broker.url = os.getpid(), url
    return _broker.connection.default_channel


def _take() -> list[Any]:
    """Up to ``max - 1`` batchable messages queued now, each held unacknowledged; none
    at all when the queue is empty (no waiting) or the broker cannot be asked."""
    wanted = app_module.settings.trigger_batch_max - 1
    taken: list[Any] = []
    try:
        channel = _channel()
        if isinstance(channel, redis_transport.Channel):
            # One script for them all, which leaves what it does not take where it is:
            # a job, a signal, a redelivery, a retry's ETA keep their place.
            return redis_transport.take_queued(channel, QUEUE.name, BATCHABLE, wanted)
        queue = QUEUE.bind(channel)
        while len(taken) < wanted:
            message = queue.get(no_ack=False, accept=["json"])
            if message is None:
                break
            if (message.delivery_info or {}).get("redelivered"):
                # Its delivery is counted once, by a task of its own (the poison
                # bound, tasks/triggers.py): back to the broker, still flagged.
                _give_back(message)
                break
            if (message.headers or {}).get("task") not in BATCHABLE:
                _publish_again(message)
                break
            taken.append(message)
    except Exception:
        log.warning("the queue could not be polled for more triggers", exc_info=True)
        _reset()
        for message in taken:
            _give_back(message)
        return []
    return taken


# -- messages held by a pool process that died (module docstring) ---------------------

_TAKEN_PREFIX = "dormant:batch-taken:"


def _host_key() -> str:
    """One Redis hash per host: a pool process's entry is ``<pid>:<thread>`` (a thread
    pool runs batches side by side), its value the delivery tags it holds. One hash,
    not a key per process, so a new pool process reads its host's in one round trip,
    never by scanning a shared Redis's keys."""
    return f"{_TAKEN_PREFIX}{socket.gethostname()}"


def _entry() -> str:
    return f"{os.getpid()}:{threading.get_ident()}"


def _redis_of(channel: Any) -> Any:
    """The Redis client of a kombu Redis channel; None on any other transport (they
    give a dead connection's messages back at once)."""
    if not hasattr(getattr(channel, "qos", None), "restore_by_tag"):
        return None
    return getattr(channel, "client", None)


def _remember(taken: list[Any]) -> None:
    """List the delivery tags this process holds, before it applies any of them."""
    if not taken:
        return
    try:
        client = _redis_of(_channel())
        if client is not None:
            tags = json.dumps([m.delivery_tag for m in taken])
            client.hset(_host_key(), _entry(), tags)
    except Exception:  # Redis's visibility timeout gives them back, later
        log.warning("the taken triggers could not be listed", exc_info=True)


def _forget(taken: list[Any]) -> None:
    """Every taken message is acknowledged or given back: nothing to list."""
    if not taken:
        return
    try:
        client = _redis_of(_channel())
        if client is not None:
            client.hdel(_host_key(), _entry())
    except Exception:  # a stale entry: restoring an acknowledged tag does nothing
        log.debug("the taken triggers' entry not deleted", exc_info=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not ours to judge
    return True


def restore_orphans() -> int:
    """Give back to their queue the messages listed by a pool process of this host that
    no longer runs; returns how many. Called by every new pool process, so the one that
    replaces a dead process does it within its start-up. A restore of a tag already
    acknowledged (or restored by another new process) does nothing."""
    try:
        channel = _channel()
        client = _redis_of(channel)
        if client is None:
            return 0
        restored = 0
        for raw_entry, raw_tags in client.hgetall(_host_key()).items():
            entry = raw_entry.decode() if isinstance(raw_entry, bytes) else str(raw_entry)
            pid = entry.split(":", 1)[0]
            if not pid.isdigit() or _running(int(pid)):
                continue
            tags = json.loads(raw_tags or "[]")
            for tag in tags:
                channel.qos.restore_by_tag(tag, leftmost=True)
            client.hdel(_host_key(), raw_entry)
            restored += len(tags)
            log.warning(
                "gave back %s trigger(s) held by pool process %s, which ended mid-batch",
                len(tags),
                pid,
            )
        return restored
    except Exception:  # Redis's visibility timeout gives them back, later
        log.warning("triggers held by an ended pool process not given back", exc_info=True)
        return 0


@signals.worker_process_init.connect(weak=False)
def _restore_at_start(**_: Any) -> None:
    if app_module.settings.trigger_batch_max > 1:
        restore_orphans()


def _publish_again(message: Any) -> None:
    """Hand a message the batch does not apply back to the queue as it came (a fresh
    delivery: same body, headers and task id), then acknowledge the copy taken. A
    crash in between delivers it twice, which every task here tolerates. If the
    broker refuses the publish, the message is given back to it instead."""
    try:
        _publish_copy(message)
    except Exception:
        log.warning("a taken message could not be queued again; giving it back", exc_info=True)
        _give_back(message)
        return
    try:
        message.ack()
    except Exception:  # delivered again later: a duplicate, which it tolerates
        log.warning("a message queued again was not acknowledged", exc_info=True)


def _publish_copy(message: Any) -> None:
    info = message.delivery_info or {}
    properties = dict(message.properties or {})
    properties.pop("delivery_info", None)
    properties.pop("delivery_tag", None)
    properties.pop("body_encoding", None)
    name = (message.headers or {}).get("task", "")
    routing_key = wire.dotted_key(str(name), str(info.get("routing_key") or ""))
    Producer(message.channel).publish(
        message.body,
        exchange=EXCHANGE,
        routing_key=routing_key,
        headers=message.headers,
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        declare=[QUEUE],
        **{k: v for k, v in properties.items() if k in _PROPERTIES},
    )


_PROPERTIES = frozenset({"correlation_id", "reply_to", "priority", "delivery_mode"})


def _give_back(message: Any) -> None:
    """The batch did not commit: the broker delivers the message again."""
    try:
        message.reject(requeue=True)
    except Exception:  # the connection is gone: the broker gives it back itself
        log.warning("a taken trigger could not be given back; the broker will", exc_info=True)
        _reset()


def _reset() -> None:
    connection, _broker.connection = _broker.connection, None
    if isinstance(connection, Connection):
        try:
            connection.release()
        except Exception:
            log.debug("broker connection not released cleanly", exc_info=True)
