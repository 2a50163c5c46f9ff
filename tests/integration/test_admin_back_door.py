"""The Django admin is no back door: deployments, copies and reservations are read only there;
Stop, Start, Check now and Delete run the console's own actions as the staff user; what a
deployment still uses cannot be deleted from under it."""

from __future__ import annotations

import pytest
from django.test import Client

from catalog.models import ServerModel
from clusters.models import Cluster, Machine
from console.models import Team
from deployments.choices import DeploymentState
from deployments.guard import state_change_allowed
from deployments.models import Deployment, Event, Reservation
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff() -> Client:
    admin = factories.make_user("ada")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client = Client()
    client.force_login(admin)
    return client


@pytest.fixture
def running(red) -> Deployment:
    deployment = factories.make_deployment("busy", red, copies_wanted=1)
    with state_change_allowed():  # as if it had been placed and had started
        Deployment.objects.filter(pk=deployment.pk).update(state=DeploymentState.DEPLOYED)
    copy = factories.make_copy(deployment)
    machine = deployment.cluster.machines.first()
    Reservation.objects.create(copy=copy, machine=machine, reserved_bytes=1 << 30, share=1)
    return Deployment.objects.get(pk=deployment.pk)


def changelist_action(staff: Client, action: str, *rows) -> None:
    answer = staff.post(
        "/admin/deployments/deployment/",
        {"action": action, "_selected_action": [row.pk for row in rows]},
    )
    assert answer.status_code == 302, answer.content[:500]


def test_a_deployment_cannot_be_edited_or_deleted_in_the_admin(staff, running):
    url = f"/admin/deployments/deployment/{running.pk}/change/"
    assert staff.post(url, {"copies_wanted": 9, "name": "busy"}).status_code == 403
    assert staff.post(f"/admin/deployments/deployment/{running.pk}/delete/").status_code == 403
    page = staff.get("/admin/deployments/deployment/").content.decode()
    assert "stop_selected" in page and 'delete_selected"' not in page
    fresh = Deployment.objects.get(pk=running.pk)
    assert fresh.copies_wanted == 1 and not Event.objects.filter(deployment=fresh).exists()


def test_stop_in_the_admin_is_the_consoles_stop_as_the_staff_user(staff, running):
    changelist_action(staff, "stop_selected", running)
    fresh = Deployment.objects.get(pk=running.pk)
    assert fresh.state == DeploymentState.STOPPING
    assert Event.objects.filter(deployment=fresh, message="Stop", actor_name="ada").exists()


def test_delete_in_the_admin_stops_first_and_keeps_the_row_until_then(staff, running):
    changelist_action(staff, "delete_selected_safely", running)
    fresh = Deployment.objects.get(pk=running.pk)
    assert fresh.delete_when_stopped and fresh.state == DeploymentState.STOPPING
    assert Event.objects.filter(deployment=fresh, message="Delete", actor_name="ada").exists()


def test_start_of_a_running_deployment_is_refused_in_words(staff, running):
    answer = staff.post(
        "/admin/deployments/deployment/",
        {"action": "start_selected", "_selected_action": [running.pk]},
        follow=True,
    )
    shown = [str(m) for m in answer.context["messages"]]
    assert shown == ["busy: only a stopped deployment can be started"]


def test_what_a_deployment_uses_cannot_be_deleted_from_under_it(staff, running, red):
    machine = running.cluster.machines.first()
    # Deleting each would take rows with it that nobody may delete in the admin (deployments,
    # reservations): Django's "Cannot delete" page (a 200) lists those kinds, and deletes nothing.
    for url, title, kinds in (
        (f"/admin/console/team/{red.pk}/delete/", "Cannot delete team", {"deployment"}),
        (f"/admin/clusters/cluster/{running.cluster_id}/delete/", "Cannot delete cluster",
         {"deployment", "reservation"}),
        (f"/admin/clusters/machine/{machine.pk}/delete/", "Cannot delete machine",
         {"reservation"}),
    ):  # fmt: skip
        page = staff.post(url, {"post": "yes"})
        assert page.status_code == 200, url
        assert page.context["title"] == title, url
        assert set(page.context["perms_lacking"]) == kinds, url
    assert Team.objects.filter(pk=red.pk).exists()
    assert Cluster.objects.filter(pk=running.cluster_id).exists()
    assert Machine.objects.filter(cluster_id=running.cluster_id).exists()


def test_a_server_copy_of_a_model_is_not_deleted_in_the_admin(staff, running):
    row = ServerModel.objects.create(variant=running.variant, state="ready", path="/srv/m")
    assert (
        staff.post(f"/admin/catalog/servermodel/{row.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert ServerModel.objects.filter(pk=row.pk).exists()


def test_revisions_are_read_only_in_the_admin(staff, running):
    revision = running.revisions.get()
    page = staff.get("/admin/deployments/revision/").content.decode()
    assert "Host (made by the tests)" in page
    url = f"/admin/deployments/revision/{revision.pk}/change/"
    assert staff.post(url, {"why": "rewritten", "number": 1}).status_code == 403
    assert staff.post(f"/admin/deployments/revision/{revision.pk}/delete/").status_code == 403
    assert staff.get("/admin/deployments/revision/add/").status_code == 403
    assert running.revisions.get().why == "Host (made by the tests)"
