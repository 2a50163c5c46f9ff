"""Teams do not see each other: another team's holdings show as "another team" with their size
only (the cluster page, a NoFit message), where files lie on this server is for staff, and a
deployment's figures are its own (a name used again starts afresh)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone

from catalog.models import ServerModel
from clusters.models import Accelerator, Cluster
from deployments import lifecycle
from deployments.models import Deployment, Reservation
from gateway.models import MinuteFigures
from gateway.views.panel import figures
from tests import factories

pytestmark = pytest.mark.django_db
GIB = 2**30


@pytest.fixture
def demo(db) -> Cluster:
    call_command("seed_demo")
    return Cluster.objects.get(name="demo")


def hold(deployment: Deployment, gib: int) -> None:
    copy = factories.make_copy(deployment)
    gpu = Accelerator.objects.get(machine__name="h100-1", index=0, parent=None)
    Reservation.objects.create(
        copy=copy, machine=gpu.machine, accelerator=gpu, reserved_bytes=gib * GIB, share=Decimal(1)
    )


def test_the_cluster_page_names_only_the_viewers_own_teams_holdings(as_carol, demo, red, blue):
    hold(factories.make_deployment("red-held", red, cluster=demo), 30)
    hold(factories.make_deployment("blue-secret-project", blue, cluster=demo), 20)
    page = as_carol.get(f"/clusters/{demo.pk}/").content.decode()  # carol is in red only
    assert "red-held</a> copy 0 (30.00 GiB)" in page
    assert "another team (20.00 GiB)" in page
    assert "blue-secret-project" not in page


def test_a_no_fit_message_names_another_teams_holder_only_as_another_team(demo, red, blue):
    hold(factories.make_deployment("red-big", red, cluster=demo), 30)
    hold(factories.make_deployment("blue-big", blue, cluster=demo), 40)
    asking = factories.make_deployment("red-new", red, cluster=demo)
    said = lifecycle.who_holds_the_room(demo, asking)
    assert said == "another team holds 1 copy (40.00 GiB); red-big holds 1 copy (30.00 GiB)"


def test_where_files_lie_on_this_server_is_for_staff(as_carol, client, demo):
    kept = ServerModel.objects.exclude(path="").first()
    assert kept is not None
    ServerModel.objects.filter(pk=kept.pk).update(files=[["config.json", 100]])
    assert kept.path not in as_carol.get("/models/on-this-server/").content.decode()
    admin = factories.make_user("ada")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    assert kept.path in client.get("/models/on-this-server/").content.decode()


def test_a_deployment_name_used_again_starts_with_figures_of_its_own(red, blue):
    old = factories.make_deployment("qwen-chat", red)
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=2)
    MinuteFigures.objects.create(
        deployment=old, deployment_name=old.name, minute=minute, requests=40
    )
    old.delete()
    again = factories.make_deployment("qwen-chat", blue)  # another team, the same name
    assert figures(again)["measured"] is False
    assert figures(again)["requests"] == 0
