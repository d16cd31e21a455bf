"""The console's test kit: a real ``dormant console`` process and a real headless browser.

``console_proc`` starts ``dormant console`` as a subprocess on a free loopback port with
the stack's URLs (uvicorn, the same command an operator runs); ``chrome`` starts
Debian's chromium through chromium-driver with a fresh profile. Screenshots go to
``test-artifacts/console/`` (or ``$DORMANT_TEST_ARTIFACTS/console``).
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import httpx

from tests.integration.conftest import REPO, Proc, Stack, wait_for

MODEL = Path(__file__).with_name("payment.bpmn")
ARTIFACTS = Path(os.environ.get("DORMANT_TEST_ARTIFACTS", REPO / "test-artifacts")) / "console"
USER, PASSWORD = "ops", "correct horse battery"
TOKEN = "t0ken-for-scripts-0123456789"
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Console:
    def __init__(self, proc: Proc, port: int) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{port}"

    def http(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=20, **kwargs)


def console_proc(
    stack: Stack, *args: str, auth: bool = True, name: str = "console", extra_env: Any = None
) -> Console:
    port = free_port()
    env = dict(stack.env)
    env.pop("DORMANT_CONSOLE_AUTH", None)
    env.pop("DORMANT_CONSOLE_TOKEN", None)
    if auth:
        env["DORMANT_CONSOLE_AUTH"] = f"{USER}:{PASSWORD}"
        env["DORMANT_CONSOLE_TOKEN"] = TOKEN
    env.update(extra_env or {})
    proc = Proc(
        f"{name}-{len(stack.procs)}",
        stack.dormant("console", "--port", str(port), *args),
        env,
        stack.tmp,
    )
    stack.procs.append(proc)
    proc.start(ready="Uvicorn running on")
    return Console(proc, port)


def chrome() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='dormant-chrome-')}")
    options.add_argument("--window-size=1360,1000")
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def screenshot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def open_incident(stack: Stack, instance_id: str) -> Any:
    return wait_for(
        lambda: next((i for i in stack.client.incidents(instance_id) if i.state == "open"), None),
        30,
        what=f"an open incident on {instance_id}",
    )
