"""How the CLI prints: tables for a person, tab-separated lines or JSON for a program.

A list command prints, by ``--format`` (default ``auto``):

* ``table`` — a header and aligned columns, times as ages ("4m ago") and due-ins
  ("in 30s"); what ``auto`` picks on a terminal;
* ``tsv`` — one tab-separated line per row, no header, times in ISO 8601; what
  ``auto`` picks when the output is piped, so ``cut -f1`` and ``split("\\t")`` work;
* ``json`` (or ``--json``) — a JSON array of objects with every field.

The wording of waits ("waiting for job charge-card, attempt 2, times out in 4m") lives
here too: it is presentation, and the console shows the same views its own way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click

from dormant.engine_core.errors import InvalidOperation

__all__ = [
    "Column",
    "ago",
    "describe_wait",
    "due_in",
    "duration",
    "emit",
    "history_lines",
    "incident_columns",
    "instance_columns",
    "instance_lines",
    "instance_summary",
    "output_options",
    "pick_format",
    "queued",
    "render",
    "task_columns",
    "when",
]

T = TypeVar("T")
FORMATS = ("auto", "table", "tsv", "json")
_MAX_CELL = 60


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its header, its cell for a person, and (if different) for a program."""

    header: str
    human: Callable[[Any], str]
    plain: Callable[[Any], str] | None = None


def output_options(command: Any) -> Any:
    """A list command's ``--format auto|table|tsv|json`` and ``--json``."""
    command = click.option("--json", "as_json", is_flag=True, help="a JSON array")(command)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="auto",
        show_default=True,
        help="auto: a table on a terminal, tab-separated lines when piped",
    )(command)


def emit(
    rows: Any,
    columns: Sequence[Column],
    fmt: str,
    as_json: bool,
    as_dict: Callable[[Any], dict[str, Any]],
    empty: str,
) -> None:
    """Print ``rows`` to stdout in the format picked for it (nothing for an empty TSV)."""
    text = render(list(rows), columns, pick_format(fmt, as_json, sys.stdout), as_dict, empty=empty)
    if text:
        click.echo(text)


def pick_format(fmt: str, as_json: bool, stream: Any = None) -> str:
    """``auto`` → ``table`` on a terminal, else ``tsv``; ``--json`` wins."""
    if as_json:
        return "json"
    if fmt != "auto":
        return fmt
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    return "table" if callable(isatty) and isatty() else "tsv"


def _cell(value: str) -> str:
    value = value.replace("\t", " ").replace("\n", " ")
    return value if len(value) <= _MAX_CELL else value[: _MAX_CELL - 1] + "…"


def render(
    rows: Sequence[T],
    columns: Sequence[Column],
    fmt: str,
    as_dict: Callable[[T], dict[str, Any]],
    *,
    empty: str = "",
) -> str:
    """The rows in format ``fmt`` (already picked: table, tsv or json), without a final
    newline; ``empty`` is what a table says when there is nothing to show."""
    if fmt == "json":
        return json.dumps([as_dict(r) for r in rows], indent=2, sort_keys=True, default=str)
    if fmt == "tsv":
        return "\n".join(
            "\t".join((c.plain or c.human)(r).replace("\t", " ") for c in columns) for r in rows
        )
    if not rows:
        return empty
    cells = [[_cell(c.human(r)) for c in columns] for r in rows]
    widths = [max(len(c.header), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = [[c.header for c in columns], *cells]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


# -- times -------------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """A human duration: 12s, 4m, 4m 30s is too precise for a glance — 2h 5m, 3d 4h."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d {h}h" if h else f"{d}d"


def ago(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "-"
    seconds = (now - at).total_seconds()
    return "just now" if 0 <= seconds < 1 else f"{duration(seconds)} ago"


def due_in(at: datetime, now: datetime) -> str:
    """``in 4m``, or ``4m overdue`` once past."""
    seconds = (at - now).total_seconds()
    return f"in {duration(seconds)}" if seconds >= 0 else f"{duration(seconds)} overdue"


def iso(at: datetime | None) -> str:
    return at.isoformat() if at is not None else ""


# -- waits -------------------------------------------------------------------------------


def describe_wait(w: Any, now: datetime, instance_id: str = "…") -> str:
    """One wait (an ``engine_core.views.WaitView``) as a person says it."""
    due = f" {due_in(w.due_at, now)}" if w.due_at is not None else ""
    where = "" if w.role == "node" else f" ({w.role.replace('_', ' ')} {w.node_id})"
    if w.kind == "job":
        if w.job_running:
            times_out = f", times out{due}" if due else ""
            return f"waiting for job {w.job_type}, attempt {w.attempt}{times_out}"
        return f"job {w.job_type} failed, attempt {w.attempt} retries{due}"
    if w.kind == "timer":
        return f"waiting for timer{where}, due{due}"
    if w.kind == "message":
        key = f" with key {w.correlation_key}" if w.correlation_key is not None else ""
        return f"waiting for message {w.message_name}{key}{where}"
    if w.kind == "signal":
        return f"waiting for signal {w.signal_name}{where}"
    if w.kind == "user_task":
        # A user task's id is "<instance>.<wait>" (persistence/holds.py).
        return f"waiting for user task {w.task_name or w.node_id} (task {instance_id}.{w.id})"
    if w.kind == "call":
        return f"waiting for child instance {w.child_instance_id}"
    if w.kind == "retry":
        return f"incident {w.incident_id} retries{due}"
    return f"waiting for {w.kind}{where}{due}"


# -- what each list shows ------------------------------------------------------------


def task_columns(
    now: datetime, processes: Mapping[str, tuple[str, int]] | None = None
) -> list[Column]:
    """The tasks' columns; ``processes`` (instance → key, version) adds the PROCESS
    column last, so the columns before it keep their places in piped output."""
    found = processes or {}

    def process(t: Any) -> str:
        key, version = found.get(t.instance_id, ("", 0))
        return f"{key} v{version}" if key else ""

    columns = [
        Column("TASK", lambda t: t.id),
        Column("INSTANCE", lambda t: t.instance_id),
        Column("NODE", lambda t: t.node_id),
        Column("NAME", lambda t: t.name or ""),
        Column("ASSIGNEE", lambda t: t.assignee or ""),
        Column("CANDIDATES", _candidates),
        Column("DUE", lambda t: _due(t.due_date, now), lambda t: iso(t.due_date)),
        Column("PRIORITY", lambda t: str(t.priority)),
        Column("STATE", _task_state),
        Column("CREATED", lambda t: ago(t.created_at, now), lambda t: iso(t.created_at)),
    ]
    return columns if processes is None else [*columns, Column("PROCESS", process)]


def _candidates(t: Any) -> str:
    """``users a,b; groups ops``: who may claim the task."""
    parts = []
    if t.candidate_users:
        parts.append("users " + ",".join(t.candidate_users))
    if t.candidate_groups:
        parts.append("groups " + ",".join(t.candidate_groups))
    return "; ".join(parts)


def _due(at: datetime | None, now: datetime) -> str:
    return "" if at is None else due_in(at, now)


def _task_state(t: Any) -> str:
    if t.denied_reason:
        return f"{t.state} (denied: {t.denied_reason})"
    return str(t.state)


def _status(view: Any) -> str:
    """The status, and ``flagged`` when triggers for it are kept as failed triggers."""
    failed = getattr(view, "failed_triggers", 0)
    return f"{view.status} (flagged: {failed} failed)" if failed else str(view.status)


def instance_columns(now: datetime, suspended: Collection[str] = ()) -> list[Column]:
    """``suspended``: the ids of the listed instances that are suspended, marked in the
    STATUS column (``active (suspended)``); a queued start has no version yet."""

    def status(i: Any) -> str:
        return _status(i) + (" (suspended)" if i.id in suspended else "")

    return [
        Column("ID", lambda i: i.id),
        Column("PROCESS", lambda i: i.key if i.version is None else f"{i.key} v{i.version}"),
        Column("STATUS", status),
        Column("BUSINESS KEY", lambda i: i.business_key or ""),
        Column("STARTED", lambda i: ago(i.created_at, now), lambda i: iso(i.created_at)),
        Column("UPDATED", lambda i: ago(i.updated_at, now), lambda i: iso(i.updated_at)),
    ]


_SUMMARY_FIELDS = (
    "id",
    "key",
    "version",
    "status",
    "business_key",
    "created_at",
    "updated_at",
    "failed_triggers",
)


def instance_summary(row: Any, suspended: Collection[str] = ()) -> dict[str, Any]:
    """An instance list row as JSON: the list's fields, never the variables."""
    out: dict[str, Any] = {}
    for name in _SUMMARY_FIELDS:
        value = getattr(row, name, None)
        out[name] = value.isoformat() if isinstance(value, datetime) else value
    out["suspended"] = row.id in suspended
    return out


def incident_columns(now: datetime) -> list[Column]:
    return [
        Column("INCIDENT", lambda i: i.id),
        Column("INSTANCE", lambda i: i.instance_id),
        Column("NODE", lambda i: i.node_id),
        Column("STATE", lambda i: i.state),
        Column("ATTEMPTS", lambda i: str(i.attempts)),
        Column("CAUSE", lambda i: i.cause_class),
        Column("LAST FAILED", lambda i: ago(i.last_at, now), lambda i: iso(i.last_at)),
    ]


def failed_trigger_columns(now: datetime) -> list[Column]:
    return [
        Column("FAILED TRIGGER", lambda f: f.id),
        Column("INSTANCE", lambda f: f.instance_id or "-"),
        Column("TASK", lambda f: f.task),
        Column("ERROR", lambda f: f.error_class),
        Column("ATTEMPTS", lambda f: str(f.attempts)),
        Column("FLAGS", lambda f: "no: overtaken" if f.overtaken else "yes"),
        Column("LAST FAILED", lambda f: ago(f.last_at, now), lambda f: iso(f.last_at)),
        Column("WHY", lambda f: f.error[:120], lambda f: f.error),
    ]


def unmatched_message_columns(now: datetime) -> list[Column]:
    """``dormant messages unmatched``: messages that went nowhere (persistence/unmatched.py)."""
    return [
        Column("MESSAGE", lambda m: m.name),
        Column("KEY", lambda m: m.correlation_key or "-", lambda m: m.correlation_key or ""),
        Column("WHEN", lambda m: ago(m.at, now), lambda m: iso(m.at)),
        Column("MESSAGE ID", lambda m: m.message_id),
    ]


def parked_row_columns(now: datetime) -> list[Column]:
    """``dormant triggers parked``: sweep rows parked with their error (persistence/parked.py)."""
    return [
        Column("PARKED ROW", lambda p: p.ref),
        Column("KIND", lambda p: p.kind),
        Column("PARKED", lambda p: ago(p.parked_at, now), lambda p: iso(p.parked_at)),
        Column("WHY", lambda p: p.error[:120], lambda p: p.error),
    ]


def audit_columns(now: datetime) -> list[Column]:
    """``dormant audit list``: operator actions (persistence/audit.py), newest first."""
    return [
        Column("WHEN", lambda a: ago(a.at, now), lambda a: iso(a.at)),
        Column("ACTOR", lambda a: a.actor),
        Column("FROM", lambda a: a.source),
        Column("ACTION", lambda a: a.action),
        Column("TARGET", lambda a: a.target or ""),
        Column("OUTCOME", lambda a: a.outcome),
        Column("PARAMS", lambda a: _params(a.params)[:80], lambda a: _params(a.params)),
        Column("DETAIL", lambda a: (a.detail or "")[:80], lambda a: a.detail or ""),
    ]


def _params(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":")) if params else ""


def instance_lines(view: Any, now: datetime) -> list[str]:
    """``dormant instances show``: the instance, each live token and what it waits for
    in words, its incidents, its variables."""
    lines = [f"{view.id}  {view.key} v{view.version}  {view.status}  revision {view.revision}"]
    if view.business_key:
        lines.append(f"business key: {view.business_key}")
    ended = f", ended {ago(view.ended_at, now)}" if view.ended_at else ""
    lines.append(f"started {ago(view.created_at, now)}, updated {ago(view.updated_at, now)}{ended}")
    if view.parent_instance_id:
        lines.append(f"parent instance: {view.parent_instance_id}")
    if getattr(view, "suspended", False):
        lines.append(f"suspended: {view.held} trigger(s) held for the resume")
    by_token: dict[str | None, list[Any]] = {}
    for w in view.waits:
        by_token.setdefault(w.token_id, []).append(w)
    for t in view.tokens:
        if t.state in ("completed", "withdrawn"):
            continue
        said = [describe_wait(w, now, view.id) for w in by_token.get(t.id, [])]
        detail = f": {'; '.join(said)}" if said else ""
        lines.append(f"  token {t.id} at {t.node_id}: {t.state}{detail}")
    for w in by_token.get(None, []):
        lines.append(f"  armed at {w.node_id}: {describe_wait(w, now, view.id)}")
    for inc in view.incidents:
        retry = f", retry {due_in(inc.retry_at, now)}" if inc.retry_at else ""
        lines.append(
            f"  incident {inc.id} at {inc.node_id}: {inc.state}, attempt {inc.attempts}, "
            f"last failed {ago(inc.last_at, now)}{retry} ({inc.cause_class}: {inc.cause})"
        )
    if getattr(view, "failed_triggers", 0):
        lines.append(
            f"  flagged: {view.failed_triggers} failed trigger(s); "
            f"`dormant triggers list --failed --instance {view.id}`"
        )
    lines.append(f"  variables: {json.dumps(view.variables, sort_keys=True)}")
    return lines


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def when(text: str | None, now: datetime, option: str) -> datetime | None:
    """``2h`` (that long ago), or an ISO 8601 time (UTC unless it names a zone)."""
    if text is None:
        return None
    raw = text.strip()
    if raw[:-1].isdigit() and raw[-1:] in _UNITS:
        return now - timedelta(seconds=int(raw[:-1]) * _UNITS[raw[-1]])
    try:
        at = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidOperation(
            f"{option} {text!r} is neither an ISO time (2026-12-01T09:00) nor an age (2h)"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def history_lines(rows: list[dict[str, Any]], internal: bool) -> list[str]:
    """``instances history``: one line per event (or fact), its time and revision first."""
    out = []
    for row in rows:
        at = str(row["at"])  # ISO 8601 already (``to_dict``)
        revision = "" if row.get("revision") is None else f"r{row['revision']}"
        if internal:
            details = " ".join(f"{k}={v}" for k, v in sorted(row["details"].items()))
            out.append(f"{at}  {revision:>4}  {row['kind']}  {details}".rstrip())
        else:
            out.append(f"{at}  {revision:>4}  {row['category']:<8}  {row['text']}")
    return out


def queued(instance_id: str, queued_at: datetime, now: datetime, as_json: bool) -> str:
    """What ``instances show`` says of an instance whose start is still in the inbox."""
    if as_json:
        return json.dumps({"id": instance_id, "status": "queued", "queued_at": iso(queued_at)})
    return (
        f"{instance_id}  queued: no worker has applied its start yet "
        f"(sent {duration((now - queued_at).total_seconds())} ago)"
    )
