"""A person's inbox in Chromium (Debian's package, driven by Selenium) at a laptop's width
and a phone's: the bell on a page of the site (under CSP script-src 'self') counts a message
that arrives through a tick without a reload, and the inbox page is read, marked read,
archived and marked all read by keyboard alone, with nothing hostile run as script.
"""

from __future__ import annotations

import pytest
from django.test import Client

from notifications.api import run_tick, schedule
from notifications.models import InboxMessage
from tests.support.inbox_messages import add_message, recipient_of
from tests.test_browser import ARTIFACTS, HOSTILE, WAIT, assert_no_script_ran, browser, wait_for  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTHS = {"laptop": (1366, 768), "phone": (390, 844)}


@pytest.fixture
def signed_in(browser, live_server, django_user_model):  # noqa: F811 - the fixture of tests.test_browser
    """Chromium with alice's session (she is no staff: the inbox is for everyone signed in)."""
    alice = django_user_model.objects.create_user("alice", password="pw")
    client = Client()
    client.force_login(alice)
    browser.get(f"{live_server.url}/favicon.ico")  # a page of the site, to set its cookie on
    browser.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value, "path": "/"})
    return browser, alice


def until(driver, condition, message: str):
    """Wait for `condition`, across the page loads a form's POST and its redirect cause."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    def settled(d):
        try:
            return condition(d)
        except WebDriverException as exc:
            # An element read while the POST's redirect replaces the page: Chromium says so
            # as an "unknown error", not as a stale element. Read it again on the new page.
            if "does not belong to the document" in (exc.msg or ""):
                return False
            raise

    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, WAIT, ignored_exceptions=ignored).until(settled, message)


def no_sideways_scroll(driver) -> bool:
    return driver.execute_script("return document.documentElement.scrollWidth <= document.documentElement.clientWidth")


def focus_by_tab(driver, css: str, limit: int = 60):
    """Press Tab until the element matching `css` has the focus (the keyboard's way there)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    target = driver.find_element(By.CSS_SELECTOR, css)
    body = driver.find_element(By.TAG_NAME, "body")
    for _ in range(limit):
        if driver.switch_to.active_element == target:
            return target
        body.send_keys(Keys.TAB) if _ == 0 else driver.switch_to.active_element.send_keys(Keys.TAB)
    raise AssertionError(f"Tab never reached {css}")


@pytest.mark.parametrize("size", WIDTHS)
def test_the_bell_counts_a_message_that_arrives(signed_in, live_server, settings, size):
    from selenium.webdriver.common.by import By

    driver, alice = signed_in
    driver.set_window_size(*WIDTHS[size])
    settings.NOTIFICATIONS_INBOX_POLL_SECONDS = 1
    add_message(recipient_of(alice), "already here")
    add_message("user:someone-else", "not alice's")

    driver.get(f"{live_server.url}/demo/")
    count = wait_for(driver, ".nq-inbox-badge .nq-inbox-unread")
    assert count.text == "1"
    link = driver.find_element(By.CSS_SELECTOR, ".nq-inbox-badge").get_attribute("href")
    assert link.endswith("/notifications/inbox/")
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, ".nq-inbox-badge").get_attribute("data-nq-started"),
          "the badge's script did not start (CSP script-src 'self')")  # fmt: skip

    schedule(channels=["inbox"], recipient=recipient_of(alice), subject="Your order shipped", body="Track it.")
    run_tick()
    assert InboxMessage.objects.filter(recipient=recipient_of(alice)).count() == 2
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, ".nq-inbox-unread").text == "2",
          "the bell did not count the new message")  # fmt: skip
    assert no_sideways_scroll(driver)
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"inbox-bell-{size}.png"))


@pytest.mark.parametrize("size", WIDTHS)
def test_the_inbox_by_keyboard(signed_in, live_server, size):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver, alice = signed_in
    driver.set_window_size(*WIDTHS[size])
    me = recipient_of(alice)
    first = add_message(me, "First message", body="Read me.", url="/orders/7")
    second = add_message(me, HOSTILE, body=HOSTILE, url="javascript:window.__xss=1")
    third = add_message(me, "Third message")

    driver.get(f"{live_server.url}/notifications/inbox/")
    wait_for(driver, ".nq-inbox-messages")
    assert_no_script_ran(driver)
    assert no_sideways_scroll(driver)
    assert driver.find_element(By.CSS_SELECTOR, ".nq-inbox-counts").text == "3 unread of 3"
    assert driver.find_elements(By.CSS_SELECTOR, f"#message-{second.id} h2 a") == []  # not a link
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"inbox-page-{size}.png"))

    # Mark the first read: Tab to its button, Enter.
    focus_by_tab(driver, f'#message-{first.id} button[value="read"]').send_keys(Keys.ENTER)
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, ".nq-inbox-counts").text == "2 unread of 3",
          "marking read by keyboard did not take")  # fmt: skip
    first.refresh_from_db()
    assert first.read_at is not None

    # Archive the hostile one: Tab, then Space.
    focus_by_tab(driver, f'#message-{second.id} button[value="archived"]').send_keys(Keys.SPACE)
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, ".nq-inbox-counts").text == "1 unread of 2",
          "archiving by keyboard did not take")  # fmt: skip
    second.refresh_from_db()
    assert second.archived_at is not None

    # Mark all read.
    focus_by_tab(driver, '.nq-inbox-all button[value="read"]').send_keys(Keys.ENTER)
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, ".nq-inbox-counts").text == "0 unread of 2",
          "mark all read by keyboard did not take")  # fmt: skip
    third.refresh_from_db()
    assert third.read_at is not None
    assert_no_script_ran(driver)
    assert no_sideways_scroll(driver)


@pytest.fixture
def signed_in_staff(browser, live_server, django_user_model):  # noqa: F811 - the fixture of tests.test_browser
    """Chromium with the session of an operator (staff, signed in to the admin)."""
    operator = django_user_model.objects.create_user("operator", password="pw", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(operator)
    browser.get(f"{live_server.url}/favicon.ico")
    browser.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value, "path": "/"})
    return browser, operator


@pytest.mark.parametrize("size", WIDTHS)
def test_the_bell_in_the_admin_header_counts_a_message_that_arrives(signed_in_staff, live_server, settings, size):
    """The demo's admin/base_site.html adds `{% inbox_badge %}` to the user links: the same
    tag and script as any page, in the admin's header, on screen at both widths."""
    from selenium.webdriver.common.by import By

    driver, operator = signed_in_staff
    driver.set_window_size(*WIDTHS[size])
    settings.NOTIFICATIONS_INBOX_POLL_SECONDS = 1
    add_message(recipient_of(operator), "already here")

    driver.get(f"{live_server.url}/admin/")
    count = wait_for(driver, "#user-tools .nq-inbox-badge .nq-inbox-unread")
    assert count.text == "1"
    bell = driver.find_element(By.CSS_SELECTOR, "#user-tools .nq-inbox-badge")
    assert bell.get_attribute("href").endswith("/notifications/inbox/")
    assert len(driver.find_elements(By.CSS_SELECTOR, ".nq-inbox-badge")) == 1  # one bell, not a copy
    scripts = driver.find_elements(By.CSS_SELECTOR, 'script[src$="notifications/inbox-badge.js"]')
    assert len(scripts) == 1
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, ".nq-inbox-badge").get_attribute("data-nq-started"),
          "the badge's script did not start in the admin")  # fmt: skip
    assert driver.execute_script(
        "const box = arguments[0].getBoundingClientRect();"
        "return box.width > 0 && box.left >= 0 && box.right <= document.documentElement.clientWidth",
        bell,
    ), "the bell is not on screen"

    schedule(channels=["inbox"], recipient=recipient_of(operator), subject="A dead letter", body="Look at it.")
    run_tick()
    until(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#user-tools .nq-inbox-unread").text == "2",
          "the bell in the admin did not count the new message")  # fmt: skip
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"admin-bell-{size}.png"))
