"""The inbox for Python code: a person's messages, their counts, and marking them.

- `reading`: `messages(recipient, state, category)` and `counts(recipient)`.
- `marking`: `mark(recipient, ids, state)`, with the states' rules (read implies seen,
  archived implies read).

`recipient` is the host's id for the person, as rows name it (`user:42`). Another
recipient's message ids change nothing and look like unknown ids.
"""

from notifications.inbox.marking import MARKS, mark
from notifications.inbox.reading import LISTS, counts, messages

__all__ = ["LISTS", "MARKS", "counts", "mark", "messages"]
