"""The notifications list on a phone (390 x 844) and on a laptop (1366 x 768), in headless Chromium.

On a phone: at least five short rows start above the fold, each id is whole (whatever its
digits), the subject column is there, an address wraps only after its "@" or a ".", and no
checkbox has an ellipsis beside it (a stray "."). On a laptop: a templated subject reads as
it goes out, and ids are whole too. The viewport is set exactly (Chromium's device emulation, a phone's overlay
scrollbars included). Screenshots land in test-artifacts/. tests/test_browser.py has the
browser fixture.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from notifications.api import schedule
from notifications.models import Notification, TickRun
from tests.test_browser import ARTIFACTS, browser, click_and_wait, wait_for  # noqa: F401 - the browser fixture

pytestmark = pytest.mark.slow

PHONE = (390, 844)
LAPTOP = (1366, 768)
FIRST_ID = 312_340  # six digits, as a queue that has sent for a while has them


def viewport(driver, width: int, height: int, *, phone: bool) -> None:
    """The page `width` x `height` CSS pixels, as a phone or a desktop shows it."""
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": phone}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def log_in(driver, live_server, django_user_model) -> None:
    django_user_model.objects.create_superuser("operator", "operator@example.com", "correct horse")
    driver.get(f"{live_server.url}/admin/")
    wait_for(driver, "#id_username").send_keys("operator")
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "id_password").send_keys("correct horse")
    click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, 'input[type="submit"]'))


def short_rows() -> list[Notification]:
    """Nine one-channel rows, a short subject each, ids of six digits; a tick ran 10 s ago."""
    now = timezone.now()
    names = ["grace", "alan", "ada", "barbara", "edsger", "donald", "margaret", "frances", "john"]
    for n, name in enumerate(names):
        row = schedule(
            channels=["email"],
            email_to=f"{name}@example.com",
            subject=f"Invoice {n + 1} is ready",
            body="-",
            fire_at=now + timedelta(minutes=n + 1),
        )
        Notification.objects.filter(pk=row.pk).update(id=FIRST_ID + n)
    TickRun.objects.create(
        started_at=now - timedelta(seconds=12), finished_at=now - timedelta(seconds=10), host="cron-1", pid=7
    )
    return list(Notification.objects.order_by("pk"))


# Each list row: whether its top is above the fold, its id cell, its subject cell, its recipient
# as the lines it wraps into, and whether its checkbox cell would draw an ellipsis.
MEASURE_ROWS = """
const fold = window.innerHeight;
function lines(el) {
  const found = [];
  let top = null;
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const box = range.getClientRects()[0];
      if (!box) continue;
      if (top === null || box.top > top + 2) { found.push(''); top = box.top; }
      found[found.length - 1] += node.data[i];
    }
  }
  return found;
}
return [...document.querySelectorAll('#result_list tbody tr')].map(tr => {
  const id = tr.querySelector('.field-id'), subject = tr.querySelector('.field-subject_or_event');
  const box = tr.querySelector('td.action-checkbox');
  return {
    above_fold: tr.getBoundingClientRect().top < fold,
    id: id.innerText.trim(),
    id_whole: id.scrollWidth <= id.clientWidth + 1,  // a cut id overflows by a digit and more
    subject: subject.innerText.trim(),
    subject_shown: getComputedStyle(subject).display !== 'none' && subject.getBoundingClientRect().width >= 60,
    recipient: lines(tr.querySelector('.field-sends_to .nq-clip')),
    ellipsis_by_checkbox: getComputedStyle(box).textOverflow === 'ellipsis' && box.scrollWidth > box.clientWidth,
  };
});
"""


@pytest.mark.django_db(transaction=True)
def test_on_a_phone_five_rows_are_above_the_fold_with_ids_subjects_and_addresses_whole(
    browser,  # noqa: F811 - the fixture imported above
    live_server,
    django_user_model,
):
    rows = short_rows()
    log_in(browser, live_server, django_user_model)
    viewport(browser, *PHONE, phone=True)

    browser.get(f"{live_server.url}/admin/notifications/notification/")
    wait_for(browser, "#result_list")
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"phone-notifications-{connection.vendor}.png"))
    measured = browser.execute_script(MEASURE_ROWS)

    assert browser.execute_script("return [window.innerWidth, window.innerHeight]") == list(PHONE)
    assert sum(row["above_fold"] for row in measured) >= 5, measured
    assert [row["id"] for row in measured] == [str(row.pk) for row in rows]
    assert all(row["id_whole"] for row in measured), measured  # no "3…"
    assert all(row["subject_shown"] for row in measured), measured
    assert measured[0]["subject"].startswith("Invoice 1 is ready")
    for row in measured:  # grace@ / example.com, never grace@ex / ample.co / m
        assert "".join(row["recipient"]).endswith("@example.com")
        assert all(line.endswith(("@", ".", " ")) for line in row["recipient"][:-1]), row["recipient"]
    assert not any(row["ellipsis_by_checkbox"] for row in measured), measured  # no stray "."
    assert browser.execute_script(
        "const r = document.querySelector('#changelist .results'); return r.scrollWidth <= r.clientWidth"
    ), "the list scrolls sideways on a phone"


@pytest.mark.django_db(transaction=True)
def test_on_a_laptop_a_templated_subject_reads_as_it_goes_out_and_ids_are_whole(
    browser,  # noqa: F811 - the fixture imported above
    live_server,
    django_user_model,
):
    from selenium.webdriver.common.by import By

    short_rows()
    row = schedule(
        channels=["email"],
        email_to="grace@example.com",
        subject="{{ count }} new comments for {{ name }}",
        body="-",
        payload={"count": 3, "name": "<b>Grace</b>"},
        fire_at=timezone.now() + timedelta(hours=1),
    )
    log_in(browser, live_server, django_user_model)
    viewport(browser, *LAPTOP, phone=False)

    browser.get(f"{live_server.url}/admin/notifications/notification/")
    cell = wait_for(browser, f'#result_list tr:has(input[value="{row.pk}"]) .field-subject_or_event .nq-clip')

    assert cell.text == "3 new comments for <b>Grace</b>"  # rendered, and the payload's markup as text
    assert cell.get_attribute("title") == "3 new comments for <b>Grace</b>"
    assert not browser.find_elements(By.CSS_SELECTOR, "#result_list .field-subject_or_event b")
    measured = browser.execute_script(MEASURE_ROWS)
    assert len(measured) == 10 and all(row["id_whole"] for row in measured), measured  # six digits, whole
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"laptop-notifications-{connection.vendor}.png"))
