"""Apprise as a channel: Slack, Teams, Discord, Telegram, ntfy, SMS through Twilio and the
rest of Apprise's services (`pip install "django-notification-queue[apprise]"`).

    NOTIFICATIONS_CHANNELS = {
        "slack": {"BACKEND": "notifications.channels.apprise.AppriseChannel",
                  "OPTIONS": {"urls": "slack://T000/B000/XXXX/#ops"}},
        "sms": {"BACKEND": "notifications.channels.apprise.AppriseChannel",
                "OPTIONS": {"urls": "twilio://SID:TOKEN@+15550001111/{to}"}},
    }

See `channel.AppriseChannel` and docs/channels.md.
"""

from notifications.channels.apprise.channel import AppriseChannel

__all__ = ["AppriseChannel"]
