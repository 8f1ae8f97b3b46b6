"""The site channel docs/channels.md writes from scratch: a Slack incoming webhook with requests.

Kept here, word for word as the docs show it, so the suite proves the example works.
"""

from __future__ import annotations

from typing import Any

import requests
from django.core.exceptions import ValidationError

from notifications.channels import Channel, ChannelResult, ErrorClass, Firing


class SlackWebhookChannel(Channel):
    """Posts a firing's subject and body to a Slack incoming webhook.

    OPTIONS: {"url": "https://hooks.slack.com/services/T000/B000/XXXX"}
    channel_data: {"slack": {}} or {"slack": {"mention": "U024BE7LH"}}
    """

    def __init__(self, *, url: str, **options: Any) -> None:
        super().__init__(url=url, **options)
        self.url = url
        self.session = requests.Session()  # one per tick: keep-alive across its rows

    def validate(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise ValidationError('Give an object, e.g. {} or {"mention": "U024BE7LH"}.')
        mention = data.get("mention")
        if mention is not None and (not isinstance(mention, str) or not mention.isalnum()):
            raise ValidationError("'mention' is a Slack user id such as U024BE7LH.")

    def deliver(self, firing: Firing) -> ChannelResult:
        row = firing.notification
        mention = row.channel_data[self.name].get("mention")
        text = f"*{row.subject}*\n{row.body}" + (f" <@{mention}>" if mention else "")
        try:
            response = self.session.post(self.url, json={"text": text}, timeout=self.timeout, allow_redirects=False)
        except requests.Timeout:
            return self.failure(f"timed out after {self.timeout:g}s", ErrorClass.TRANSIENT)
        except requests.RequestException as exc:
            return self.failure(type(exc).__name__, ErrorClass.TRANSIENT)  # never the URL: it holds the token
        if response.status_code == 200:
            return ChannelResult(self.name)
        # Slack says why in a word (`no_service`, `invalid_payload`); 4xx other than 429 will not change.
        permanent = 400 <= response.status_code < 500 and response.status_code != 429
        reason = response.text[:100] or response.reason
        return self.failure(
            f"HTTP {response.status_code} {reason}", ErrorClass.PERMANENT if permanent else ErrorClass.TRANSIENT
        )

    def failure(self, error: str, error_class: ErrorClass) -> ChannelResult:
        return ChannelResult(self.name, error=f"{self.name}: {error}", error_class=error_class)

    def close(self) -> None:
        self.session.close()
