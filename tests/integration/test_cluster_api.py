"""The API's clusters with their ids and the free room on each GPU (as a fit check sees it), and
/me: who a key acts as, with which roles, and where the gateway is; never a secret."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from berth_sdk import results as sdk
from django.test import Client

from clusters.models import Accelerator, Cluster, Machine, SharingClass
from console import keys
from deployments.models import Reservation
from tests import factories

pytestmark = pytest.mark.django_db

API = "/api/v1"
H100_GIB = 79.65  # 81559 MiB, as factories.make_cluster's GPUs report it


def get(user: Any, path: str, scope: str = "operate") -> Any:
    _key, secret = keys.issue(user, "test", scope)
    return Client().get(API + path, headers={"Authorization": f"Bearer {secret}"})


def reserve(cluster: Cluster, team: Any, gpu: Accelerator, gib: int, share: str) -> Reservation:
    deployment = factories.make_deployment(
        f"{team.name}-qwen", team, cluster=cluster, accelerators_per_copy=Decimal(share)
    )
    copy = factories.make_copy(deployment)
    return Reservation.objects.create(
        copy=copy, machine=gpu.machine, accelerator=gpu, reserved_bytes=gib << 30, share=share
    )


def free_of(answer: Any) -> dict[tuple[str, int], dict[str, Any]]:
    return {(m["machine"], g["index"]): g for m in answer.json()["free"] for g in m["gpus"]}


# --- clusters ----------------------------------------------------------------------------------


def test_the_cluster_list_gives_each_clusters_id(carol):
    lab, dgx = factories.make_cluster("lab"), factories.make_cluster("dgx")
    listed = get(carol, "/clusters", "read").json()["items"]
    assert [(c["name"], c["id"]) for c in listed] == [("dgx", dgx.pk), ("lab", lab.pk)]


def test_a_viewer_reads_one_cluster_with_its_free_room(carol):
    lab = factories.make_cluster("lab", gpus=2)
    answer = get(carol, f"/clusters/{lab.pk}", "read")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["id"], body["name"], body["kind"]) == (lab.pk, "lab", "simulator")
    assert [m["name"] for m in body["machines"]] == ["lab-m1"]
    assert body["free"] == [
        {
            "machine": "lab-m1",
            "ready": True,
            "gpus": [
                {
                    "index": index,
                    "sharing_class": "shared",
                    "memory_gb": H100_GIB,
                    "free_gb": H100_GIB,
                    "copies": 0,
                    "free_slices": [],
                }
                for index in (0, 1)
            ],
        }
    ]


def test_a_cpu_machine_counts_its_cores_and_memory_and_no_gpu(carol):
    cpu_box = factories.make_cpu_cluster("cpu-box", cores=16, system_gib=32, reserve_gib=8)
    body = get(carol, f"/clusters/{cpu_box.pk}", "read").json()
    totals = {k: body[k] for k in ("gpu_count", "cpu_machines", "cpu_cores", "cpu_memory_gb")}
    assert totals == {"gpu_count": 0, "cpu_machines": 1, "cpu_cores": 16, "cpu_memory_gb": 24.0}
    (machine,) = body["machines"]
    counts = {k: machine[k] for k in ("gpu_count", "gpu_memory_gb", "cpu_cores", "cpu_memory_gb")}
    assert counts == {"gpu_count": 0, "gpu_memory_gb": 0.0, "cpu_cores": 16, "cpu_memory_gb": 24.0}
    assert [(a["vendor"], a["memory_gb"]) for a in machine["gpus"]] == [("cpu", 24.0)]

    read = sdk.Cluster.from_api(body)  # and the SDK keeps every one of these figures
    assert (read.gpu_count, read.cpu_machines, read.cpu_cores, read.cpu_memory_gb) == (
        0,
        1,
        16,
        24.0,
    )
    (sdk_machine,) = read.machines
    assert (sdk_machine.gpu_count, sdk_machine.cpu_cores, sdk_machine.cpu_memory_gb) == (
        0,
        16,
        24.0,
    )


def test_the_list_counts_a_gpu_clusters_gpus_and_a_cpu_clusters_cpu_machines(carol):
    factories.make_cpu_cluster("cpu-box", cores=16, system_gib=32, reserve_gib=8)
    factories.make_cluster("lab", gpus=2)
    listed = get(carol, "/clusters", "read").json()["items"]
    figures = [
        (c["name"], c["gpu_count"], c["cpu_machines"], c["cpu_cores"], c["cpu_memory_gb"])
        for c in listed
    ]
    assert figures == [("cpu-box", 0, 1, 16, 24.0), ("lab", 2, 0, 0, 0.0)]
    lab_machine = listed[1]["machines"][0]
    assert (lab_machine["gpu_count"], lab_machine["cpu_cores"]) == (2, 0)
    assert lab_machine["gpu_memory_gb"] == 159.29  # 2 × 81559 MiB


def test_a_reservation_takes_its_room_from_the_gpu_it_holds(carol, red):
    lab = factories.make_cluster("lab", gpus=2)
    first = Accelerator.objects.get(machine__cluster=lab, index=0)
    reserve(lab, red, first, 40, "0.5")
    free = free_of(get(carol, f"/clusters/{lab.pk}", "read"))
    assert (free["lab-m1", 0]["free_gb"], free["lab-m1", 0]["copies"]) == (39.65, 1)
    assert (free["lab-m1", 1]["free_gb"], free["lab-m1", 1]["copies"]) == (H100_GIB, 0)


def test_another_teams_reservation_takes_room_too_and_names_nothing(dave, blue):
    lab = factories.make_cluster("lab", gpus=1)
    reserve(lab, blue, Accelerator.objects.get(machine__cluster=lab), 80, "1")
    answer = get(dave, f"/clusters/{lab.pk}", "read")
    assert free_of(answer)["lab-m1", 0]["free_gb"] == 0
    assert "blue-qwen" not in answer.content.decode()


def test_a_machine_that_is_not_ready_offers_no_room(carol):
    lab = factories.make_cluster("lab", gpus=2)
    Machine.objects.filter(cluster=lab).update(ready=False)
    body = get(carol, f"/clusters/{lab.pk}", "read").json()
    assert body["free"] == [{"machine": "lab-m1", "ready": False, "gpus": []}]
    assert body["machines"][0]["gpu_count"] == 2  # the machine still lists its GPUs


def test_a_mig_gpu_offers_its_free_slices(carol, red):
    lab = factories.make_cluster("lab", gpus=1)
    gpu = Accelerator.objects.get(machine__cluster=lab)
    Accelerator.objects.filter(pk=gpu.pk).update(sharing_class=SharingClass.MIG)
    small, large = (
        Accelerator.objects.create(
            machine=gpu.machine,
            parent=gpu,
            index=index,
            product=gpu.product,
            memory_bytes=gib << 30,
            mig_profile=profile,
            sharing_class=SharingClass.MIG,
        )
        for index, gib, profile in [(1, 20, "2g.20gb"), (2, 40, "3g.40gb")]
    )
    reserve(lab, red, large, 40, "1")
    (room,) = get(carol, f"/clusters/{lab.pk}", "read").json()["free"][0]["gpus"]
    assert (room["sharing_class"], room["copies"], room["free_gb"]) == ("mig", 1, 20.0)
    assert room["free_slices"] == [{"profile": "2g.20gb", "memory_gb": 20.0}]


def test_an_unknown_cluster_is_404_in_words(carol):
    answer = get(carol, "/clusters/999999", "read")
    assert answer.status_code == 404
    assert answer.json() == {"detail": "No such cluster.", "field": ""}


def test_anonymous_requests_for_clusters_and_me_get_401():
    lab = factories.make_cluster("lab")
    for path in ["/clusters", f"/clusters/{lab.pk}", "/me"]:
        answer = Client().get(API + path)
        assert answer.status_code == 401
        assert answer.json()["detail"].startswith("Authentication required")


# --- me ----------------------------------------------------------------------------------------


def test_a_viewers_read_key_sees_its_one_team(carol, settings):
    settings.GATEWAY_URL, settings.GATEWAY_PORT = "", 8001  # the console's host on this port
    assert get(carol, "/me", "read").json() == {
        "username": "carol",
        "platform_admin": False,
        "teams": [{"team": "red", "role": "viewer"}],
        "gateway_url": "http://testserver:8001/v1",
    }


def test_an_operator_sees_each_team_with_its_role(bob):
    body = get(bob, "/me").json()
    assert (body["username"], body["platform_admin"]) == ("bob", False)
    assert body["teams"] == [
        {"team": "blue", "role": "viewer"},
        {"team": "red", "role": "operator"},
    ]


def test_a_platform_admin_is_said_to_be_one(alice, red):
    factories.add_member(alice, red, "admin")
    body = get(alice, "/me").json()
    assert (body["username"], body["platform_admin"]) == ("alice", True)
    assert body["teams"] == [{"team": "red", "role": "admin"}]


def test_the_session_works_too_and_the_gateway_url_is_the_configured_one(as_bob, settings):
    settings.GATEWAY_URL = "https://chat.example.org/v1/"
    body = as_bob.get(f"{API}/me").json()
    assert (body["username"], body["gateway_url"]) == ("bob", "https://chat.example.org/v1")


def test_me_never_shows_key_material(bob):
    key, secret = keys.issue(bob, "ci")
    answer = Client().get(f"{API}/me", headers={"Authorization": f"Bearer {secret}"})
    text = answer.content.decode()
    assert answer.status_code == 200
    assert secret not in text and key.prefix not in text and "berth_" not in text
    assert set(answer.json()) == {"username", "platform_admin", "teams", "gateway_url"}


def test_the_openapi_document_describes_clusters_and_me(as_bob):
    document = as_bob.get(f"{API}/openapi.json").json()
    schemas = document["components"]["schemas"]
    assert {"/api/v1/clusters/{id}", "/api/v1/me"} <= set(document["paths"])
    assert "id" in schemas["ClusterOut"]["required"]
    assert set(schemas["GpuRoomOut"]["properties"]) == {
        "index",
        "sharing_class",
        "memory_gb",
        "free_gb",
        "copies",
        "free_slices",
    }
    assert set(schemas["MeOut"]["properties"]) == {
        "username",
        "platform_admin",
        "teams",
        "gateway_url",
    }
