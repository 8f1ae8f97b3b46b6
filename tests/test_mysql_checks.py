"""The MariaDB/MySQL checks: a server too old for SKIP LOCKED (E026), and settings that
cost correctness or speed there (W007 isolation level, W008 `utf8`, W009 MyISAM).

The messages are asserted exactly, from the functions that build them; the live server
of the MariaDB pass is asserted clean, and made to hold a MyISAM table for real.
"""

from __future__ import annotations

import pytest
from django.core import checks
from django.db import connection

from notifications.checks.database import (
    check_mysql_server,
    check_mysql_settings,
    mysql_option_messages,
    mysql_server_messages,
)

only_mysql = pytest.mark.skipif("connection.vendor != 'mysql'", reason="MariaDB/MySQL: runs in the MariaDB pass")


def messages(found) -> list[tuple[str, str, str | None]]:
    return [(m.id, m.msg, m.hint) for m in found]


@pytest.mark.parametrize(
    ("server", "version"),
    [("MariaDB", (10, 5, 27)), ("MariaDB", (10, 4, 34)), ("MySQL", (8, 0, 10)), ("MySQL", (5, 7, 44))],
)
def test_a_server_without_skip_locked_is_an_error(server, version):
    shown = ".".join(map(str, version))
    needed = "10.6" if server == "MariaDB" else "8.0.11"
    assert messages(mysql_server_messages("default", server, version, {})) == [
        (
            "notifications.E026",
            f"The queue's database ('default') is {server} {shown}, which has no SELECT ... FOR UPDATE SKIP "
            "LOCKED: every tick fails at its claim.",
            f"Upgrade to {server} {needed} or later (MariaDB 10.6+, MySQL 8.0.11+), or use PostgreSQL.",
        )
    ]


@pytest.mark.parametrize(
    ("server", "version"), [("MariaDB", (10, 6, 0)), ("MariaDB", (11, 4, 2)), ("MySQL", (8, 0, 11))]
)
def test_servers_with_skip_locked_are_fine(server, version):
    assert mysql_server_messages("default", server, version, {}) == []


def test_a_non_transactional_table_is_a_warning():
    engines = {"notifications_notification": "MyISAM", "notifications_ratebucket": "Aria"}
    assert messages(mysql_server_messages("queue", "MariaDB", (10, 11, 6), engines)) == [
        (
            "notifications.W009",
            "Queue tables on 'queue' are in a non-transactional engine: notifications_notification (MyISAM), "
            "notifications_ratebucket (Aria). Without transactions and row locks two ticks claim the same rows "
            "and a failed write-back is half applied.",
            "Convert them: ALTER TABLE <table> ENGINE=InnoDB; and set default_storage_engine=InnoDB on the server.",
        )
    ]


W007_HINT = (
    'Remove "isolation_level" from DATABASES["default"]["OPTIONS"] (Django\'s default) or set it to "read committed".'
)


@pytest.mark.parametrize("level", ["repeatable read", "REPEATABLE READ", "serializable"])
def test_an_isolation_level_stronger_than_read_committed_is_a_warning(level):
    assert messages(mysql_option_messages("default", {"charset": "utf8mb4", "isolation_level": level})) == [
        (
            "notifications.W007",
            f"The queue's MariaDB/MySQL database ('default') runs at {level.upper()}: a keyed schedule() that "
            "loses a race inside a transaction cannot see the row that won, and claims and writes lock ranges "
            "of the due index (gap locks), so concurrent ticks wait and deadlock.",
            W007_HINT,
        )
    ]


@pytest.mark.parametrize("options", [{}, {"charset": "utf8"}, {"charset": "utf8mb3"}])
def test_the_three_byte_utf8_is_a_warning_and_it_is_django_s_default(options):
    charset = options.get("charset", "utf8")
    assert messages(mysql_option_messages("default", options)) == [
        (
            "notifications.W008",
            f"The queue's MariaDB/MySQL database ('default') is connected with the 3-byte {charset!r} character "
            "set: a subject, body or payload with an emoji or any character outside the Basic Multilingual Plane "
            "cannot be stored.",
            'Add "charset": "utf8mb4" to DATABASES["default"]["OPTIONS"], and convert the tables '
            "(ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4).",
        )
    ]


@pytest.mark.parametrize("level", [None, "read committed", "read uncommitted"])
def test_utf8mb4_at_read_committed_or_weaker_is_clean(level):
    assert mysql_option_messages("default", {"charset": "utf8mb4", "isolation_level": level}) == []


@pytest.mark.django_db
def test_the_checks_say_nothing_about_the_test_database():
    # SQLite and PostgreSQL: not MariaDB/MySQL; the MariaDB pass: utf8mb4, READ COMMITTED, InnoDB, 10.6+.
    assert check_mysql_settings() == []
    assert check_mysql_server(databases=["default"]) == []
    # Django's own model checks too: on MariaDB/MySQL the conditional key constraint, partial
    # indexes and long unique keys are settled (notifications.models.keys, notifications.databases).
    assert [m.id for m in checks.run_checks(databases=["default"], tags=[checks.Tags.models])] == []


@only_mysql
@pytest.mark.django_db(transaction=True)  # ALTER TABLE commits
def test_a_queue_table_turned_myisam_is_reported_by_the_live_check():
    table = "notifications_suppression"
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} ENGINE=MyISAM")
    try:
        found = check_mysql_server(databases=["default"])
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} ENGINE=InnoDB")
    assert [(m.id, m.msg.split(": ")[1].split(".")[0]) for m in found] == [("notifications.W009", f"{table} (MyISAM)")]


@only_mysql
def test_the_live_server_is_read_for_its_kind_and_version():
    assert connection.features.has_select_for_update_skip_locked
    server = "MariaDB" if connection.mysql_is_mariadb else "MySQL"
    assert mysql_server_messages("default", server, (10, 5) if server == "MariaDB" else (8, 0, 10), {})
