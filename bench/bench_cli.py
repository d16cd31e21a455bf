"""The CLI's start-up: ``dormant --help``, ``instances list`` and ``incidents list``
beside ``python -c pass``, measured side by side in one run (the median of several runs
each), on an embedded-default database in a temp directory. Target: each command at
most 0.3 s above the interpreter's own start (issue 23, "A CLI that answers at once").

    .venv/bin/python bench/bench_cli.py [--runs N]

The commands run as the console script does (``dormant.tasks.cli:main``), through this
interpreter; the database is made (and migrated) by one run first, so what is timed is
the start-up a user pays every time, not the first run's migration.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_EXCESS_SECONDS = 0.3
ENTRY = "from dormant.tasks.cli import main; main()"
COMMANDS: list[tuple[str, list[str]]] = [
    ("dormant --help", ["--help"]),
    ("dormant instances list", ["instances", "list"]),
    ("dormant incidents list", ["incidents", "list"]),
]
# What a list cannot go below while it reads through SQLAlchemy and the checkpoint
# documents: the libraries alone, one SELECT on the same database file. Printed beside
# the commands, never judged.
FLOORS: list[tuple[str, str]] = [
    (
        "floor: click + SQLAlchemy + 1 SELECT",
        "import click, sqlalchemy\n"
        "e = sqlalchemy.create_engine('sqlite:///dormant.sqlite3')\n"
        "with e.connect() as c: c.execute(sqlalchemy.text('select 1')).all()",
    ),
    ("floor: the same + pydantic", "import pydantic\n"),
]


def _env() -> dict[str, str]:
    """The embedded default: no URLs, so the SQLite file and the server-less transport
    sit in the working directory."""
    env = dict(os.environ)
    for name in ("DORMANT_DATABASE_URL", "DORMANT_BROKER_URL"):
        env.pop(name, None)
    return env


def timed(argv: list[str], cwd: str, runs: int) -> float:
    """The median wall time of ``runs`` runs of ``argv`` (each must succeed)."""
    seconds: list[float] = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=_env(), check=True, capture_output=True)
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="runs of each command (median)")
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="dormant-bench-cli-") as here:
        # the first run makes and migrates the embedded database: not timed
        subprocess.run(
            [python, "-c", ENTRY, "instances", "list"],
            cwd=here,
            env=_env(),
            check=True,
            capture_output=True,
        )
        base = timed([python, "-c", "pass"], here, args.runs)
        print(f"python -c pass                 {base * 1000:7.0f} ms   (median of {args.runs})")
        met_all = True
        for label, argv in COMMANDS:
            took = timed([python, "-c", ENTRY, *argv], here, args.runs)
            excess = took - base
            met = excess <= TARGET_EXCESS_SECONDS
            met_all &= met
            print(
                f"{label:<30} {took * 1000:7.0f} ms   +{excess * 1000:4.0f} ms over the "
                f"interpreter (target <= {TARGET_EXCESS_SECONDS * 1000:.0f} ms)  "
                f"{'MET' if met else 'NOT MET'}"
            )
        floor = ""
        for label, code in FLOORS:
            floor = code + floor if code.startswith("import pydantic") else code
            took = timed([python, "-c", floor], here, args.runs)
            print(
                f"{label:<36} {took * 1000:7.0f} ms   +{(took - base) * 1000:4.0f} ms "
                "over the interpreter (beside, not judged)"
            )
    print(f"summary: CLI start-up {'MET' if met_all else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
