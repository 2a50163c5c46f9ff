"""States change only through transitions.py: one Event each, illegal ones refused,
broadcast on commit."""

from __future__ import annotations

import asyncio

import pytest
from channels_redis.core import RedisChannelLayer
from django.conf import settings
from django.db import transaction

from deployments.choices import CopyState, DeploymentState
from deployments.guard import StateChangeRefused
from deployments.models import Copy, Deployment, Event
from deployments.transitions import (
    DEPLOYMENT_TRANSITIONS,
    IllegalTransition,
    Move,
    move_copies,
    move_copy,
    move_deployment,
    move_deployments,
)
from tests import factories

ALL_DEPLOYMENT_MOVES = [
    (a, b) for a, targets in sorted(DEPLOYMENT_TRANSITIONS.items()) for b in sorted(targets)
]
ILLEGAL_DEPLOYMENT_MOVES = [
    (a, b)
    for a in DeploymentState.values
    for b in DeploymentState.values
    if b not in DEPLOYMENT_TRANSITIONS.get(a, ()) and a != b
]


def path_to(state: str) -> list[str]:
    """A legal route from REQUESTED to `state` (breadth-first over the table)."""
    routes = {DeploymentState.REQUESTED.value: [DeploymentState.REQUESTED.value]}
    queue = [DeploymentState.REQUESTED.value]
    while queue:
        current = queue.pop(0)
        for nxt in sorted(DEPLOYMENT_TRANSITIONS[current]):
            if nxt not in routes:
                routes[nxt] = routes[current] + [nxt]
                queue.append(nxt)
    return routes[state]


def deployment_in(state: str, team) -> Deployment:
    deployment = factories.make_deployment(f"d-{state.lower().replace('_', '-')}", team)
    for step in path_to(state)[1:]:
        move_deployment(deployment.pk, step, message="setting up")
    return Deployment.objects.get(pk=deployment.pk)


@pytest.mark.django_db
@pytest.mark.parametrize("before,after", ALL_DEPLOYMENT_MOVES)
def test_each_allowed_deployment_transition_writes_exactly_one_event(red, bob, before, after):
    deployment = deployment_in(before, red)
    events_before = Event.objects.count()
    move_deployment(deployment.pk, after, message="because", actor=bob)
    assert Deployment.objects.get(pk=deployment.pk).state == after
    assert Event.objects.count() == events_before + 1
    event = Event.objects.latest("id")
    assert (event.from_state, event.to_state, event.message, event.actor_name) == (
        before,
        after,
        "because",
        "bob",
    )


@pytest.mark.django_db
@pytest.mark.parametrize("before,after", ILLEGAL_DEPLOYMENT_MOVES[::3])
def test_an_illegal_deployment_transition_raises_and_changes_nothing(red, before, after):
    deployment = deployment_in(before, red)
    events_before = Event.objects.count()
    with pytest.raises(IllegalTransition, match=f"cannot go from {before} to {after}"):
        move_deployment(deployment.pk, after, message="nope")
    reloaded = Deployment.objects.get(pk=deployment.pk)
    assert (reloaded.state, reloaded.last_message) == (before, deployment.last_message)
    assert Event.objects.count() == events_before


@pytest.mark.django_db
def test_every_copy_transition_in_the_table_is_legal_and_recorded(red):
    deployment = factories.make_deployment("copies", red)
    copy = factories.make_copy(deployment)
    route = [
        CopyState.PENDING,
        CopyState.COPYING_FILES,
        CopyState.STARTING,
        CopyState.READY,
        CopyState.STOPPING,
        CopyState.STOPPED,
    ]
    for step in route:
        move_copy(copy.pk, step, message=f"to {step}")
    assert Copy.objects.get(pk=copy.pk).state == CopyState.STOPPED
    assert Event.objects.filter(copy=copy).count() == len(route)
    with pytest.raises(IllegalTransition):
        move_copy(copy.pk, CopyState.READY)


@pytest.mark.django_db
def test_save_with_a_new_state_is_refused(red):
    deployment = factories.make_deployment("guarded", red)
    deployment.state = DeploymentState.DEPLOYED
    with pytest.raises(StateChangeRefused):
        deployment.save()
    assert Deployment.objects.get(pk=deployment.pk).state == DeploymentState.REQUESTED


@pytest.mark.django_db
def test_queryset_update_of_state_is_refused(red):
    factories.make_deployment("guarded", red)
    with pytest.raises(StateChangeRefused):
        Deployment.objects.filter(name="guarded").update(state=DeploymentState.DEPLOYED)
    with pytest.raises(StateChangeRefused):
        Copy.objects.all().update(state=CopyState.READY)
    assert Deployment.objects.get(name="guarded").state == DeploymentState.REQUESTED


@pytest.mark.django_db
def test_bulk_update_of_state_is_refused(red):
    deployment = factories.make_deployment("guarded", red)
    deployment.state = DeploymentState.FAILED
    with pytest.raises(StateChangeRefused):
        Deployment.objects.bulk_update([deployment], ["state"])
    assert Deployment.objects.get(pk=deployment.pk).state == DeploymentState.REQUESTED


@pytest.mark.django_db
def test_creating_a_deployment_in_a_later_state_is_refused(red):
    with pytest.raises(StateChangeRefused):
        factories.make_deployment("born-deployed", red, state=DeploymentState.DEPLOYED)
    assert not Deployment.objects.filter(name="born-deployed").exists()


@pytest.mark.django_db
def test_saving_other_fields_keeps_working(red):
    deployment = factories.make_deployment("plain-save", red)
    deployment.chat_name = "qwen"
    deployment.save()
    assert Deployment.objects.get(pk=deployment.pk).chat_name == "qwen"


@pytest.mark.django_db
def test_the_admin_cannot_change_a_state(as_alice, red):
    deployment = factories.make_deployment("admin-edit", red)
    form = as_alice.get(f"/admin/deployments/deployment/{deployment.pk}/change/").content.decode()
    assert 'name="state"' not in form
    as_alice.post(
        f"/admin/deployments/deployment/{deployment.pk}/change/",
        {
            "name": "admin-edit",
            "team": red.pk,
            "model": deployment.model_id,
            "variant": deployment.variant_id,
            "cluster": deployment.cluster_id,
            "accelerators_per_copy": "1",
            "copies_wanted": "1",
            "engine": "vllm",
            "engine_settings": "{}",
            "state": DeploymentState.DEPLOYED,
        },
    )
    assert Deployment.objects.get(pk=deployment.pk).state == DeploymentState.REQUESTED


class Listener:
    """A channel subscribed to a group on its own Redis channel layer, driven by one event loop
    (a channel's receive queue belongs to the loop that made it)."""

    def __init__(self, group: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.layer = RedisChannelLayer(**settings.CHANNEL_LAYERS["default"]["CONFIG"])
        self.group = group
        self.channel = self.run(self.layer.new_channel())
        self.run(self.layer.group_add(group, self.channel))

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def receive(self, timeout: float = 1.5) -> dict | None:
        try:
            return self.run(asyncio.wait_for(self.layer.receive(self.channel), timeout))
        except TimeoutError:
            return None

    def close(self) -> None:
        self.run(self.layer.group_discard(self.group, self.channel))
        self.run(self.layer.flush())
        self.loop.close()


@pytest.fixture
def listener():
    listening = Listener("deployments")
    yield listening
    listening.close()


@pytest.mark.django_db(transaction=True)
def test_the_broadcast_is_sent_only_after_commit(red, listener):
    deployment = factories.make_deployment("broadcasts", red)
    with transaction.atomic():
        move_deployment(deployment.pk, DeploymentState.DEPLOYING, message="placed")
        assert listener.receive(timeout=0.5) is None  # not yet: the change is not committed
    message = listener.receive()
    assert message == {"type": "live.changed", "kind": "deployment", "id": deployment.pk, "seq": 0}


@pytest.mark.django_db(transaction=True)
def test_nothing_is_broadcast_when_the_change_rolls_back(red, listener):
    deployment = factories.make_deployment("rolled-back", red)
    with pytest.raises(RuntimeError), transaction.atomic():
        move_deployment(deployment.pk, DeploymentState.DEPLOYING, message="placed")
        raise RuntimeError("something later failed")
    assert listener.receive(timeout=1.0) is None
    assert Deployment.objects.get(pk=deployment.pk).state == DeploymentState.REQUESTED
    assert not Event.objects.filter(deployment=deployment).exists()


@pytest.mark.django_db
def test_many_copies_move_at_once_each_with_its_event_and_team(red):
    deployment = factories.make_deployment("many", red)
    copies = [factories.make_copy(deployment, n) for n in range(3)]
    moves = [Move(c.pk, CopyState.PENDING, f"wait {c.ordinal}", {"pending_reason": "no room"})
             for c in copies]  # fmt: skip
    move_copies(moves)
    for copy in copies:
        now = Copy.objects.get(pk=copy.pk)
        assert (now.state, now.pending_reason) == (CopyState.PENDING, "no room")
        event = Event.objects.get(copy=copy)
        assert (event.from_state, event.to_state, event.message, event.team_id) == (
            CopyState.REQUESTED,
            CopyState.PENDING,
            f"wait {copy.ordinal}",
            red.pk,
        )


@pytest.mark.django_db
def test_one_illegal_move_in_a_batch_refuses_the_whole_batch(red):
    deployment = factories.make_deployment("batch", red)
    fine, wrong = factories.make_copy(deployment, 0), factories.make_copy(deployment, 1)
    with pytest.raises(IllegalTransition, match="cannot go from REQUESTED to READY"):
        move_copies([Move(fine.pk, CopyState.PENDING), Move(wrong.pk, CopyState.READY)])
    assert set(Copy.objects.values_list("state", flat=True)) == {CopyState.REQUESTED}
    assert not Event.objects.exists()
    other = factories.make_deployment("other", red)
    with pytest.raises(IllegalTransition):
        move_deployments([Move(deployment.pk, DeploymentState.DEPLOYING),
                          Move(other.pk, DeploymentState.STOPPED)])  # fmt: skip
    assert set(Deployment.objects.values_list("state", flat=True)) == {DeploymentState.REQUESTED}


@pytest.mark.django_db
def test_many_deployments_move_at_once_with_their_events_and_messages(red):
    first, second = (factories.make_deployment(n, red) for n in ("first", "second"))
    move_deployments([Move(first.pk, DeploymentState.DEPLOYING, "Placing."),
                      Move(second.pk, DeploymentState.FAILED, "No room.")])  # fmt: skip
    assert Deployment.objects.get(pk=first.pk).last_message == "Placing."
    assert Deployment.objects.get(pk=second.pk).state == DeploymentState.FAILED
    said = Event.objects.filter(deployment__in=[first, second]).values_list(
        "deployment_name", "from_state", "to_state", "team_id"
    )
    assert sorted(said) == [
        ("first", DeploymentState.REQUESTED, DeploymentState.DEPLOYING, red.pk),
        ("second", DeploymentState.REQUESTED, DeploymentState.FAILED, red.pk),
    ]


def test_a_state_decided_before_a_stop_does_not_undo_it(red):
    # A refresh counted the copies while the deployment was DEPLOYING; a stop came meanwhile.
    deployment = deployment_in(DeploymentState.STOPPING, red)
    events_before = Event.objects.count()
    stale = Move(deployment.pk, DeploymentState.ERROR, "No copy serves; 1 waits for room: …",
                 decided_from=DeploymentState.DEPLOYING)  # fmt: skip
    assert move_deployments([stale]) == []
    assert Deployment.objects.get(pk=deployment.pk).state == DeploymentState.STOPPING
    assert Event.objects.count() == events_before
    current = Move(deployment.pk, DeploymentState.STOPPED, "Stopped: no copy runs.",
                   decided_from=DeploymentState.STOPPING)  # fmt: skip
    assert [d.state for d in move_deployments([current])] == [DeploymentState.STOPPED]


def test_a_state_decided_for_a_deployment_deleted_since_changes_the_others(red):
    # A refresh decided for two deployments; one was deleted before the states were written.
    kept, deleted = (factories.make_deployment(name, red) for name in ("kept", "deleted"))
    for deployment in (kept, deleted):
        for step in path_to(DeploymentState.DEPLOYING)[1:]:
            move_deployment(deployment.pk, step, message="setting up")
    serving = DeploymentState.DEPLOYED
    decided = [
        Move(d.pk, serving, "1 of 1 copies serve.", decided_from=DeploymentState.DEPLOYING)
        for d in (kept, deleted)
    ]
    Deployment.objects.filter(pk=deleted.pk).delete()
    assert [d.pk for d in move_deployments(decided)] == [kept.pk]
    assert Deployment.objects.get(pk=kept.pk).state == serving
