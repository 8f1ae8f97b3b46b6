"""The admin's first screen, in headless Chromium at 1366 x 900: rows first.

The charts are folded (one click opens them, and the list remembers it), each row says
what it is (a Subject column, long values cut and whole on hover), and at least five of
ten rows are on screen without scrolling. A row's change page shows the fieldsets of its
own channels, and a queued message's HTML alternative. tests/test_browser.py has the
browser fixture and the rest of the operator's path.
"""

from __future__ import annotations

import pytest

from notifications.models import Notification
from tests.support.queue_states import make
from tests.test_browser import ARTIFACTS, browser, click_and_wait, wait_for  # noqa: F401 - the browser fixture

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 1366, 900
LONG_SUBJECT = "Your invoice INV-2026-0042 for the quarter is ready: " + "a long subject, " * 8 + "the end"


@pytest.fixture
def console(browser, live_server, django_user_model):  # noqa: F811 - the fixture imported above
    """Logged in as an operator, the window at 1366 x 900."""
    django_user_model.objects.create_superuser("operator", "operator@example.com", "correct horse")
    browser.set_window_size(WIDTH, HEIGHT)
    browser.get(f"{live_server.url}/admin/")
    wait_for(browser, "#id_username").send_keys("operator")
    from selenium.webdriver.common.by import By

    browser.find_element(By.ID, "id_password").send_keys("correct horse")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, 'input[type="submit"]'))
    return browser


def rows_on_screen(driver) -> int:
    """The list's rows whose whole height is inside the window, not scrolled."""
    return driver.execute_script(
        """
        const bottom = window.innerHeight;
        return [...document.querySelectorAll('#result_list tbody tr')]
            .filter(tr => { const b = tr.getBoundingClientRect(); return b.top >= 0 && b.bottom <= bottom; }).length;
        """
    )


def charts_open(driver) -> bool:
    return driver.execute_script("const d = document.querySelector('details.nq-chart-fold'); return !!(d && d.open)")


@pytest.mark.django_db(transaction=True)
def test_rows_come_first_and_the_charts_open_on_one_click_remembered(console, live_server):
    from selenium.webdriver.common.by import By

    rows = [make("due", email_to=f"person{n}@example.com", subject=f"Reminder {n}") for n in range(9)]
    rows.append(make("scheduled", email_to="long@example.com", subject=LONG_SUBJECT))
    url = f"{live_server.url}/admin/notifications/notification/"

    console.get(url)
    wait_for(console, "#result_list")
    ARTIFACTS.mkdir(exist_ok=True)
    console.save_screenshot(str(ARTIFACTS / "admin-first-screen-1366x900.png"))
    assert console.execute_script("return window.scrollY") == 0
    assert rows_on_screen(console) >= 5
    assert not charts_open(console)  # folded by default

    # What each row is: its subject, cut at the column's edge, the whole on hover.
    header = console.find_element(By.CSS_SELECTOR, "#result_list thead th.column-subject_or_event")
    assert header.text.lower() == "subject or event / schedule"
    cell = console.find_element(
        By.CSS_SELECTOR, f'#result_list tr:has(input[value="{rows[-1].pk}"]) .field-subject_or_event .nq-clip'
    )
    assert cell.get_attribute("title") == LONG_SUBJECT
    assert console.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth", cell)  # cut

    # One click opens the charts; the next visit remembers it, and closing is remembered too.
    console.find_element(By.CSS_SELECTOR, "details.nq-chart-fold > summary").click()
    assert charts_open(console)
    assert console.find_element(By.CSS_SELECTOR, ".nq-chart figcaption").is_displayed()
    console.get(url)
    wait_for(console, "#result_list")
    assert charts_open(console)
    console.find_element(By.CSS_SELECTOR, "details.nq-chart-fold > summary").click()
    console.get(url)
    wait_for(console, "#result_list")
    assert not charts_open(console)

    # The section says what the app is, not "Notifications > Notifications".
    assert "Notification queue" in console.find_element(By.CSS_SELECTOR, ".breadcrumbs").text


@pytest.mark.django_db(transaction=True)
def test_a_change_page_shows_its_own_channels_fieldsets(console, live_server):
    from selenium.webdriver.common.by import By

    email = make("due", channels=["email"], email_to="ann@example.com", subject="Hello")
    hook = Notification.objects.create(
        channels=["webhook"], webhook_url="https://hooks.example.com/in", timezone="UTC", payload={}
    )

    def shown(row: Notification, field: str) -> bool:
        console.get(f"{live_server.url}/admin/notifications/notification/{row.pk}/change/")
        wait_for(console, "#content-main")
        return console.find_element(By.ID, f"id_{field}").is_displayed()

    # Its own channel's fields are open; the other channel's are folded (there to add it).
    assert shown(email, "email_to") and not shown(email, "webhook_url")
    assert shown(hook, "webhook_url") and not shown(hook, "email_to")
    page_height = console.execute_script("return document.documentElement.scrollHeight")
    assert page_height < 4000


@pytest.mark.django_db(transaction=True)
def test_a_queued_messages_html_alternative_is_shown_sandboxed(console, live_server, settings):
    from django.core.mail import EmailMultiAlternatives
    from selenium.webdriver.common.by import By

    settings.EMAIL_BACKEND = "notifications.mail.QueuedEmailBackend"
    message = EmailMultiAlternatives("Invoice 7", "Plain text", "Billing <billing@example.com>", ["ann@example.com"])
    message.attach_alternative('<h1 id="inv">Invoice 7</h1><script>parent.__ran = 1</script>', "text/html")
    message.send()
    row = Notification.objects.get(subject="Invoice 7")

    console.get(f"{live_server.url}/admin/notifications/notification/{row.pk}/change/")
    frame = wait_for(console, "iframe.nq-html-preview")
    assert frame.get_attribute("sandbox") == ""
    console.switch_to.frame(frame)
    assert console.find_element(By.ID, "inv").text == "Invoice 7"
    console.switch_to.default_content()
    assert console.execute_script("return window.__ran === undefined")  # its script did not run
    # The From field's help text reads whole: `<billing@example.com>` is text, not a tag.
    help_text = console.find_element(By.CSS_SELECTOR, "#id_from_email_helptext, .field-from_email .help").text
    assert "Billing <billing@example.com>" in help_text
