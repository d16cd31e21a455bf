# mypy: disable-error-code="misc,no-untyped-call"
"""kombu's Redis transport, with dormant's exchanges known to every channel at birth.

Why: when a worker connects, kombu restores the unacknowledged messages of dead
workers (older than the visibility timeout) on the connection's FIRST channel, before
the worker has declared any queue. A restore looks the message's exchange up in the
connection's own state; an exchange not declared there is taken for a ``direct`` one,
whose lookup of ``job.charge-card`` against the ``job.#`` binding finds no queue — and
the message is dropped (the Redis transport has no dead-letter queue), silently. So a
worker started after a crash could drop the crashed worker's triggers and jobs; jobs
then came back only by the job timeout. Declaring the exchanges when a channel is
created (a virtual declaration: no Redis command) makes that first restore find the
``dormant`` queue. tests/faults/test_recovery_window.py kills a worker after a job ran
and checks that the job runs again within the visibility timeout.

And a publish finds its queues again when Redis lost the bindings. A topic exchange's
bindings are a Redis set (``_kombu.binding.<exchange>``), written when a queue is
declared; kombu remembers per connection what it declared (``maybe_declare``) and never
writes them again. When the set is gone — Redis restarted without persistence, or the
database was emptied — a long-lived connection (a pooled producer, a worker's) publishes
into an exchange with no binding, and the Redis transport drops every such message,
silently, until the process reconnects. dormant's own triggers came back by the inbox
or outbox sweep, seconds later; a plain Celery producer's did not. So when a lookup on
one of dormant's exchanges finds no queue, the channel binds this app's declared queues
again (one SADD per binding) and looks once more: ``tests/integration/test_redis_restore.py``.

And a publish reads no bindings most of the time. kombu reads an exchange's bindings
(``SMEMBERS``: one Redis round trip) at every publish, to route a message it then
sends in a second one: a tenth of a worker's time on the job path. They change only
when a queue is declared, so a channel keeps what it read for ``BINDINGS_TTL_SECONDS``
and drops it when it binds a queue itself. A table found empty is never kept: that
is what sends the channel to bind its queues again, so a set Redis lost is written
again by the first publish after the table's second is up.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from time import monotonic, time
from typing import Any

from kombu.transport import redis, virtual

from dormant.tasks.app import EXCHANGE, app

__all__ = [
    "BINDINGS_TTL_SECONDS",
    "LOOK_AHEAD",
    "LOOK_AHEAD_BYTES",
    "Transport",
    "ack_together",
    "take_queued",
]

# How long a channel routes by the bindings it read, without reading them again.
BINDINGS_TTL_SECONDS = 1.0


class Channel(redis.Channel):
    # ``take_queued``'s script, registered on the channel's client at its first use.
    _take_queued: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # exchange -> (when read, its bindings); set before kombu's own __init__, which
        # may already publish (the restore of a dead worker's messages)
        self._tables: dict[str, tuple[float, list[Any]]] = {}
        super().__init__(*args, **kwargs)

        exchanges = {str(EXCHANGE.name): EXCHANGE}
        for queue in app.amqp.queues.values():
            for ex in [queue.exchange, *(b.exchange for b in queue.bindings)]:
                if ex is not None and ex.name:
                    exchanges.setdefault(ex.name, ex)
        for ex in exchanges.values():
            self.exchange_declare(
                exchange=ex.name, type=ex.type, durable=ex.durable, auto_delete=ex.auto_delete
            )

    def _lookup(self, exchange: str, routing_key: str, default: Any = None) -> Any:
        found = super()._lookup(exchange, routing_key, default)
        if found or not exchange:
            return found

        bound = False
        for queue in app.amqp.queues.values():
            for b in queue.bindings or ():
                if b.exchange is not None and b.exchange.name == exchange:
                    self._rebind(exchange, b.routing_key, queue.name)
                    bound = True
            if not queue.bindings and queue.exchange is not None:
                if queue.exchange.name == exchange:
                    self._rebind(exchange, queue.routing_key, queue.name)
                    bound = True
        return super()._lookup(exchange, routing_key, default) if bound else found

    def get_table(self, exchange: str) -> Any:
        """The exchange's bindings, as read at most ``BINDINGS_TTL_SECONDS`` ago; an
        empty table is read afresh every time (see the module docstring)."""
        now = monotonic()
        kept = self._tables.get(exchange)
        if kept is not None and now - kept[0] < BINDINGS_TTL_SECONDS:
            return kept[1]
        table = super().get_table(exchange)
        if table:
            self._tables[exchange] = (now, table)
        else:
            self._tables.pop(exchange, None)
        return table

    def _queue_bind(self, exchange: str, *args: Any) -> None:
        self._tables.pop(exchange, None)
        super()._queue_bind(exchange, *args)

    def _rebind(self, exchange: str, routing_key: str, queue: str) -> None:
        """Write one binding to Redis again (``queue_bind`` would skip it: this
        connection's own state still has it)."""
        self._queue_bind(
            exchange, *self.typeof(exchange).prepare_bind(queue, exchange, routing_key, None)
        )


class Transport(redis.Transport):
    Channel = Channel


# How deep a take looks into a queue, and the largest message it decodes there (Redis
# runs a script alone: a take must cost it little whatever is queued).
LOOK_AHEAD = 32
LOOK_AHEAD_BYTES = 16 * 1024

# Up to ``most`` messages of a queue taken at once, each only if it is a task of
# ``names`` that carries no ETA, expiry or time limit of its own and was never
# delivered before, and recorded as unacknowledged exactly as kombu's ``QoS.append``
# records a delivery (the message, exchange and routing key in ``unacked``, the tag in
# ``unacked_index``): all in one script, so no crash can lose a message between the pop
# and the record. The script looks at the LOOK_AHEAD messages kombu would deliver next
# (the tail of the first non-empty list, in the channel's priority order), oldest
# first; a message it does not take keeps its place.
# KEYS: the queue's lists in priority order, then unacked_index and unacked.
# ARGV: now (seconds), most, look-ahead, largest size, then the task names.
_TAKE_QUEUED = """
local lists = #KEYS - 2
local index, unacked = KEYS[lists + 1], KEYS[lists + 2]
local now, most = ARGV[1], tonumber(ARGV[2])
local depth, largest = tonumber(ARGV[3]), tonumber(ARGV[4])
local function given(v) return v ~= nil and v ~= cjson.null end
local function named(raw)
  for j = 5, #ARGV do
    if string.find(raw, '"' .. ARGV[j] .. '"', 1, true) then return true end
  end
  return false
end
local function takeable(m)
  if type(m) ~= 'table' then return nil end
  local h, p = m['headers'], m['properties']
  if type(h) ~= 'table' or type(p) ~= 'table' then return nil end
  local known = false
  for j = 5, #ARGV do
    if h['task'] == ARGV[j] then known = true end
  end
  if not known or given(h['eta']) or given(h['expires']) then return nil end
  if h['redelivered'] == true then return nil end
  local limits = h['timelimit']
  if type(limits) == 'table' and (given(limits[1]) or given(limits[2])) then return nil end
  local info, tag = p['delivery_info'], p['delivery_tag']
  if type(info) ~= 'table' or type(tag) ~= 'string' then return nil end
  if info['redelivered'] == true then return nil end
  return info, tag
end
for i = 1, lists do
  local queued = redis.call('LRANGE', KEYS[i], -depth, -1)
  if #queued > 0 then
    local taken = {}
    for k = #queued, 1, -1 do
      if #taken >= most then break end
      local raw = queued[k]
      if #raw <= largest and named(raw) then
        local ok, m = pcall(cjson.decode, raw)
        local info, tag
        if ok then info, tag = takeable(m) end
        if info then
          redis.call('LREM', KEYS[i], -1, raw)
          redis.call('ZADD', index, now, tag)
          redis.call('HSET', unacked, tag,
            '[' .. raw .. ',' .. cjson.encode(info['exchange']) .. ',' ..
            cjson.encode(info['routing_key']) .. ']')
          taken[#taken + 1] = raw
        end
      end
    end
    return taken
  end
end
return {}
"""


def take_queued(channel: Any, queue: str, names: Collection[str], most: int = 1) -> list[Any]:
    """Up to ``most`` of the queue's next messages, as kombu delivers them
    (unacknowledged, on ``channel``), each a plain first delivery of a task in
    ``names`` (see ``_TAKE_QUEUED``); oldest first, none if there are none. Only on a
    channel of this transport (the batches of tasks/drain.py and tasks/job_batches.py
    take so; on any other transport this takes nothing)."""
    if not isinstance(channel, Channel) or not names or most < 1:
        return []
    script = channel._take_queued
    if script is None:
        script = channel._take_queued = channel.client.register_script(_TAKE_QUEUED)
    qos = channel.qos
    keys = [channel._q_for_pri(queue, pri) for pri in channel.priority_steps]
    args = [time(), most, LOOK_AHEAD, LOOK_AHEAD_BYTES, *names]
    taken = []
    for raw in script(keys=[*keys, qos.unacked_index_key, qos.unacked_key], args=args):
        message = channel.Message(json.loads(raw), channel=channel)
        # kombu's own bookkeeping of a delivery (what ``QoS.append`` does after Redis's).
        virtual.QoS.append(qos, message, message.delivery_tag)
        taken.append(message)
    return taken


def ack_together(messages: list[Any]) -> list[Any]:
    """Acknowledge the messages delivered on a channel of this transport in one Redis
    round trip (kombu's ``QoS.ack`` is one each: the same two removals, then its own
    bookkeeping); returns the others, left for the caller to acknowledge one by one."""
    ours = [m for m in messages if isinstance(m.channel, Channel) and not m.acknowledged]
    if not ours:
        return list(messages)
    channel = ours[0].channel
    ours = [m for m in ours if m.channel is channel]
    qos = channel.qos
    with qos.pipe_or_acquire() as pipe:
        for message in ours:
            qos._remove_from_indices(message.delivery_tag, pipe)
        pipe.execute()
    for message in ours:
        virtual.QoS.ack(qos, message.delivery_tag)
        message._state = "ACK"
    return [m for m in messages if m not in ours]
