"""The preference centre: the signed link opens the recipient's choices, categories by
label x channels, required ones locked; its CSRF-protected form saves them. Used in
Chromium at 390 px by keyboard alone, and checked at 1366 px."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client, override_settings

from notifications.api import preferences, set_preference
from notifications.content import links
from notifications.models import Preference
from tests.test_browser import browser, wait_for  # noqa: F401 - the fixture, shared

CATEGORIES = {
    "billing": {"label": "Invoices", "default": "required"},
    "news": {"label": "Product news", "default": "on"},
    "tips": {"label": "Tips & tricks", "default": "off"},
}
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(autouse=True)
def categories():
    with override_settings(NOTIFICATIONS_CATEGORIES=CATEGORIES, NOTIFICATIONS_PUBLIC_URL="https://example.com"):
        yield


def path_for(recipient: str) -> str:
    return links.preferences_url(recipient).removeprefix("https://example.com")


@pytest.mark.django_db
def test_the_page_lists_categories_by_label_and_channels_with_required_ones_locked():
    set_preference("user:1", "news", False, channel="webhook")
    response = Client().get(path_for("user:1"))

    assert response.status_code == 200
    html = response.content.decode()
    assert "Invoices" in html and "Product news" in html and "Tips &amp; tricks" in html
    boxes = re.findall(r"<input type=\"checkbox\"[^>]*>", html)
    assert len(boxes) == 6  # three categories x email, webhook
    billing = [b for b in boxes if 'name="billing:' in b]
    assert all("disabled" in b and "checked" in b for b in billing)
    assert "checked" not in next(b for b in boxes if 'name="news:webhook"' in b)
    assert "checked" in next(b for b in boxes if 'name="news:email"' in b)
    for box in boxes:  # every checkbox has its <label>
        (box_id,) = re.findall(r'id="([^"]+)"', box)
        assert f'<label for="{box_id}">' in html
    assert "always sent" in html
    assert "user:1" not in html  # the page names nobody


@pytest.mark.django_db
def test_the_form_needs_its_csrf_token():
    client = Client(enforce_csrf_checks=True)
    response = client.post(path_for("user:1"), {"news:webhook": "on"})
    assert response.status_code == 403
    assert not Preference.objects.exists()


@pytest.mark.django_db
def test_saving_stores_what_changed_and_required_ones_stay_on():
    client = Client()
    response = client.post(path_for("user:1"), {"news:email": "on", "tips:webhook": "on", "billing:email": ""})
    assert response.status_code == 303
    assert preferences("user:1") == {
        "billing": {"email": True, "webhook": True},
        "news": {"email": True, "webhook": False},
        "tips": {"email": False, "webhook": True},
    }
    assert Preference.objects.count() == 2  # only what differs from the defaults
    assert "saved" in client.get(response["Location"]).content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("token", ["x", "unsubscribe"])
def test_a_forged_link_or_an_unsubscribe_token_opens_nothing(token):
    if token == "unsubscribe":
        token = links.unsubscribe_token("user:1", "news")
    assert Client().get(f"/notifications/preferences/{token}/").status_code == 404
    assert Client().post(f"/notifications/preferences/{token}/", {}).status_code == 404


SITE_CHANNELS = {
    "sms": {"BACKEND": "tests.support.site_channels.SMSChannel", "LABEL": "Text message"},
    "push_note": {"BACKEND": "tests.support.site_channels.SMSChannel"},
    "filelog": {"BACKEND": "tests.support.site_channels.SMSChannel", "LABEL": "File log"},
}
REACHING = {
    "billing": {"label": "Invoices", "default": "required", "channels": ["email"]},
    "news": {"label": "Product news", "default": "on", "channels": ["email", "sms", "push_note"]},
}


def offered(html: str) -> dict[str, list[str]]:
    """category key -> the labels of the channels the page offers for it, in order."""
    found: dict[str, list[str]] = {}
    for box in re.findall(r"<input type=\"checkbox\"[^>]*>", html):
        (name,) = re.findall(r'name="([^"]+)"', box)
        (box_id,) = re.findall(r'id="([^"]+)"', box)
        (label,) = re.findall(rf'<label for="{box_id}">([^<]+)<', html)
        found.setdefault(name.split(":")[0], []).append(label)
    return found


@pytest.mark.django_db
def test_channels_are_offered_by_the_label_a_person_reads_and_only_where_a_category_reaches_them():
    with override_settings(NOTIFICATIONS_CHANNELS=SITE_CHANNELS, NOTIFICATIONS_CATEGORIES=REACHING):
        html = Client().get(path_for("user:1")).content.decode()

    assert offered(html) == {"billing": ["Email"], "news": ["Email", "Text message", "Push note"]}
    assert "Webhook" not in html and "File log" not in html and "Filelog" not in html  # no category reaches them
    assert "sms" not in re.sub(r'name="[^"]+"', "", html)  # internal names stay in the form's field names


@pytest.mark.django_db
def test_saving_touches_only_the_channels_offered():
    with override_settings(NOTIFICATIONS_CHANNELS=SITE_CHANNELS, NOTIFICATIONS_CATEGORIES=REACHING):
        response = Client().post(path_for("user:1"), {"news:email": "on", "news:filelog": "on", "news:webhook": ""})
        assert response.status_code == 303
        assert set(Preference.objects.values_list("channel", flat=True)) == {"sms", "push_note"}
        assert preferences("user:1")["news"]["webhook"] is True  # not offered: left at the default


def test_built_in_labels_are_translated_and_a_site_label_is_checked():
    from django.core import checks
    from django.utils.functional import Promise

    from notifications.channels import registry

    for name in ("email", "webhook"):
        cls = registry.channel_class(registry.entries()[name])
        assert isinstance(cls.label, Promise)  # gettext_lazy: read in the page's language
    bad = {"sms": {"BACKEND": "tests.support.site_channels.SMSChannel", "LABEL": ""}}
    with override_settings(NOTIFICATIONS_CHANNELS=bad):
        (error,) = [m for m in checks.run_checks() if m.id == "notifications.E033"]
    assert "'sms': LABEL must be the words a person reads for the channel" in error.msg


@pytest.mark.parametrize(
    ("channels", "expected"),
    [(["email", "sms"], []), (["email", "smss"], ["notifications.W040"]), ("email", ["notifications.E040"])],
)
def test_a_categorys_channels_are_checked(channels, expected):
    from django.core import checks

    value = {"news": {"label": "Product news", "channels": channels}}
    with override_settings(NOTIFICATIONS_CHANNELS=SITE_CHANNELS, NOTIFICATIONS_CATEGORIES=value):
        found = [m.id for m in checks.run_checks() if m.id in ("notifications.E040", "notifications.W040")]
    assert found == expected


# --- in Chromium ---------------------------------------------------------------------------


def overflow(driver) -> int:
    return driver.execute_script("const d = document.documentElement; return d.scrollWidth - d.clientWidth")


def set_width(driver, width: int, height: int) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_recipient_uses_the_centre_by_keyboard_at_390_px(browser, live_server):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    set_width(browser, 390, 844)
    browser.get(live_server.url + path_for("user:1"))
    wait_for(browser, "form")
    assert browser.execute_script("return document.documentElement.clientWidth") == 390
    assert overflow(browser) == 0
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "preference-centre-390.png"))
    # Every checkbox is big enough to hit, and its label is on screen beside it.
    for box in browser.find_elements(By.CSS_SELECTOR, "input[type=checkbox]"):
        label = browser.find_element(By.CSS_SELECTOR, f'label[for="{box.get_attribute("id")}"]')
        assert label.is_displayed() and box.size["width"] >= 16

    keys = ActionChains(browser)

    def tab_to(name: str) -> None:
        for _ in range(20):
            keys.send_keys(Keys.TAB).perform()
            if browser.execute_script("return document.activeElement.name || document.activeElement.type") == name:
                return
        raise AssertionError(f"Tab never reached {name}")

    tab_to("news:email")  # the required ones are skipped: locked
    keys.send_keys(Keys.SPACE).perform()  # off
    tab_to("tips:webhook")
    keys.send_keys(Keys.SPACE).perform()  # on
    tab_to("submit")
    keys.send_keys(Keys.ENTER).perform()
    wait_for(browser, "[role=status]")

    assert "saved" in browser.find_element(By.CSS_SELECTOR, "[role=status]").text
    assert preferences("user:1") == {
        "billing": {"email": True, "webhook": True},
        "news": {"email": False, "webhook": True},
        "tips": {"email": False, "webhook": True},
    }
    assert not browser.find_element(By.NAME, "news:email").is_selected()

    set_width(browser, 1366, 768)
    browser.refresh()
    wait_for(browser, "form")
    assert overflow(browser) == 0
    browser.save_screenshot(str(ARTIFACTS / "preference-centre-1366.png"))
