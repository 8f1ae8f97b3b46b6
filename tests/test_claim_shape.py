"""The claim's selection is compiled once per shape and reused with the clock's new values."""

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.store import claims


@pytest.mark.django_db
@pytest.mark.parametrize("lock,queues", [(False, ()), (True, ()), (False, ("mail", "hooks"))])
def test_the_reused_selection_is_the_one_the_orm_compiles_now(lock, queues):
    claims._shapes.clear()
    for now in (timezone.now(), timezone.now() + timedelta(days=400, microseconds=7)):
        assert claims.selection(now, 77, lock=lock, queues=queues) == claims._selection(
            now, 77, lock=lock, queues=queues
        )
    assert all(claims._shapes.values()), "the shape could not be reused"


@pytest.mark.django_db
def test_a_changed_setting_is_in_the_next_selection(settings):
    now = timezone.now()
    claims.selection(now, 10)
    settings.NOTIFICATIONS_LOW_PRIORITY_AGING = 7
    assert claims.selection(now, 10) == claims._selection(now, 10, lock=False, queues=())
