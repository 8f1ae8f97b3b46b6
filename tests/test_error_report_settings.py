"""Apprise credentials in NOTIFICATIONS_CHANNELS stay out of Django's error reports (issue
45 #12): the site's default exception reporter filter (the DEBUG page, the mails to ADMINS)
masks OPTIONS["urls"] and shows the rest of the setting."""

from __future__ import annotations

import sys

from django.test import RequestFactory, override_settings
from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

TOKEN = "TIiajkdnlazkcOXrIdevi7"
CHANNELS = {
    "slack": {
        "BACKEND": "notifications.channels.apprise.AppriseChannel",
        "LABEL": "Team chat",
        "OPTIONS": {"urls": [f"slack://T1JJ3T3L2/A1BRTD4JD/{TOKEN}/#ops"]},
    },
    "sms": {
        "BACKEND": "notifications.channels.apprise.AppriseChannel",
        "OPTIONS": {"urls": f"twilio://AC1:{TOKEN}@+1555/{{to}}"},
    },
}


@override_settings(NOTIFICATIONS_CHANNELS=CHANNELS)
def test_the_safe_settings_mask_the_urls_and_keep_the_rest():
    shown = SafeExceptionReporterFilter().get_safe_settings()["NOTIFICATIONS_CHANNELS"]
    assert TOKEN not in repr(shown)
    assert shown["slack"]["BACKEND"] == CHANNELS["slack"]["BACKEND"]
    assert shown["slack"]["LABEL"] == "Team chat"
    assert shown["slack"]["OPTIONS"]["urls"] == SafeExceptionReporterFilter.cleansed_substitute


@override_settings(NOTIFICATIONS_CHANNELS=CHANNELS, DEBUG=True)
def test_the_debug_page_and_the_admins_mail_hide_the_credentials():
    request = RequestFactory().get("/broken/")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        reporter = ExceptionReporter(request, *sys.exc_info())
    html, text = reporter.get_traceback_html(), reporter.get_traceback_text()
    assert "NOTIFICATIONS_CHANNELS" in html and "NOTIFICATIONS_CHANNELS" in text
    assert "AppriseChannel" in text
    assert TOKEN not in html and TOKEN not in text
