"""The database itself enforces the rules: names, reply wait, sizes of copies, counts."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from clusters.models import Cluster
from console.models import Team
from deployments.models import Deployment
from tests import factories

pytestmark = pytest.mark.django_db


def refused(create) -> bool:
    try:
        with transaction.atomic():
            create()
    except IntegrityError:
        return True
    return False


@pytest.mark.parametrize(
    "name", ["Has-Capitals", "under_score", "-leading", "trailing-", "sp ace", ""]
)
def test_deployment_names_must_be_slugs(red, name):
    assert refused(lambda: factories.make_deployment(name, red))


def test_deployment_names_are_unique(red, blue):
    factories.make_deployment("same", red)
    assert refused(lambda: factories.make_deployment("same", blue))


@pytest.mark.parametrize(
    "wait,ok", [(9, False), (10, True), (1800, True), (1801, False), (None, True)]
)
def test_reply_wait_is_between_10_and_1800_seconds(red, wait, ok):
    assert refused(lambda: factories.make_deployment("waits", red, reply_wait_s=wait)) is not ok


@pytest.mark.parametrize(
    "size,ok",
    [
        ("0", False),
        ("-1", False),
        ("0.25", True),
        ("0.5", True),
        ("1", True),
        ("4", True),
        ("1.5", False),
    ],
)
def test_accelerators_per_copy_is_a_share_or_a_whole_number(red, size, ok):
    assert (
        refused(
            lambda: factories.make_deployment("sized", red, accelerators_per_copy=Decimal(size))
        )
        is not ok
    )


def test_copies_wanted_may_be_zero_but_not_negative(red):
    assert not refused(lambda: factories.make_deployment("zero", red, copies_wanted=0))
    deployment = Deployment.objects.get(name="zero")
    with pytest.raises(IntegrityError), transaction.atomic():
        Deployment.objects.filter(pk=deployment.pk).update(copies_wanted=-1)


def test_cluster_and_team_names_are_unique_slugs(db):
    factories.make_cluster("lab")
    assert refused(lambda: Cluster.objects.create(name="lab", kind="simulator"))
    assert refused(lambda: Cluster.objects.create(name="Lab Two", kind="simulator"))
    assert refused(lambda: Cluster.objects.create(name="lab-two", kind="mainframe"))
    assert refused(lambda: Team.objects.create(name="Red Team"))


def test_a_team_member_has_one_role_per_team(bob, red):
    assert refused(lambda: factories.add_member(bob, red, "viewer"))
    assert refused(lambda: factories.add_member(factories.make_user("erin"), red, "superhero"))


def test_events_outlive_their_deployment(red):
    from deployments.choices import DeploymentState
    from deployments.models import Event
    from deployments.transitions import move_deployment

    deployment = factories.make_deployment("short-lived", red)
    move_deployment(deployment.pk, DeploymentState.STOPPING, message="stop asked")
    deployment.delete()
    event = Event.objects.get(deployment_name="short-lived")
    assert event.deployment is None and event.to_state == DeploymentState.STOPPING


def test_every_model_has_a_one_line_docstring():
    from django.apps import apps

    ours = [
        m
        for m in apps.get_models()
        if m._meta.app_label in {"console", "clusters", "catalog", "deployments"}
    ]
    assert len(ours) >= 13
    for model in ours:
        doc = (model.__doc__ or "").strip()
        assert doc and "\n" not in doc and not doc.startswith(model.__name__ + "("), model
