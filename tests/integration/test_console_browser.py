"""The console in a real headless browser, against PostgreSQL + Redis and a real worker.

An operator's morning: sign in, open the instance list, open the instance with an open
incident, see the incident drawn at the failing node of the modeler's diagram, fix the
cause, press Retry, and watch the page turn the instance completed without reloading.
Screenshots of the main pages are saved as test artefacts (tests/integration/console/
kit.py); docs/console/ holds a committed copy of each.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack, _urls, wait_for
from tests.integration.console.kit import (
    MODEL,
    PASSWORD,
    USER,
    Console,
    chrome,
    console_proc,
    open_incident,
    screenshot,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cstack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("console-browser")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        try:
            s.worker_and_beat()
            yield s
        finally:
            s.close()


@pytest.fixture(scope="module")
def console(cstack: Stack) -> Console:
    return console_proc(cstack)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()


# What chromedriver answers when a look lands while the page is being replaced (a
# form's POST and its redirect): its JavaScript context is gone for that moment.
_BETWEEN_PAGES = ("unhandled inspector error", "cannot find context with specified id")


def _wait(driver: Any, condition: Any, timeout: float = 30) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    def looked(d: Any) -> Any:
        try:
            return condition(d)
        except StaleElementReferenceException:
            raise
        except WebDriverException as exc:
            if any(words in str(exc).lower() for words in _BETWEEN_PAGES):
                return False  # between two pages: looked at again on the next poll
            raise

    # A page that navigates or refreshes in place between two looks is looked at again.
    return WebDriverWait(
        driver,
        timeout,
        poll_frequency=0.2,
        ignored_exceptions=[StaleElementReferenceException],
    ).until(looked)


def _css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def _overlay(driver: Any, node: str, kind: str) -> list[Any]:
    return _css(driver, f'.djs-overlay-container .dm-stack[data-node="{node}"] .dm-badge.{kind}')


def test_open_the_failing_instance_see_the_incident_on_the_diagram_retry_it_complete(
    cstack: Stack, console: Console, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    c = cstack.client
    c.deploy(MODEL)
    flag = tmp_path / "flag"
    failing = c.start("payment", {"flag": str(flag), "card": "4111-secret"}, business_key="o-1")
    # Neighbours for the pages: one waits for its message, one keeps its incident.
    ok_flag = tmp_path / "ok"
    ok_flag.touch()
    waiting = c.start("payment", {"flag": str(ok_flag), "order": "o-2"}, business_key="o-2")
    stuck = c.start("payment", {"flag": str(tmp_path / "never")}, business_key="o-3")
    incident = open_incident(cstack, failing)
    open_incident(cstack, stuck)
    cstack.wait_status(waiting, "active")

    # Sign in through the form (the session cookie then carries the operator).
    browser.get(console.url + "/login")
    browser.find_element(By.ID, "user").send_keys(USER)
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.ID, "sign-in").click()
    _wait(browser, lambda d: d.current_url.endswith("/processes"))
    _wait(browser, lambda d: _css(d, '#processes tr[data-key="payment"]'))
    screenshot(browser, "processes")

    # The instance list, filtered to instances with an open incident: both failing ones.
    browser.get(console.url + "/instances?process=payment")
    _wait(browser, lambda d: _css(d, f'#instances tr[data-instance="{failing}"]'))
    screenshot(browser, "instances")
    browser.get(console.url + "/instances?has_incident=1")
    shown = {r.get_attribute("data-instance") for r in _css(browser, "#instances tbody tr")}
    assert shown == {failing, stuck}

    browser.find_element(By.CSS_SELECTOR, f'#instances tr[data-instance="{failing}"] a').click()
    _wait(browser, lambda d: d.find_element(By.ID, "diagram").get_attribute("data-ready") == "1")
    # The overlay sits on the failing node of the drawn diagram, and only there.
    badges = _wait(browser, lambda d: _overlay(d, "charge", "incident"))
    assert "RuntimeError" in badges[0].get_attribute("title")
    assert _css(browser, '.djs-element.dm-incident[data-element-id="charge"]')
    assert not _overlay(browser, "done", "incident")
    assert _overlay(browser, "placed", "completed")  # the start event was passed
    assert "4111-secret" in browser.page_source  # signed in: the snapshot's values show
    screenshot(browser, "instance-incident")

    # The operator fixes the cause, then presses Retry: the Client's retry, the worker's
    # locked transaction, and the page follows by itself.
    flag.touch()
    browser.find_element(
        By.CSS_SELECTOR, f'button[data-action="retry"][data-incident="{incident.id}"]'
    ).click()
    _wait(browser, lambda d: f"retry {incident.id}" in d.find_element(By.TAG_NAME, "main").text)
    _wait(
        browser,
        lambda d: d.find_element(By.ID, "instance-status").text == "completed",
        timeout=40,
    )
    assert cstack.client.instance(failing).status == "completed"
    _wait(browser, lambda d: _overlay(d, "done", "completed"))
    assert not _overlay(browser, "charge", "incident")
    # The flows it took are drawn (through the gateway to done), the other branch not.
    _wait(browser, lambda d: _css(d, '.djs-element.dm-taken[data-element-id="f3"]'))
    assert _css(browser, '.djs-element.dm-taken[data-element-id="f2"]')
    assert not _css(browser, '.djs-element.dm-taken[data-element-id="f4"]')
    # The page follows in two requests (instance.js: the state and overlays, then the
    # tables): the incident's buttons go with the second, a moment after the overlays.
    _wait(browser, lambda d: not _css(d, f'button[data-incident="{incident.id}"]'))
    screenshot(browser, "instance-completed")

    # The waiting one shows what it waits for, on the node it waits at.
    browser.get(console.url + f"/instances/{waiting}")
    _wait(browser, lambda d: d.find_element(By.ID, "diagram").get_attribute("data-ready") == "1")
    wait_badge = _wait(browser, lambda d: _overlay(d, "paid", "waiting"))
    assert wait_badge[0].get_attribute("title") == "message paid key o-2"
    screenshot(browser, "instance-waiting")

    browser.get(console.url + "/incidents")
    rows = _wait(browser, lambda d: _css(d, "#incidents tbody tr[data-incident]"))
    assert [r.find_element(By.CSS_SELECTOR, "td").text for r in rows] == [
        i.id for i in cstack.client.incidents(stuck)
    ]
    screenshot(browser, "incidents")


def test_the_instance_list_refreshes_without_a_reload(
    cstack: Stack, console: Console, browser: Any, tmp_path: Path
) -> None:
    """A new instance appears in an open list page; the page object is the same one."""
    c = cstack.client
    c.deploy(MODEL)
    browser.get(console.url + "/instances?business_key=live-1")
    assert not _css(browser, "#instances tr[data-instance]")
    browser.execute_script("window.__sameDocument = 42;")
    flag = tmp_path / "f"
    flag.touch()
    iid = c.start("payment", {"flag": str(flag)}, business_key="live-1")
    _wait(browser, lambda d: _css(d, f'#instances tr[data-instance="{iid}"]'), timeout=40)
    assert browser.execute_script("return window.__sameDocument;") == 42


# -- issue 28: a console that never surprises, and a tasklist -------------------------

REVIEW = Path(__file__).parent / "console" / "review.bpmn"


def _sign_in(driver: Any, console: Console) -> None:
    from selenium.webdriver.common.by import By

    driver.get(console.url + "/login")
    driver.find_element(By.ID, "user").send_keys(USER)
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "sign-in").click()
    _wait(driver, lambda d: d.current_url.endswith("/processes"))


def _field(driver: Any, label: str) -> Any:
    """A form-js input by its label's text (form-js numbers its fields' ids itself)."""
    from selenium.webdriver.common.by import By

    found = driver.find_element(
        By.XPATH, f"//div[@id='task-form']//label[starts-with(normalize-space(.), '{label}')]"
    )
    return driver.find_element(By.ID, found.get_attribute("for"))


def test_tasklist_claim_fill_the_camunda_form_with_an_error_then_complete(
    cstack: Stack, console: Console, browser: Any
) -> None:
    """A reviewer claims the task, the form-js viewer refuses an amount below its
    minimum, a valid one completes the task, and the instance goes on with the form's
    values as its variables."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    c = cstack.client
    c.deploy(REVIEW)
    iid = c.start("review", {"priority": 80})
    task = _wait_task(cstack, iid, "check")
    # The operator signs in as a member of the task's candidate group.
    console = console_proc(
        cstack, name="console-reviewer", extra_env={"DORMANT_CONSOLE_GROUPS": "reviewers"}
    )
    _sign_in(browser, console)
    browser.get(console.url + "/tasks?may=1")
    row = f'#tasks tr[data-task="{task}"]'
    _wait(browser, lambda d: _css(d, row + ' button[data-action="claim"]'))
    browser.find_element(By.CSS_SELECTOR, row + ' button[data-action="claim"]').click()
    _wait(
        browser, lambda d: f"claimed {task} as {USER}" in d.find_element(By.TAG_NAME, "main").text
    )
    # The list refreshes itself once the worker applied the claim.
    _wait(browser, lambda d: _css(d, row + ' button[data-action="unclaim"]'), timeout=40)
    screenshot(browser, "tasklist")

    browser.find_element(By.CSS_SELECTOR, row + " td a").click()
    _wait(browser, lambda d: d.find_element(By.ID, "task-form").get_attribute("data-ready") == "1")
    # The viewer's licence: its bpmn.io watermark stays visible on the form.
    assert browser.find_element(By.CSS_SELECTOR, "#task-form .fjs-powered-by").is_displayed()
    _field(browser, "Comment").send_keys("looks right")
    _field(browser, "Approve").click()
    # Leaving the field shows its error under it (the button below moves down): the
    # click on Complete comes after, as a user's would.
    _field(browser, "Amount").send_keys("0", Keys.TAB)
    _wait(browser, lambda d: _css(d, "#task-form .fjs-form-field-error"))
    browser.find_element(By.ID, "complete-task").click()
    # The viewer refuses it in the page: nothing is posted, the field is marked.
    _wait(browser, lambda d: "Fix the marked field" in d.find_element(By.ID, "form-errors").text)
    assert len(_css(browser, "#task-form .fjs-form-field-error")) == 1  # the amount only
    assert browser.current_url.endswith(f"/tasks/{task}")
    screenshot(browser, "task-form")
    amount = _field(browser, "Amount")
    amount.send_keys(Keys.BACKSPACE, "250", Keys.TAB)
    _wait(browser, lambda d: not _css(d, "#task-form .fjs-form-field-error"))
    browser.find_element(By.ID, "complete-task").click()
    _wait(browser, lambda d: d.current_url.endswith("/tasks"))
    assert f"completing {task}" in browser.find_element(By.TAG_NAME, "main").text
    _wait_task(cstack, iid, "note")  # the gateway read the form's decision
    variables = c.instance(iid).variables
    assert (variables["comment"], variables["amount"], variables["decision"]) == (
        "looks right",
        250,
        "approve",
    )


def _wait_task(stack: Stack, iid: str, node: str) -> str:
    from tests.integration.conftest import wait_for

    found: str = wait_for(
        lambda: next((t.id for t in stack.client.user_tasks(iid) if t.node_id == node), None),
        30,
        what=f"the user task {node} of {iid}",
    )
    return found


def test_cancel_confirms_then_the_task_is_withdrawn_and_internal_facts_toggle(
    cstack: Stack, console: Console, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    c = cstack.client
    c.deploy(REVIEW)
    iid = c.start("review", {"priority": 1})
    _wait_task(cstack, iid, "check")
    _sign_in(browser, console)
    browser.get(console.url + f"/instances/{iid}")
    browser.find_element(By.ID, "cancel-instance").click()
    _wait(browser, lambda d: _css(d, "#confirm"))
    assert "Cancel instance?" in browser.find_element(By.TAG_NAME, "h1").text
    assert c.instance(iid).status == "active"  # one click did not cancel it
    browser.find_element(By.ID, "confirm-yes").click()
    _wait(browser, lambda d: f"cancelling {iid}" in d.find_element(By.TAG_NAME, "main").text)
    cstack.wait_status(iid, "terminated")
    browser.get(console.url + f"/instances/{iid}")
    _wait(browser, lambda d: d.find_element(By.ID, "diagram").get_attribute("data-ready") == "1")
    api = browser.execute_script(
        "return fetch(arguments[0]).then(function (r) { return r.json(); });",
        console.url + f"/api/instances/{iid}",
    )
    assert api["overlays"]["check"]["withdrawn"] and not api["overlays"]["check"]["completed"]
    # The history in people's terms; the raw facts hidden until the toggle is on.
    internal = _css(browser, "#facts li.internal")
    assert internal and not any(li.is_displayed() for li in internal)
    assert any(li.is_displayed() for li in _css(browser, '#history li[data-kind="Withdrawn"]'))
    browser.find_element(By.CSS_SELECTOR, 'label[for="show-internal"]').click()
    assert all(li.is_displayed() for li in _css(browser, "#facts li.internal"))
    assert not any(li.is_displayed() for li in _css(browser, "#history li"))


def test_bulk_buttons_look_disabled_until_a_process_is_chosen_then_confirm_with_a_count(
    cstack: Stack, console: Console, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    c = cstack.client
    c.deploy(REVIEW)
    c.start("review", {"priority": 1}, business_key="bulk-look")
    _sign_in(browser, console)
    browser.get(console.url + "/instances")
    button = browser.find_element(By.CSS_SELECTOR, 'button[data-action="cancel-matching"]')
    assert not button.is_enabled()
    assert float(button.value_of_css_property("opacity")) < 1
    assert button.value_of_css_property("cursor") == "not-allowed"
    browser.get(console.url + "/instances?process=review&business_key=bulk-look")
    button = browser.find_element(By.CSS_SELECTOR, 'button[data-action="cancel-matching"]')
    assert button.is_enabled() and float(button.value_of_css_property("opacity")) == 1
    button.click()
    count = _wait(browser, lambda d: _css(d, "#confirm-count"))
    assert count[0].text == "1"
    before = len(c.batches())
    browser.find_element(By.ID, "confirm-no").click()
    _wait(browser, lambda d: "/instances?" in d.current_url)
    assert len(c.batches()) == before  # going back wrote no batch


def test_the_process_page_draws_each_elements_counts_on_the_diagram(
    cstack: Stack, console: Console, browser: Any, tmp_path: Path
) -> None:
    """One instance pays and waits for its message at ``paid``; one fails its job at
    ``charge`` (an incident, its token still there): the diagram says so element by
    element, as overlays bpmn-js places on them, and 2 passed the start event."""
    c = cstack.client
    xml = MODEL.read_text().replace('id="payment"', 'id="payment-counts"')
    c.deploy(xml.replace('bpmnElement="payment"', 'bpmnElement="payment-counts"'))
    ok_flag = tmp_path / "ok"
    ok_flag.touch()
    paying = c.start("payment-counts", {"flag": str(ok_flag), "order": "o-9"})
    stuck = c.start("payment-counts", {"flag": str(tmp_path / "never")})
    open_incident(cstack, stuck)
    wait_for(
        lambda: any(t.node_id == "paid" for t in c.instance(paying).tokens) or None,
        what="the message wait",
    )
    _sign_in(browser, console)
    browser.get(console.url + "/processes/payment-counts/1")
    _wait(browser, lambda d: d.find_element("id", "diagram").get_attribute("data-ready") == "1")

    def count(node: str, kind: str) -> str:
        found = _css(browser, f'.djs-overlay-container .dm-counts[data-node="{node}"] .{kind}')
        return str(found[0].text) if found else ""

    assert (count("charge", "waiting"), count("charge", "incident")) == ("1", "1")
    assert (count("charge", "passed"), count("paid", "waiting")) == ("1", "1")
    assert (count("placed", "passed"), count("done", "passed")) == ("2", "")
    screenshot(browser, "process-counts")

    # The page refreshes itself as the lists do (console.js, data-interval): a third
    # instance waiting at ``paid`` shows on the diagram and in the table, no reload.
    browser.execute_script("window.__sameDocument = 42;")
    c.start("payment-counts", {"flag": str(ok_flag), "order": "o-10"})
    _wait(browser, lambda d: count("paid", "waiting") == "2", timeout=60)
    assert count("placed", "passed") == "3" and count("charge", "incident") == "1"
    row = _css(browser, '#node-counts tr[data-node="paid"] td')
    assert [td.text for td in row][:2] == ["paid", "2"]
    assert browser.execute_script("return window.__sameDocument;") == 42
