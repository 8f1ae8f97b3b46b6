"""`TaskChannel`: runs the task a row names, under its own deadline (`deadline`), the tick's
leases (renewed while it runs) and budget."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import connections
from django.utils import timezone

from notifications.channels.base import Channel, ChannelResult, Firing
from notifications.channels.task import deadline, retention, running
from notifications.conf import Policy

if TYPE_CHECKING:
    from notifications.conf import TickSettings
    from notifications.models import Notification

logger = logging.getLogger("notifications.tick")


class TaskChannel(Channel):
    """The built-in `task` channel. A row's `channel_data["task"]` is `{"id": <TaskRun id>}`."""

    label = "Task"
    reaches_people = False  # no preference centre offers it
    offered = False  # only QueueBackend.enqueue writes it: no hint offers it to a site
    headline_is_generic = True

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.policy: Policy | None = None
        self.worker = f"{socket.gethostname()}:{os.getpid()}"[:64]

    @classmethod
    def open(cls, name: str, options: dict[str, Any], settings: TickSettings | None = None) -> Channel:
        channel = super().open(name, options, settings)
        assert isinstance(channel, TaskChannel)
        channel.policy = settings.policy if settings is not None else None
        own = deadline.deadline()  # TASKS' OPTIONS["TIMEOUT"]: a task's deadline is its own
        if own is not None:
            channel.timeout = own
        return channel

    def validate(self, data: Any) -> None:
        try:
            uuid.UUID(str(data["id"]))
        except (TypeError, KeyError, ValueError):
            raise ValidationError("A task row names its task as {'id': <a task id>}.") from None

    def headline(self, row: Notification) -> str:
        return row.subject  # the task's path

    def deliver(self, firing: Firing) -> ChannelResult:
        row = firing.notification
        policy = (self.policy or Policy.from_settings()).for_row(row.max_retries, row.backoff)
        worker = f"{self.worker}:{threading.current_thread().name}"[:64]
        try:
            return running.attempt(self.name, row, worker, last=running.last_attempt(row, policy.max_retries))
        finally:
            connections.close_all()  # this thread's own: a task may use the database, a worker keeps none

    def close(self) -> None:
        """At the tick's end, in its own thread: results past RESULT_RETENTION_DAYS go."""
        try:
            retention.prune(timezone.now())
        except Exception:
            logger.exception("task results: pruning failed")


__all__ = ["TaskChannel"]
