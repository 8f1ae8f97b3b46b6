"""PostgreSQL's "consuming input failed" (issue 45, finding 13): a connection the server
ends under a statement can raise an OperationalError with no SQLSTATE (libpq saw the
socket close before any error message). It is a lost connection by what it says, whether
or not the connection answers again by the time it is classified, so the store's step
is retried on a new one rather than ending the tick with exit 1."""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection

from notifications.store import reconnecting
from tests.support.killing import backend_id, kill

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]


@pytest.fixture
def killed_mid_statement():
    """The real error of statements whose backend `pg_terminate_backend` ended (psycopg's
    pipeline, as `executemany` runs, reads no SQLSTATE then)."""
    kill(backend_id(connection))
    with pytest.raises(OperationalError) as caught, connection.cursor() as cursor:
        cursor.executemany("SELECT %s", [(n,) for n in range(100)])
    yield caught.value
    connection.close()


def test_consuming_input_failed_has_no_code(killed_mid_statement):
    assert "consuming input failed" in str(killed_mid_statement)
    assert reconnecting.error_code(killed_mid_statement) is None


def test_it_is_a_lost_connection_even_once_the_connection_answers_again(killed_mid_statement):
    connection.close()
    connection.ensure_connection()  # another step of the tick reconnected meanwhile
    assert reconnecting.is_lost_connection(killed_mid_statement)
    assert reconnecting.retryable(killed_mid_statement)


def test_a_step_that_raised_it_is_run_again_on_a_new_connection(killed_mid_statement):
    sessions: list[int] = []

    def step() -> int:
        sessions.append(backend_id(connection))
        if len(sessions) == 1:
            raise killed_mid_statement
        return len(sessions)

    connection.close()
    assert reconnecting.retry(step, "test", delays=(0,)) == 2
    assert sessions[0] != sessions[1]
