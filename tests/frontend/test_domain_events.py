"""The seam between the domain and the pages: domain code publishes events
(``config/events.py``), the frontend subscribes in ``FrontendConfig.ready`` and broadcasts."""

import pytest
from django.db import transaction

from config import events
from frontend import broadcast


@pytest.fixture
def recorder():
    """A subscriber of every event that records what it got; unsubscribed afterwards."""
    got: list[tuple[str, dict]] = []
    handlers = {
        name: (lambda payload, name=name: got.append((name, payload))) for name in events.EVENTS
    }
    for name, handler in handlers.items():
        events.subscribe(name, handler)
    yield got
    for name, handler in handlers.items():
        events.unsubscribe(name, handler)


def test_the_frontend_subscribes_its_broadcasts_when_django_starts():
    assert broadcast.broadcast_round in events.subscribers(events.ROUND_FINISHED)
    assert broadcast.broadcast_telemetry in events.subscribers(events.TELEMETRY_UPDATED)
    assert broadcast.broadcast_budget_usage in events.subscribers(events.BUDGET_USAGE_CHANGED)


def test_subscribing_twice_keeps_one_subscription(recorder):
    handler = events.subscribers(events.ROUND_FINISHED)[-1]
    events.subscribe(events.ROUND_FINISHED, handler)
    events.publish(events.ROUND_FINISHED, {"round_id": 1})
    assert recorder.count((events.ROUND_FINISHED, {"round_id": 1})) == 1


def test_a_failing_subscriber_neither_fails_the_publisher_nor_starves_the_others(recorder):
    def broken(payload):
        raise RuntimeError("listener bug")

    events.subscribe(events.TELEMETRY_UPDATED, broken)
    try:
        results = events.publish(events.TELEMETRY_UPDATED, {"at": "x", "nodes": [], "gpus": []})
    finally:
        events.unsubscribe(events.TELEMETRY_UPDATED, broken)
    assert None in results
    assert (events.TELEMETRY_UPDATED, {"at": "x", "nodes": [], "gpus": []}) in recorder


def test_an_unknown_event_is_refused():
    with pytest.raises(ValueError, match="unknown event 'round.finshed'"):
        events.publish("round.finshed", {})
    with pytest.raises(ValueError):
        events.subscribe("nope", print)


@pytest.mark.django_db
def test_publish_on_commit_waits_for_the_commit_and_forgets_a_rollback(
    recorder, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            events.publish_on_commit(events.ROUND_FINISHED, {"round_id": 7})
            assert recorder == []
    assert recorder == [(events.ROUND_FINISHED, {"round_id": 7})]

    recorder.clear()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError):
            with transaction.atomic():
                events.publish_on_commit(events.ROUND_FINISHED, {"round_id": 8})
                raise RuntimeError("rolled back")
    assert callbacks == [] and recorder == []


def test_budget_messages_give_each_team_only_its_budgets():
    event = {
        "at": "2026-11-25T10:00:00+00:00",
        "budgets": [{"budget_id": 1, "team_id": 5}, {"budget_id": 2, "team_id": 6}],
    }
    messages = broadcast.budget_messages(event)
    assert sorted(messages) == sorted(
        [broadcast.ADMIN_GROUP, broadcast.team_group(5), broadcast.team_group(6)]
    )
    assert [b["budget_id"] for b in messages[broadcast.ADMIN_GROUP]["budgets"]] == [1, 2]
    assert [b["budget_id"] for b in messages[broadcast.team_group(5)]["budgets"]] == [1]
    assert broadcast.EVERYONE_GROUP not in messages
