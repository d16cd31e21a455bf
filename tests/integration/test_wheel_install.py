"""dormant installs as one top-level name: a wheel built from this checkout holds only
``dormant/`` and its dist-info, and a fresh virtualenv that installs it imports
``from dormant import Client`` from a directory holding the user's own ``tasks.py``
and ``scheduler.py`` (a Celery project's usual names, which a top-level ``tasks`` or
``scheduler`` package would collide with). The build and install take about 15 s with
pip's cache warm."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_installs_only_dormant_and_imports_beside_a_users_tasks_py(
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    # Built from a copy of what the wheel is made of: pip builds in the source tree,
    # and setuptools' build/ left in the checkout is a second copy of every module
    # for the tests that read the sources (and proof that nothing else is needed).
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for name in ("dormant", "engine_core", "persistence", "scheduler", "tasks"):
        shutil.copytree(
            REPO / name,
            source / name,
            symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = wheels.glob("dormant-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["dormant"]
        (record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
        recorded = [line.split(",")[0] for line in archive.read(record).decode().splitlines()]
    dist_info = top_level.split("/")[0]
    assert {n.split("/")[0] for n in [*names, *recorded]} == {"dormant", dist_info}
    for package in ("engine_core", "persistence", "scheduler", "tasks"):
        assert f"dormant/{package}/__init__.py" in names

    user = tmp_path / "project"
    user.mkdir()
    (user / "tasks.py").write_text("from celery import Celery\n\napp = Celery('mine')\n")
    (user / "scheduler.py").write_text("EVERY = 5\n")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=180,
    )
    probe = (
        "import tasks, scheduler; from dormant import Client; "
        f"assert tasks.__file__.startswith({str(user)!r}), tasks.__file__; "
        "assert scheduler.EVERY == 5; print(Client.__module__)"
    )
    done = subprocess.run(
        [str(python), "-c", probe], cwd=user, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "dormant.tasks.client"
    # No old top-level name was installed beside dormant.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for old in ("tasks", "scheduler", "engine_core", "persistence"):
        assert not (Path(site) / old).exists(), old
    print(f"wheel built and installed in {time.monotonic() - started:.1f}s")
