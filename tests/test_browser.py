"""The operator's path in a real browser: headless Chromium (Debian's package) driven by Selenium.

At 1366 x 768 with the admin's sidebar open, the notifications list, Delivery attempts and
Tick runs fit without scrolling sideways, and a dead letter's last error is on screen.
Log in, filter to dead letters, requeue one, read the message, purge one through the
confirmation page; open a dead letter's page, read what happened, press its *Requeue*
button and see the row due again. Screenshots of each list and of the change pages land in
test-artifacts/ (git-ignored). `.ci/run` installs chromium and chromium-driver, so CI
never skips this test; a machine without them skips it with the reason.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from notifications.models import DeliveryAttempt, Notification, State, TickRun
from tests.support.queue_states import SECRET, make

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1366,768",
]
WIDTH, HEIGHT = 1366, 768  # a common laptop screen: every list must fit it
HOSTILE = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 1">'
WAIT = 20  # seconds for a page; generous, the machine is shared

pytestmark = pytest.mark.slow


@pytest.fixture
def browser():
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        if os.environ.get("NOTIFICATIONS_REQUIRE_POSTGRES"):  # set by .ci/run: CI must run this test
            pytest.fail(f"{CHROMIUM} and {CHROMEDRIVER} are required in CI (.ci/run installs chromium chromium-driver)")
        pytest.skip(f"{CHROMIUM} or {CHROMEDRIVER} missing: apt-get install chromium chromium-driver to run it")
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in CHROMIUM_ARGS:
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def wait_for(driver, css: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def click_and_wait(driver, element) -> None:
    """Click something that loads a new page, and wait until it has."""
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    element.click()
    WebDriverWait(driver, WAIT).until(ec.staleness_of(element))
    wait_for(driver, "#content")


def run_action(driver, action: str, row: Notification) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.find_element(By.CSS_SELECTOR, f'input[name="_selected_action"][value="{row.pk}"]').click()
    Select(driver.find_element(By.NAME, "action")).select_by_value(action)
    click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, 'button[name="index"]'))


def listed(driver) -> set[int]:
    from selenium.webdriver.common.by import By

    boxes = driver.find_elements(By.CSS_SELECTOR, 'input[name="_selected_action"]')
    return {int(box.get_attribute("value")) for box in boxes}


def screenshot(driver, path: Path) -> None:
    """The whole page at the test's width, not just the window: grow the window to the document first."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WIDTH, max(HEIGHT, min(int(height) + 40, 6000)))
    driver.save_screenshot(str(path))
    driver.set_window_size(WIDTH, HEIGHT)


def sideways_overflow(driver) -> dict[str, int]:
    """How many pixels the page, and the list's own scroll box, would scroll sideways (0: none)."""
    return driver.execute_script(
        """
        const page = document.documentElement, results = document.querySelector('#changelist .results');
        return {page: page.scrollWidth - page.clientWidth,
                list: results ? results.scrollWidth - results.clientWidth : 0};
        """
    )


def assert_fits(driver, name: str) -> None:
    sidebar = driver.execute_script(
        "const s = document.getElementById('nav-sidebar'); return s && s.getBoundingClientRect().width"
    )
    assert sidebar and sidebar > 200, f"{name}: the navigation sidebar is not open"
    assert sideways_overflow(driver) == {"page": 0, "list": 0}, f"{name} scrolls sideways at {WIDTH} px"


def fully_visible(driver, element) -> bool:
    """On screen horizontally and not cut by its column (no ellipsis)."""
    return driver.execute_script(
        """
        const el = arguments[0], box = el.getBoundingClientRect();
        return box.left >= 0 && box.right <= document.documentElement.clientWidth && el.scrollWidth <= el.clientWidth;
        """,
        element,
    )


def assert_no_script_ran(driver) -> None:
    assert driver.execute_script("return window.__xss === undefined"), "hostile last_error ran as script"


def six_digit_id(row: Notification) -> Notification:
    """`row` moved to an id of six digits, as on a site that has queued for a while."""
    Notification.objects.filter(pk=row.pk).update(id=row.pk + 123456)
    return Notification.objects.get(pk=row.pk + 123456)


@pytest.mark.django_db(transaction=True)
def test_operator_requeues_and_purges_dead_letters(browser, live_server, django_user_model):
    from selenium.webdriver.common.by import By

    django_user_model.objects.create_superuser("operator", "operator@example.com", "correct horse")
    to_requeue = make("dead", email_to="requeue-me@example.com")
    to_purge = make("dead", email_to="purge-me@example.com")
    hostile = make("dead", email_to="hostile@example.com")
    Notification.objects.filter(pk=hostile.pk).update(last_error=f"webhook: HTTP 500 {HOSTILE}")
    partial = make("partial")
    recurring = make("scheduled", recurrence_rule="0 9 * * 1-5", timezone="Europe/Berlin")
    # A site's ids run to six digits: the list must show them whole and still every state.
    to_requeue, to_purge, hostile, partial, recurring = (
        six_digit_id(row) for row in (to_requeue, to_purge, hostile, partial, recurring)
    )
    now = timezone.now()
    DeliveryAttempt.objects.bulk_create(
        DeliveryAttempt(
            notification_id=recurring.pk,
            firing_id=recurring.firing_id,
            channel=channel,
            outcome=outcome,
            error=error,
            error_class="transient" if error else "",
            http_status=status,
            duration_ms=duration,
            attempted_at=now - timedelta(minutes=minutes),
        )
        for channel, outcome, error, status, duration, minutes in [
            ("email", "ok", "", None, 41, 30),
            ("webhook", "failed", "webhook: HTTP 503", 503, 212, 30),
            ("webhook", "ok", "", 200, 95, 29),
        ]
    )
    TickRun.objects.create(
        started_at=now - timedelta(seconds=20), finished_at=now - timedelta(seconds=18), host="cron-1", pid=77,
        claimed=3, succeeded=1, partial=1, dead_lettered=1,
    )  # fmt: skip
    ARTIFACTS.mkdir(exist_ok=True)
    vendor = connection.vendor

    # Log in.
    browser.get(f"{live_server.url}/admin/")
    wait_for(browser, "#id_username").send_keys("operator")
    browser.find_element(By.ID, "id_password").send_keys("correct horse")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, 'input[type="submit"]'))

    # Two clicks to the dead letters: the model, then the state filter.
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, "Notifications"))
    assert browser.find_element(By.CSS_SELECTOR, '.nq-count[data-state="dead"]').text == "3"
    assert "claimed=3 succeeded=1 partial=1" in browser.find_element(By.CSS_SELECTOR, ".nq-health").text
    assert listed(browser) == {to_requeue.pk, to_purge.pk, hostile.pk, partial.pk, recurring.pk}
    assert_fits(browser, "the notifications list")
    # A dead letter's state and why, side by side and whole on screen.
    reason = browser.find_element(By.XPATH, f'//input[@value="{to_requeue.pk}"]/ancestor::tr//span[@class="nq-status"]')
    assert reason.text == "Dead letter webhook: HTTP 410"
    assert fully_visible(browser, reason)
    screenshot(browser, ARTIFACTS / f"admin-notifications-{vendor}.png")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, '#changelist-filter a[href="?state=dead"]'))
    assert "state=dead" in browser.current_url
    assert listed(browser) == {to_requeue.pk, to_purge.pk, hostile.pk}
    assert_no_script_ran(browser)
    assert "<script>window.__xss" in browser.find_element(By.ID, "result_list").text  # shown as text
    assert_fits(browser, "the dead letters")

    # Requeue one and read the message.
    run_action(browser, "requeue", to_requeue)
    message = wait_for(browser, ".messagelist li").text
    assert message == "Requeued 1 notification."
    assert Notification.objects.get(pk=to_requeue.pk).state() == State.DUE
    assert listed(browser) == {to_purge.pk, hostile.pk}  # still filtered to dead letters

    # Purge one through the confirmation page.
    run_action(browser, "purge", to_purge)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Purge 1 notification?"
    assert "This notification will be deleted" in browser.find_element(By.ID, "content").text
    assert "purge-me@example.com" in browser.find_element(By.CSS_SELECTOR, ".nq-purge-list").text
    assert Notification.objects.filter(pk=to_purge.pk).exists()
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, 'input[type="submit"][value="Yes, I\u2019m sure"]'))
    message = wait_for(browser, ".messagelist li").text
    assert message == "Purged 1 notification. Its delivery history stays readable for 30 days."
    assert not Notification.objects.filter(pk=to_purge.pk).exists()
    assert listed(browser) == {hostile.pk}

    # The requeued row says why it was requeued until a delivery succeeds.
    browser.get(f"{live_server.url}/admin/notifications/notification/?state=due")
    requeued = wait_for(browser, f'#result_list tr:has(input[value="{to_requeue.pk}"]) .nq-status')
    assert requeued.text == "Due previous: webhook: HTTP 410"

    # The two other lists fit as well.
    for path, name in (("deliveryattempt", "delivery-attempts"), ("tickrun", "tick-runs")):
        browser.get(f"{live_server.url}/admin/notifications/{path}/")
        wait_for(browser, "#result_list")
        assert_fits(browser, name)
        screenshot(browser, ARTIFACTS / f"admin-{name}-{vendor}.png")

    # The change page: schedule preview, delivery history, no secret.
    browser.get(f"{live_server.url}/admin/notifications/notification/{recurring.pk}/change/")
    wait_for(browser, ".nq-upcoming")
    assert len(browser.find_elements(By.CSS_SELECTOR, ".nq-upcoming tbody tr")) == 5
    assert "webhook: HTTP 503" in browser.find_element(By.ID, "attempts-group").text
    assert SECRET not in browser.page_source
    assert browser.find_element(By.ID, "id_webhook_secret").get_attribute("value") == ""
    screenshot(browser, ARTIFACTS / f"admin-change-page-{vendor}.png")

    # A dead letter's own page says what happened and requeues it with one button.
    browser.get(f"{live_server.url}/admin/notifications/notification/{hostile.pk}/change/")
    status = wait_for(browser, ".nq-row-status").text
    assert status.startswith("Dead letter: the firing was given up ")
    assert "webhook: HTTP 500 <script>window.__xss" in status  # the error, shown as text
    assert_no_script_ran(browser)
    pressable = [b.text for b in browser.find_elements(By.CSS_SELECTOR, ".nq-row-actions button")]
    assert pressable == ["Requeue", "Purge…"]
    screenshot(browser, ARTIFACTS / f"admin-dead-letter-page-{vendor}.png")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "button.nq-act-requeue"))
    assert wait_for(browser, ".messagelist li").text == "Requeued 1 notification."
    assert browser.current_url.endswith(f"/admin/notifications/notification/{hostile.pk}/change/")
    status = browser.find_element(By.CSS_SELECTOR, ".nq-row-status").text
    assert status.startswith("Due: it came due ")
    assert "Before the requeue: webhook: HTTP 500 <script>" in status
    assert Notification.objects.get(pk=hostile.pk).state() == State.DUE
    assert [b.text for b in browser.find_elements(By.CSS_SELECTOR, ".nq-row-actions button")] == ["Pause", "Purge…"]

    for name in ("notifications", "delivery-attempts", "tick-runs", "change-page", "dead-letter-page"):
        assert (ARTIFACTS / f"admin-{name}-{vendor}.png").stat().st_size > 10_000


def set_width(driver, width: int, height: int = HEIGHT) -> None:
    """The window at `width` CSS pixels (a phone: 390).

    A resize lands asynchronously: wait for the page to see it before measuring the
    window's frame, or a loaded machine reads the old width and asks for a negative one."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.set_window_size(width, height)
    WebDriverWait(driver, WAIT).until(lambda d: inner_width(d) <= d.get_window_size()["width"])
    frame = driver.get_window_size()["width"] - inner_width(driver)
    if frame > 0:  # the window's frame: make the page itself `width` wide
        driver.set_window_size(width + frame, height)
        WebDriverWait(driver, WAIT).until(lambda d: inner_width(d) == width)


def inner_width(driver) -> int:
    return int(driver.execute_script("return window.innerWidth"))


def page_screenshot(driver, path: Path, width: int) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    set_width(driver, width, max(HEIGHT, min(int(height) + 40, 6000)))
    driver.save_screenshot(str(path))
    set_width(driver, width)


def within_cell(driver, element) -> bool:
    """Not cut by the table cell that holds it."""
    return driver.execute_script(
        """
        const el = arguments[0], cell = el.closest('td, th'), box = el.getBoundingClientRect();
        const edge = cell.getBoundingClientRect();
        return box.left >= edge.left - 0.5 && box.right <= edge.right + 0.5;
        """,
        element,
    )


def box_width(driver, element) -> float:
    return float(driver.execute_script("return arguments[0].getBoundingClientRect().width", element))


@pytest.mark.django_db(transaction=True)
def test_the_console_at_a_phones_width_and_a_laptops_with_its_charts(browser, live_server, django_user_model):
    """At 1366 px the header reads whole and the charts show; at 390 px a row's state and
    a target's key and last error are on screen, not squeezed to nothing."""
    from selenium.webdriver.common.by import By

    from notifications.models import Target

    django_user_model.objects.create_superuser("operator", "operator@example.com", "correct horse")
    now = timezone.now()
    dead = make("dead", email_to="dead@example.com")
    paused = make("paused", email_to="paused@example.com")
    overdue = make("retrying", email_to="late@example.com")
    Notification.objects.filter(pk=overdue.pk).update(next_fire_at=now - timedelta(minutes=6))
    Target.objects.create(
        key="hooks.example.com", state=Target.State.OPEN, failures=12, last_error="webhook: HTTP 503", opened_at=now
    )
    DeliveryAttempt.objects.bulk_create(
        DeliveryAttempt(
            notification_id=dead.pk, firing_id=dead.firing_id, channel="webhook", target="hooks.example.com",
            outcome="failed", error="webhook: HTTP 503", attempted_at=now - timedelta(minutes=m),
        )
        for m in (1, 2, 70, 200)
    )  # fmt: skip
    for m, claimed in ((1, 4), (2, 0), (3, 0), (65, 9)):
        TickRun.objects.create(
            started_at=now - timedelta(minutes=m, seconds=2), finished_at=now - timedelta(minutes=m), host="cron-1",
            pid=7, claimed=claimed, succeeded=claimed, retried=1 if claimed else 0,
        )  # fmt: skip
    ARTIFACTS.mkdir(exist_ok=True)
    vendor = connection.vendor

    browser.get(f"{live_server.url}/admin/")
    wait_for(browser, "#id_username").send_keys("operator")
    browser.find_element(By.ID, "id_password").send_keys("correct horse")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, 'input[type="submit"]'))

    # 1366 px: the list's header whole, times worded as the header counts, the charts drawn.
    browser.get(f"{live_server.url}/admin/notifications/notification/")
    wait_for(browser, "#result_list")
    assert_fits(browser, "the notifications list")
    header = browser.find_element(By.CSS_SELECTOR, "#result_list thead th.column-firing")
    assert fully_visible(browser, header.find_element(By.CSS_SELECTOR, "a, span, div"))
    firing = {
        row.pk: browser.find_element(
            By.CSS_SELECTOR, f'#result_list tr:has(input[value="{row.pk}"]) .field-firing'
        ).text
        for row in (paused, overdue)
    }
    assert firing[paused.pk].startswith("paused ")
    assert firing[overdue.pk].startswith("due ") and "ago" in firing[overdue.pk]
    assert browser.find_element(By.CSS_SELECTOR, '.nq-count[data-state="due_now"]').text == "1"  # the late retry
    browser.find_element(By.CSS_SELECTOR, "details.nq-chart-fold > summary").click()  # folded: rows first
    captions = [c.text for c in browser.find_elements(By.CSS_SELECTOR, ".nq-chart figcaption")]
    assert "Delivered: 13 in all, at most 9 per bar" in captions  # per hour
    assert "Delivered: 4 in all, at most 4 per bar" in captions  # per minute
    assert all(box_width(browser, svg) > 200 for svg in browser.find_elements(By.CSS_SELECTOR, ".nq-svg"))
    page_screenshot(browser, ARTIFACTS / f"console-notifications-1366-{vendor}.png", WIDTH)

    browser.get(f"{live_server.url}/admin/notifications/target/")
    wait_for(browser, "#result_list")
    assert_fits(browser, "the targets list")
    spark = browser.find_element(By.CSS_SELECTOR, ".field-failures_24h")
    assert spark.text == "4"  # the total beside the bars
    assert spark.find_element(By.CSS_SELECTOR, "svg").get_attribute("aria-label") == "4 failures in 24 h"
    page_screenshot(browser, ARTIFACTS / f"console-targets-1366-{vendor}.png", WIDTH)

    browser.get(f"{live_server.url}/admin/notifications/tickrun/?activity=busy")
    wait_for(browser, "#result_list")
    assert_fits(browser, "the tick runs")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")) == 2  # "nothing due" hidden
    assert any("Rows claimed: 13 in all" in c.text for c in browser.find_elements(By.CSS_SELECTOR, "figcaption"))
    page_screenshot(browser, ARTIFACTS / f"console-tick-runs-1366-{vendor}.png", WIDTH)

    # 390 px, a phone: the state and the target are there to read, without hovering.
    set_width(browser, 390)
    browser.get(f"{live_server.url}/admin/notifications/notification/")
    wait_for(browser, "#result_list")
    for row in (dead, paused, overdue):
        badge = browser.find_element(By.CSS_SELECTOR, f'#result_list tr:has(input[value="{row.pk}"]) .nq-state')
        assert box_width(browser, badge) >= 40 and within_cell(browser, badge), badge.text
    sends_to = browser.find_element(By.CSS_SELECTOR, f'#result_list tr:has(input[value="{dead.pk}"]) .field-sends_to')
    assert box_width(browser, sends_to) >= 80
    recipient = sends_to.find_element(By.CSS_SELECTOR, ".nq-clip")
    assert recipient.text == "dead@example.com" and fully_visible(browser, recipient)  # wrapped, not cut
    page_screenshot(browser, ARTIFACTS / f"console-notifications-390-{vendor}.png", 390)

    browser.get(f"{live_server.url}/admin/notifications/target/")
    wait_for(browser, "#result_list")
    key = browser.find_element(By.CSS_SELECTOR, "#result_list .field-key")
    error = browser.find_element(By.CSS_SELECTOR, "#result_list .field-last_error_short")
    assert box_width(browser, key) >= 100 and box_width(browser, error) >= 60 and fully_visible(browser, error)
    assert key.text == "hooks.example.com" and fully_visible(browser, key)
    assert box_width(browser, browser.find_element(By.CSS_SELECTOR, "#result_list .field-state")) >= 60
    page_screenshot(browser, ARTIFACTS / f"console-targets-390-{vendor}.png", 390)

    for name in ("notifications-1366", "targets-1366", "tick-runs-1366", "notifications-390", "targets-390"):
        assert (ARTIFACTS / f"console-{name}-{vendor}.png").stat().st_size > 5_000
