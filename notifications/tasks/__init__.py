"""Django's own tasks through this queue (Django 6.0+): `notifications.tasks.QueueBackend`.

    TASKS = {"default": {"BACKEND": "notifications.tasks.QueueBackend"}}

- `backend`: `QueueBackend`: `enqueue` inserts a queue row and its `TaskRun` in the caller's
  transaction; `get_result` reads them back as Django's `TaskResult`.
- `arguments`: what must survive JSON, refused at `enqueue`.
- `checks`: on Django 5.2, `manage.py check` says the backend needs Django 6 (W070); its
  OPTIONS are checked on Django 6 (E071).

`runtick` runs the tasks: the built-in `task` channel (`notifications.channels.task`).
"""

from notifications.tasks.arguments import TaskArgumentsError
from notifications.tasks.backend import QueueBackend

__all__ = ["QueueBackend", "TaskArgumentsError"]
