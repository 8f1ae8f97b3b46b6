"""Every exception the app defines is a NotificationsError, and keeps its built-in base."""

from __future__ import annotations

import pytest

from notifications.channels.email.channel import AttachmentMissing
from notifications.channels.http.guard import BlockedAddress, ResolutionTimeout
from notifications.content.templating import TemplateRenderError
from notifications.exceptions import NotificationsError
from notifications.receiving import InvalidWebhook
from notifications.rules.schedule import InvalidRule, validate_rule


@pytest.mark.parametrize(
    "cls", [AttachmentMissing, BlockedAddress, ResolutionTimeout, TemplateRenderError, InvalidWebhook, InvalidRule]
)
def test_one_base_catches_them_all(cls):
    assert issubclass(cls, NotificationsError)


def test_the_old_bases_still_catch():
    assert issubclass(InvalidRule, ValueError)
    assert issubclass(ResolutionTimeout, TimeoutError)
    with pytest.raises(NotificationsError):
        validate_rule("not a rule")
