#!/usr/bin/env python
"""Hostile load (issue 24): canaries complete while hostile triggers are in flight, and
a 10,000-trigger backlog is delivered about once per trigger and applied exactly once.

    .venv/bin/python bench/bench_hostile.py [--quick] [--per-kind] [--seconds S]
        [--rate R] [--backlog N] [--hostile K] [--poisons P]

One scratch PostgreSQL database and a scratch Redis db (bench/common.py), the real
``dormant worker -c 2`` and ``dormant beat`` (the CLI), every trigger sent through the
public Client. The workers also load tests/faults/delivery_log.py, which writes one
line per delivery of a task carrying an inbox id: deliveries are counted at the worker,
re-sends by beat's sweep and broker redeliveries alike.

1. Baseline: one-script canaries (start -> script -> end) started by ``Client.start``
   at ``--rate`` per second for ``--seconds``, an open loop (bench_latency.paced); a
   canary's latency is its instance row's last write minus the moment its call began.
   With ``--per-kind``, one more window per hostile kind alone, the poison included
   (printed, not judged): which kind costs the canaries what.
2. Hostile: the same canaries while, spread over the same window, the worker also gets
   - slow-FEEL starts: a chain of script tasks whose FEEL work outlasts the bench
     worker's short time limits (soft 2 s, hard 4 s; docs/limits.md, "Time limits");
   - regex bombs: one RE2 search whose work (input bytes x program size) is past what
     FEEL's regex built-ins may spend, refused before RE2 runs: one
     ``ExpressionLimitExceeded`` incident each (docs/limits.md, "Bounded FEEL");
   - a poison start (``--poisons``): a start that never finishes, so only the hard
     limit ends it, with its pool process. No model can make one any more (every
     evaluation is charged and the soft limit interrupts what is left), so the poison
     is injected: the workers also load tests/faults/fault_jobs.py, whose
     ``DORMANT_TEST_POISON`` hook makes a start with ``"poison": "hang"`` sleep through
     the soft limit, as work in C that never sees it would. Put back on its queue after
     each kill and counted, it is kept as a ``PoisonTrigger`` failed trigger past
     ``DORMANT_MAX_DELIVERIES`` (set to 3 here, its default; docs/limits.md, "What an
     operator sees: poison triggers"), which ``follow_poison`` waits for;
   - fork bombs: a parallel fork in a loop, stopped by DORMANT_MAX_TOKENS (set to 2,000
     here, "What one instance holds"): one incident, the other tokens parked;
   - oversized mappings: two 600 KB variables mapped into one task's inputs, over
     DORMANT_MAX_VARIABLES_BYTES as a whole ("Variables and trigger fields");
   - a dead outbox row: a row the relay cannot send (its payload is not an object, as
     in tests/faults/test_sweep_isolation.py), old enough for beat's sweep at once.
   Printed: the canaries' p50/p99 beside the baseline's (target: hostile p99 <= 2x the
   baseline's), what became of each hostile trigger, and the poison's deliveries, time
   and error once it is kept (target: kept as a ``PoisonTrigger`` within 120 s).
3. Backlog: ``--backlog`` one-script starts (10,000; quick 2,000) sent by
   ``Client.start_many`` while no worker runs (beat runs, and queues its sweeps), then
   two workers start. It runs on a second Redis db, so nothing of the hostile windows
   is left on its broker. Targets: deliveries per
   trigger <= 1.05 (delivery log); lost = 0 and duplicates applied = 0, read from the
   database (every start made exactly one instance, completed, at the revision and
   with the facts of a single application).

Every wait is bounded; whatever does not finish in its bound is printed and judged NOT
MET, and the run goes on. Exit 0 whenever it ran to the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, harness
from bench.bench_latency import paced, percentile
from tests.integration.waitkit import end, model, script, start, xor

P99_RATIO_TARGET = 2.0
DELIVERIES_TARGET = 1.05
SOFT_LIMIT_S = 2
HARD_LIMIT_S = 4
# The main lane's own hard limit (DORMANT_LANE_TIME_LIMIT_SECONDS; its soft one is 0.8 of
# it) and its compute budget (DORMANT_LANE_BUDGET_SECONDS, the default): short like the
# limits above, so that a poison's first delivery holds a main-lane pool process 1 s.
LANE_LIMIT_S = 1
LANE_BUDGET_S = 0.5
MAX_TOKENS = 2000
SWEEP_AFTER_S = 3

CANARY = model(
    "hostile_canary",
    start() + script("s", "=n + 1", "m") + end(),
    [("start", "s"), ("s", "end")],
)
BACKLOG = model(
    "hostile_backlog",
    start() + script("s", "=n + 1", "m") + end(),
    [("start", "s"), ("s", "end")],
)
# Each link spends most of FEEL's per-evaluation step budget; the chain runs in one
# trigger (well under DORMANT_STEP_BUDGET node entries), longer than the hard limit,
# and is stopped by the soft limit inside the evaluation.
SLOW_LINKS = 20
SLOW = model(
    "hostile_slow",
    start()
    + "".join(
        script(f"p{k}", "=count(for i in 1..90000 return i * 2)", f"v{k}")
        for k in range(SLOW_LINKS)
    )
    + end(),
    [
        ("start", "p0"),
        *((f"p{k}", f"p{k + 1}") for k in range(SLOW_LINKS - 1)),
        (f"p{SLOW_LINKS - 1}", "end"),
    ],
)
# One RE2 search that finds no match: linear in the input, but times the size of the
# pattern's program, all of it one call into C where the soft limit cannot reach. Over
# 80 KB it ran for seconds to minutes; FEEL's regex built-ins now charge that work in
# steps before the call, so it is refused at once (one incident).
REGEX = model(
    "hostile_regex",
    start() + script("re", '=matches(s, "(a?){900}a{900}")', "hit") + end(),
    [("start", "re"), ("re", "end")],
)
REGEX_INPUT = ("a" * 800 + "b") * 100
# The poison's own model is harmless: the start hangs in the worker's Store.start
# (tests/faults/fault_jobs.py, DORMANT_TEST_POISON) before it is stepped.
POISON = model(
    "hostile_poison",
    start() + script("s", "=n + 1", "m") + end(),
    [("start", "s"), ("s", "end")],
)

FORK_BOMB = model(
    "hostile_bomb",
    start()
    + xor("merge")
    + '<bpmn:parallelGateway id="fork"/>'
    + '<bpmn:task id="a"/><bpmn:task id="b"/>',
    [
        ("start", "merge"),
        ("merge", "fork"),
        ("fork", "a"),
        ("fork", "b"),
        ("a", "merge"),
        ("b", "merge"),
    ],
)
OVERSIZED = model(
    "hostile_oversized",
    start()
    + script("a", "=string join(for i in 1..600 return blob)", "a")
    + script("b", "=string join(for i in 1..600 return blob)", "b")
    + '<bpmn:task id="use"><bpmn:extensionElements><zeebe:ioMapping>'
    '<zeebe:input source="=a" target="p1"/><zeebe:input source="=b" target="p2"/>'
    "</zeebe:ioMapping></bpmn:extensionElements></bpmn:task>" + end(),
    [("start", "a"), ("a", "b"), ("b", "use"), ("use", "end")],
)


# The hostile starts: process key and start variables per kind.
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "slow FEEL": ("hostile_slow", {}),
    "regex bomb": ("hostile_regex", {"s": REGEX_INPUT}),
    "bomb": ("hostile_bomb", {}),
    "oversized": ("hostile_oversized", {"blob": "z" * 1_000}),
    "poison": ("hostile_poison", {"n": 0, "poison": "hang"}),
}
# Sent ``--poisons`` times (1), not ``--hostile`` times: each costs a pool process
# MAX_DELIVERIES hard limits.
POISON_KIND = "poison"
MAX_DELIVERIES = 3
# How long follow_poison waits for the PoisonTrigger: every delivery's hard limit, a
# pool process's restart after each kill, and room for a loaded machine.
POISON_WAIT_S = 120
MOVED = "moved to the quarantine lane"


def worker_env(broker_url: str, database_url: str, log: Path, poison: Path) -> dict[str, str]:
    return harness.env_with(
        DORMANT_BROKER_URL=broker_url,
        DORMANT_DATABASE_URL=database_url,
        DORMANT_JOB_TYPES=harness.EAGER_JOB_TYPES,
        DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS=str(SOFT_LIMIT_S),
        DORMANT_TRIGGER_TIME_LIMIT_SECONDS=str(HARD_LIMIT_S),
        DORMANT_MAX_TOKENS=str(MAX_TOKENS),
        DORMANT_OUTBOX_SWEEP_AFTER_SECONDS=str(SWEEP_AFTER_S),
        DORMANT_MAX_DELIVERIES=str(MAX_DELIVERIES),
        DORMANT_LANE_TIME_LIMIT_SECONDS=str(LANE_LIMIT_S),
        DORMANT_LANE_BUDGET_SECONDS=str(LANE_BUDGET_S),
        DORMANT_TEST_DELIVERY_LOG=str(log),
        DORMANT_TEST_POISON=str(poison),
    )


def worker(
    env: dict[str, str], logdir: Path, name: str, lane: str = "all", concurrency: int = 2
) -> harness.Worker:
    return harness.Worker(
        name,
        [
            harness.PY,
            "-m",
            "dormant.tasks.cli",
            "worker",
            "--include",
            "bench.jobs,tests.faults.delivery_log,tests.faults.fault_jobs",
            "--concurrency",
            str(concurrency),
            "--lane",
            lane,
            "--loglevel",
            "INFO",
        ],
        env,
        logdir,
    )


def served(args: argparse.Namespace, env: dict[str, str], logdir: Path) -> list[harness.Worker]:
    """The workers the canaries and the hostile triggers share: ``dormant worker -c 2``
    alone, or (``--lanes``, the default) as the main lane beside a one-process
    quarantine lane (docs/operations.md, "Two lanes")."""
    if not args.lanes:
        return [worker(env, logdir, "worker-1")]
    return [
        worker(env, logdir, "worker-1", lane="main"),
        worker(env, logdir, "quarantine-1", lane="quarantine", concurrency=1),
    ]


def logs_text(logs: list[Path]) -> str:
    return "\n".join(log.read_text(errors="replace") for log in logs)


def beat(env: dict[str, str], logdir: Path, name: str) -> harness.Worker:
    return harness.Worker(
        name,
        [harness.PY, "-m", "dormant.tasks.cli", "beat", "--loglevel", "INFO"],
        env,
        logdir,
    )


def wait_until(done: Callable[[], bool], timeout: float, what: str) -> bool:
    """Poll ``done`` up to ``timeout`` seconds; False (and a printed line) if it never held."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            common.line(what, f"NOT done within {timeout:.0f} s (bounded wait; the run goes on)")
            return False
        time.sleep(0.2)
    return True


def scalar(engine: Any, sql: str, **params: Any) -> Any:
    from sqlalchemy import text

    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def rows(engine: Any, sql: str, **params: Any) -> list[Any]:
    from sqlalchemy import text

    with engine.connect() as conn:
        return list(conn.execute(text(sql), params).all())


def completed(engine: Any, ids: list[str]) -> dict[str, float]:
    """Each completed instance among ``ids`` with its row's last write (epoch seconds)."""
    found = rows(
        engine,
        "SELECT id, updated_at FROM instances WHERE id = ANY(:ids) AND status = 'completed'",
        ids=ids,
    )
    return {r.id: r.updated_at.timestamp() for r in found}


def canaries(engine: Any, client: Any, rate: float, seconds: float, tag: str) -> list[float]:
    """Start canaries on a fixed schedule; their latencies in ms, sorted (inf for any
    not completed within the bounded wait)."""
    sent = paced(rate, seconds, lambda i: client.start("hostile_canary", {"n": i}))
    ids = list(sent)
    wait_until(
        lambda: len(completed(engine, ids)) == len(ids),
        120 + seconds * 4,
        f"{tag}: every canary completed",
    )
    done = completed(engine, ids)
    timed = {at: (done[i] - at) * 1000.0 if i in done else float("inf") for i, at in sent.items()}
    LAST_WINDOW.clear()
    LAST_WINDOW.update(timed)
    return sorted(timed.values())


# The last window's canaries: the wall time each was sent -> its latency in ms.
LAST_WINDOW: dict[float, float] = {}


def slowest_beside(sent_at: dict[str, float], kind_of: dict[str, str], n: int = 3) -> None:
    """The ``n`` slowest canaries of the last window, each with the hostile starts sent
    in the 5 s before it (kind, seconds before): what each stall sat beside."""
    for at, ms in sorted(LAST_WINDOW.items(), key=lambda kv: -kv[1])[:n]:
        near = sorted(
            (at - t, kind_of[i]) for i, t in sent_at.items() if 0 <= at - t <= 5 and i in kind_of
        )
        beside = ", ".join(f"{kind} {ago:.1f} s before" for ago, kind in near) or "nothing"
        common.line(f"  a slow canary ({ms:.0f} ms)", f"sent beside: {beside}")


def latency_line(label: str, values: list[float]) -> tuple[float, float]:
    p50, p99 = percentile(values, 0.50), percentile(values, 0.99)
    late = sum(1 for v in values if v == float("inf"))
    common.line(
        label,
        f"p50 {p50:8.1f} ms  p99 {p99:8.1f} ms  max {values[-1]:8.1f} ms  "
        f"({len(values) - late} of {len(values)} completed)",
    )
    return p50, p99


class Hostile(threading.Thread):
    """Sends the hostile triggers, spread evenly over the canaries' window, through a
    Client of its own; remembers the instance ids it started per kind."""

    def __init__(self, client: Any, seconds: float, plan: list[str]) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.seconds = seconds
        self.plan = plan
        self.started: dict[str, list[str]] = {kind: [] for kind in plan}
        self.sent_at: dict[str, float] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            began = time.perf_counter()
            for i, kind in enumerate(self.plan):
                pause = began + i * self.seconds / len(self.plan) - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                key, variables = KINDS[kind]
                at = time.time()
                instance_id = self.client.start(key, variables)
                self.started[kind].append(instance_id)
                self.sent_at[instance_id] = at
        except BaseException as exc:  # printed by the main thread: the run goes on
            self.error = exc


def dead_outbox_row(engine: Any) -> int:
    """A row the relay cannot send (tests/faults/test_sweep_isolation.py), written
    older than the sweep's age threshold so the first sweep meets it."""
    from sqlalchemy import insert

    from dormant.persistence import clock
    from dormant.persistence.tables import outbox

    with engine.begin() as conn:
        return int(
            conn.execute(
                insert(outbox)
                .values(
                    kind="ThrowSignal",
                    payload=["not", "an", "object"],
                    created_at=clock.now() - timedelta(seconds=SWEEP_AFTER_S * 5),
                )
                .returning(outbox.c.id)
            ).scalar_one()
        )


def outcomes(engine: Any, ids: list[str], deliveries: dict[str, int]) -> str:
    """What became of hostile instances: statuses, incident causes, failed triggers."""
    if not ids:
        return "none sent"
    status = rows(
        engine,
        "SELECT status, count(*) AS n FROM instances WHERE id = ANY(:ids) GROUP BY status",
        ids=ids,
    )
    causes = rows(
        engine,
        "SELECT cause_class, count(*) AS n FROM incidents WHERE instance_id = ANY(:ids) "
        "GROUP BY cause_class",
        ids=ids,
    )
    failed = rows(
        engine,
        "SELECT error_class, count(*) AS n, max(attempts) AS attempts FROM failed_triggers "
        "WHERE instance_id = ANY(:ids) GROUP BY error_class",
        ids=ids,
    )
    inbox_ids = [
        r.id
        for r in rows(
            engine,
            "SELECT id FROM inbox WHERE payload->'kwargs'->>'instance_id' = ANY(:ids)",
            ids=ids,
        )
    ]
    delivered = [deliveries.get(i, 0) for i in inbox_ids]
    parts = [
        f"{len(ids)} sent",
        "instances " + (", ".join(f"{r.status} {r.n}" for r in status) or "none"),
        "incidents " + (", ".join(f"{r.cause_class} {r.n}" for r in causes) or "none"),
        "failed triggers "
        + (", ".join(f"{r.error_class} {r.n} (attempts {r.attempts})" for r in failed) or "none"),
        f"deliveries per start {delivered}" if delivered else "no inbox rows found",
    ]
    return "; ".join(parts)


def judge_backlog(engine: Any, backlog_ids: list[str], seen: dict[str, int]) -> None:
    """The backlog's verdicts: deliveries per trigger (``seen``: the delivery log),
    lost and duplicates applied (the database)."""
    inbox_ids = [
        r.id
        for r in rows(
            engine,
            "SELECT id FROM inbox WHERE payload->'kwargs'->>'key' = 'hostile_backlog'",
        )
    ]
    counts = [seen.get(i, 0) for i in inbox_ids]
    total = sum(counts)
    common.line(
        "backlog deliveries",
        f"{total} for {len(inbox_ids)} inbox rows; max per row {max(counts, default=0)}; "
        f"never delivered {sum(1 for c in counts if c == 0)}",
    )
    common.ratio_line(
        "deliveries per trigger",
        total / max(1, len(inbox_ids)),
        "<=",
        DELIVERIES_TARGET,
        "{:.3f}",
    )
    made = rows(
        engine,
        "SELECT status, revision, count(*) AS n FROM instances "
        "WHERE key = 'hostile_backlog' GROUP BY status, revision ORDER BY n DESC",
    )
    common.line(
        "backlog instances (status, revision: count)",
        ", ".join(f"{r.status} r{r.revision}: {r.n}" for r in made),
    )
    applied = {
        r.id
        for r in rows(
            engine,
            "SELECT id FROM instances WHERE id = ANY(:ids) AND status = 'completed'",
            ids=backlog_ids,
        )
    }
    lost = sum(1 for i in backlog_ids if i not in applied)
    # Every backlog start is the same model with the same kind of input: applied
    # once, each instance has the same revision and the same number of facts as
    # the others. A start applied twice shows as more of either.
    twice = scalar(
        engine,
        "WITH per AS (SELECT i.id, i.revision, count(f.id) AS facts FROM instances i "
        "LEFT JOIN facts f ON f.instance_id = i.id WHERE i.key = 'hostile_backlog' "
        "GROUP BY i.id, i.revision), "
        "usual AS (SELECT mode() WITHIN GROUP (ORDER BY revision) AS r, "
        "mode() WITHIN GROUP (ORDER BY facts) AS f FROM per) "
        "SELECT count(*) FROM per, usual WHERE per.revision > usual.r "
        "OR per.facts > usual.f",
    )
    usual = rows(
        engine,
        "SELECT i.revision, count(f.id) AS facts FROM instances i LEFT JOIN facts f "
        "ON f.instance_id = i.id WHERE i.key = 'hostile_backlog' "
        "GROUP BY i.id, i.revision LIMIT 1",
    )
    if usual:
        common.line(
            "one application",
            f"revision {usual[0].revision}, {usual[0].facts} facts per instance",
        )
    common.ratio_line("lost", float(lost), "<=", 0.0, "{:.0f}")
    # A start applied twice under another id would be an instance no Client call made.
    extra = scalar(
        engine,
        "SELECT count(*) FROM instances WHERE key = 'hostile_backlog' AND NOT id = ANY(:ids)",
        ids=backlog_ids,
    )
    common.ratio_line("duplicates applied", float(twice + extra), "<=", 0.0, "{:.0f}")


def task_times(log: Path) -> str:
    """Per engine task name in a worker's log: how many ran and the slowest, in s (the
    worker logs each task's run time at INFO)."""
    import re

    spent: dict[str, list[float]] = {}
    pattern = re.compile(r"Task (dormant\.[\w.]+)\[[^\]]+\] succeeded in ([0-9.]+)s")
    for m in pattern.finditer(log.read_text(errors="replace")):
        spent.setdefault(m.group(1), []).append(float(m.group(2)))
    return "; ".join(
        f"{name} {len(times)}, slowest {max(times):.2f} s"
        for name, times in sorted(spent.items(), key=lambda kv: -max(kv[1]))
    )


def report_hostile(
    engine: Any, started: dict[str, list[str]], dead: int, seen: dict[str, int], logs: list[Path]
) -> None:
    """What the hostile triggers came to. Bounded waits: a poison still being delivered
    again is printed as it stands."""
    wait_until(
        lambda: (
            scalar(
                engine,
                "SELECT count(*) FROM outbox WHERE id = :id AND parked_at IS NOT NULL",
                id=dead,
            )
            == 1
        ),
        30,
        "dead outbox row parked",
    )
    bombs = started.get("bomb", [])
    wait_until(
        lambda: (
            scalar(
                engine,
                "SELECT count(*) FROM instances WHERE id = ANY(:ids) "
                "AND status = 'active_incidents'",
                ids=bombs,
            )
            == len(bombs)
        ),
        60,
        "fork bombs stopped",
    )
    # The step that stops a bomb leaves tokens for follow-up steps, each adding its
    # incidents: settled when the count holds still for a few seconds.
    counts: list[int] = []

    def settled() -> bool:
        counts.append(
            scalar(
                engine, "SELECT count(*) FROM incidents WHERE instance_id = ANY(:ids)", ids=bombs
            )
        )
        return len(counts) > 15 and counts[-1] == counts[-16]

    wait_until(settled, 90, "fork bombs' incidents settled")
    for kind, ids in started.items():
        common.line(f"  {kind}", outcomes(engine, ids, seen))
    if bombs:
        tokens = scalar(
            engine,
            "SELECT max(jsonb_array_length(jsonb_path_query_array(checkpoint::jsonb, "
            "'$.tokens.keyvalue()'))) FROM instances WHERE id = ANY(:ids)",
            ids=bombs,
        )
        common.line("  fork bombs' most live tokens", f"{tokens} (bound {MAX_TOKENS})")
    parked = rows(engine, "SELECT parked_at, parked_error FROM outbox WHERE id = :id", id=dead)[0]
    common.line(
        "  dead outbox row",
        f"parked {'yes' if parked.parked_at else 'NO'}"
        + (f": {parked.parked_error[:100]}" if parked.parked_error else ""),
    )
    text = logs_text(logs)
    common.line(
        "  worker logs",
        f"hard time limit kills {text.count('Hard time limit')}, "
        f"pool processes lost {text.count('WorkerLostError')}, "
        f"moved to the quarantine lane {text.count(MOVED)}",
    )
    common.line("  tasks run so far", task_times(logs[0]))


def follow_poison(
    engine: Any, sent_at: dict[str, float], delivery_log: Path, logs: list[Path], tag: str
) -> None:
    """Wait (bounded) until every poison start is kept as a ``PoisonTrigger`` failed
    trigger, then print its deliveries (the workers' delivery log, the refused one
    included, and the count on its inbox row), how long after its send it was kept, and
    its error. NOT MET if one never is: it would be delivered again for ever."""
    from tests.faults.delivery_log import deliveries

    ids = list(sent_at)

    def kept() -> list[Any]:
        return rows(
            engine,
            "SELECT instance_id, error_class, error, last_at FROM failed_triggers "
            "WHERE instance_id = ANY(:ids) AND error_class = 'PoisonTrigger'",
            ids=ids,
        )

    wait_until(lambda: len(kept()) == len(ids), POISON_WAIT_S, f"{tag}: poison kept")
    found = {r.instance_id: r for r in kept()}
    seen = deliveries(delivery_log)
    text = logs_text(logs)
    main_lane = logs[0].read_text(errors="replace")
    common.line(
        f"  {tag}: worker logs",
        f"hard time limit kills so far {text.count('Hard time limit')} "
        f"({main_lane.count('Hard time limit')} on {logs[0].stem}), "
        f"pool processes lost {text.count('WorkerLostError')}",
    )
    for instance_id in ids:
        inbox_row = rows(
            engine,
            "SELECT id, redeliveries FROM inbox WHERE payload->'kwargs'->>'instance_id' = :i",
            i=instance_id,
        )
        counted = (
            f"delivered {seen.get(inbox_row[0].id, 0)} times, "
            f"{inbox_row[0].redeliveries} counted as redelivered"
            if inbox_row
            else "no inbox row"
        )
        failed = found.get(instance_id)
        if failed is None:
            common.line(f"  {tag}: poison {instance_id}", f"NOT kept; {counted}")
        else:
            took = failed.last_at.timestamp() - sent_at[instance_id]
            common.line(
                f"  {tag}: poison {instance_id}",
                f"kept after {took:.1f} s; {counted}; {failed.error}",
            )
    common.ratio_line(
        f"{tag}: poison starts not kept as PoisonTrigger",
        float(len(ids) - len(found)),
        "<=",
        0.0,
        "{:.0f}",
    )


def spread(each: int, kinds: tuple[str, ...], poisons: int) -> list[str]:
    """``each`` of every kind in turn, with the poisons in the middle of the window."""
    plan = [kind for _ in range(each) for kind in kinds]
    middle = len(plan) // 2
    return plan[:middle] + [POISON_KIND] * poisons + plan[middle:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="15 s windows, a 2,000-start backlog")
    ap.add_argument("--seconds", type=float, default=None, help="each canary window (60; quick 15)")
    ap.add_argument("--rate", type=float, default=10.0, help="canaries started per second (10)")
    ap.add_argument(
        "--backlog", type=int, default=None, help="backlog starts (10,000; quick 2,000)"
    )
    ap.add_argument(
        "--hostile",
        type=int,
        default=None,
        help="slow-FEEL starts, regex bombs, fork bombs and oversized mappings, each (6; quick 3)",
    )
    ap.add_argument(
        "--poisons", type=int, default=1, help="injected starts that hang past the hard limit (1)"
    )
    ap.add_argument(
        "--per-kind",
        action="store_true",
        help="first one window per kind alone, the poison included (printed, not judged)",
    )
    ap.add_argument(
        "--lanes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the canaries' worker as the main lane beside a quarantine lane (default), "
        "or --no-lanes: one dormant worker -c 2",
    )
    args = ap.parse_args()
    seconds = args.seconds or (15.0 if args.quick else 60.0)
    backlog = args.backlog or (2000 if args.quick else 10000)
    each = args.hostile or (3 if args.quick else 6)
    bounded = tuple(k for k in KINDS if k != POISON_KIND)
    common.header(
        f"bench_hostile: canaries at {args.rate:.0f}/s for {seconds:.0f} s per window; "
        f"{each} of each of {', '.join(bounded)}, {args.poisons} poison; "
        f"a {backlog}-start backlog; dormant worker -c 2"
        + (" --lane main + dormant worker -c 1 --lane quarantine" if args.lanes else "")
        + " + beat"
    )
    logdir = Path(tempfile.mkdtemp(prefix="dormant-bench-hostile-"))
    delivery_log = logdir / "deliveries.log"
    common.line("worker logs", str(logdir))
    common.line(
        "worker settings",
        f"soft/hard time limit {SOFT_LIMIT_S}/{HARD_LIMIT_S} s, DORMANT_MAX_TOKENS {MAX_TOKENS}, "
        f"outbox sweep after {SWEEP_AFTER_S} s, DORMANT_MAX_DELIVERIES {MAX_DELIVERIES}"
        + (
            f"; main lane: budget {LANE_BUDGET_S} s, hard time limit {LANE_LIMIT_S} s"
            if args.lanes
            else ""
        ),
    )
    poison_on = logdir / "poison-on"  # DORMANT_TEST_POISON: the hook acts while it exists
    poison_on.touch()

    from tests.faults.delivery_log import deliveries

    with common.scratch_redis_db() as broker_url, common.scratch_database() as database_url:
        from sqlalchemy import create_engine

        from dormant import Client

        engine = create_engine(database_url)
        client = Client(database_url=database_url, broker_url=broker_url)
        side_client = Client(database_url=database_url, broker_url=broker_url)
        for xml in (CANARY, BACKLOG, SLOW, REGEX, POISON, FORK_BOMB, OVERSIZED):
            client.deploy(xml)
        env = worker_env(broker_url, database_url, delivery_log, poison_on)
        workers = served(args, env, logdir)
        logs = [w.log for w in workers]
        procs = [*workers, beat(env, logdir, "beat-1")]
        try:
            warm = [client.start("hostile_canary", {"n": i}) for i in range(20)]
            if not wait_until(lambda: len(completed(engine, warm)) == 20, 180, "warm-up"):
                raise SystemExit(f"the worker served no canary:\n{procs[0].tail()}")

            # -- 1. baseline --------------------------------------------------------------
            base = canaries(engine, client, args.rate, seconds, "baseline")
            _, base_p99 = latency_line("baseline: start -> completed", base)

            # -- 1'. one kind at a time (printed, not judged): which one costs the canaries
            if args.per_kind:
                for kind in (*KINDS, "dead outbox row"):
                    count = args.poisons if kind == POISON_KIND else each
                    alone = Hostile(side_client, seconds, [kind] * count if kind in KINDS else [])
                    if kind not in KINDS:
                        dead_outbox_row(engine)
                    alone.start()
                    values = canaries(engine, client, args.rate, seconds, kind)
                    alone.join(60)
                    _, p99 = latency_line(f"only {kind:<15}", values)
                    common.line(f"  p99 / baseline p99 with only {kind}", f"{p99 / base_p99:.2f}")
                    if kind == POISON_KIND:  # settled before the next window
                        follow_poison(engine, alone.sent_at, delivery_log, logs, "only poison")

            # -- 2. hostile: all at once, the poison included ----------------------------------
            dead = dead_outbox_row(engine)
            hostile = Hostile(side_client, seconds, spread(each, bounded, args.poisons))
            hostile.start()
            under = canaries(engine, client, args.rate, seconds, "hostile")
            hostile.join(60)
            if hostile.error is not None:
                common.line("hostile sender", f"stopped: {hostile.error!r}")
            _, hostile_p99 = latency_line("hostile:  start -> completed", under)
            common.ratio_line(
                "canary p99 under hostile load / baseline p99",
                hostile_p99 / base_p99 if base_p99 > 0 else float("inf"),
                "<=",
                P99_RATIO_TARGET,
            )
            kind_of = {i: kind for kind, ids in hostile.started.items() for i in ids}
            slowest_beside(hostile.sent_at, kind_of)
            report_hostile(engine, hostile.started, dead, deliveries(delivery_log), logs)
            poisoned = {i: hostile.sent_at[i] for i in hostile.started.get(POISON_KIND, [])}
            if poisoned:
                follow_poison(engine, poisoned, delivery_log, logs, "hostile")

            # -- 3. backlog, on a broker db of its own: nothing of the windows above is left
            # on it.
            for p in procs:
                p.stop()
            with common.scratch_redis_db() as backlog_broker:
                benv = worker_env(backlog_broker, database_url, delivery_log, poison_on)
                bclient = Client(database_url=database_url, broker_url=backlog_broker)
                procs.append(beat(benv, logdir, "beat-2"))
                began = time.perf_counter()
                backlog_ids: list[str] = []
                for lo in range(0, backlog, 1000):
                    backlog_ids += bclient.start_many(
                        "hostile_backlog", [{"n": n} for n in range(lo, min(backlog, lo + 1000))]
                    )
                common.line(
                    "backlog queued (no worker running)",
                    f"{len(backlog_ids)} starts in {time.perf_counter() - began:.1f} s",
                )
                time.sleep(SWEEP_AFTER_S * 2)  # older than the sweep's threshold, sweeps queued
                procs += [worker(benv, logdir, "worker-2"), worker(benv, logdir, "worker-3")]
                began = time.perf_counter()
                wait_until(
                    lambda: (
                        scalar(
                            engine,
                            "SELECT count(*) FROM instances WHERE key = 'hostile_backlog' "
                            "AND status = 'completed'",
                        )
                        == backlog
                    ),
                    120 + backlog / 5,
                    "backlog applied",
                )
                common.line("backlog drained", f"in {time.perf_counter() - began:.1f} s")
                time.sleep(SWEEP_AFTER_S * 3)  # a late re-send by the sweep would land now
                judge_backlog(engine, backlog_ids, deliveries(delivery_log))
                for p in procs:
                    p.stop()
        finally:
            for p in procs:
                p.stop()
            engine.dispose()
    return common.summary()


if __name__ == "__main__":
    sys.exit(main())
