"""Settings for `manage.py runtick` processes that tests start against their database.

The test passes the database it is using in NOTIFICATIONS_TEST_DATABASE (JSON of a
DATABASES entry): the one place the tests read the environment, because a child
process cannot otherwise know the test database's name.
"""

import json
import os

from tests.settings import *  # noqa: F403

DATABASES = {"default": json.loads(os.environ["NOTIFICATIONS_TEST_DATABASE"])}
for _name, _value in json.loads(os.environ.get("NOTIFICATIONS_TEST_SETTINGS", "{}")).items():
    globals()[_name] = _value
