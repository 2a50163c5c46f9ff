"""Placement inside the console: rows become an inventory, plans become reservations, and
concurrent requests never over-commit a GPU (real PostgreSQL, several OS processes)."""

from __future__ import annotations

import multiprocessing
import threading
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connections

from catalog.models import Model
from clusters.models import Accelerator, Cluster, Machine, SharingClass
from deployments.models import Copy, Deployment, Reservation
from deployments.placing import fit_check, request_for, reserve
from deployments.snapshot import inventory_for
from tests import factories

GIB = 2**30


@pytest.fixture
def demo(db):
    call_command("seed_demo")
    return Cluster.objects.get(name="demo")


def qwen() -> Model:
    return Model.objects.get(repo_id="Qwen/Qwen3-8B")


def host(name: str, team, cluster: Cluster, size: str, copies: int, **fields):
    deployment = factories.make_deployment(
        name,
        team,
        cluster=cluster,
        model=qwen(),
        accelerators_per_copy=Decimal(size),
        copies_wanted=copies,
        engine_settings={"max_model_len": 8192},
        **fields,
    )
    made = [factories.make_copy(deployment, n) for n in range(copies)]
    return deployment, made


@pytest.mark.django_db
def test_the_demo_cluster_becomes_an_inventory(demo):
    inventory = inventory_for(demo)
    by_name = {m.name: m for m in inventory.machines}
    assert sorted(by_name) == ["h100-1", "h100-2", "h200-mig", "l4-shared"]
    assert len(by_name["h100-1"].accelerators) == 4
    h200 = by_name["h200-mig"].accelerators[0]
    assert [s.profile for s in h200.mig] == ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
    l4 = by_name["l4-shared"].accelerators[0]
    assert (l4.sharing, l4.replicas) == ("time_sliced", 4)
    assert inventory.reservations == ()


@pytest.mark.django_db
def test_two_half_copies_share_one_gpu_and_a_third_goes_to_the_next(demo, red):
    lab = factories.make_cluster("lab", gpus=2)
    deployment, copies = host("halves", red, lab, "0.5", 3)
    result = reserve(deployment, copies)
    assert len(result.placed) == 3 and result.not_placed == ()
    gpus = [
        (r.machine.name, r.accelerator.index)
        for r in Reservation.objects.order_by("copy__ordinal").select_related(
            "machine", "accelerator"
        )
    ]
    assert gpus[0] == gpus[1] and gpus[2] != gpus[0]
    copy = Copy.objects.get(pk=copies[0].pk)
    assert copy.machine.name == gpus[0][0]
    assert copy.gpu_memory_utilization == pytest.approx(0.4)
    assert copy.allocated_bytes == Reservation.objects.get(copy=copy).reserved_bytes


@pytest.mark.django_db
def test_existing_reservations_are_honoured(demo, red, blue):
    first, first_copies = host("first", red, demo, "1", 8)
    # Binpack: the H200's four MIG slices first (they cost no whole GPU; the tightest first),
    # then the L4s (less left unused than on an H100), then h100-1's GPUs one by one.
    assert [(p.machine, p.accelerators, p.slice) for p in reserve(first, first_copies).placed] == [
        ("h200-mig", (0,), "1g.18gb"),
        ("h200-mig", (0,), "1g.18gb"),
        ("h200-mig", (0,), "2g.35gb"),
        ("h200-mig", (0,), "3g.71gb"),
        ("l4-shared", (0,), None),
        ("l4-shared", (1,), None),
        ("h100-1", (0,), None),
        ("h100-1", (1,), None),
    ]
    second, second_copies = host("second", blue, demo, "1", 1)
    [placed] = reserve(second, second_copies).placed
    # All of that is held: the next whole GPU is h100-1's GPU 2 (the machine already in use).
    assert (placed.machine, placed.accelerators, placed.slice) == ("h100-1", (2,), None)


@pytest.mark.django_db
def test_a_model_too_big_for_any_gpu_gets_a_reason_and_no_reservation(demo, red):
    deployment, copies = host("too-big", red, demo, "0.25", 1)
    model = qwen()
    model.variants.update(size_bytes=200 * GIB)
    result = reserve(Deployment.objects.get(pk=deployment.pk), copies)
    assert result.placed == () and result.fit_empty == 0
    assert result.not_placed[0].reason == "insufficient_capacity"
    assert not Reservation.objects.exists()


@pytest.mark.django_db
def test_a_cluster_without_sharing_gives_whole_gpus_and_the_notice(red):
    cluster = factories.make_cluster("plain", gpus=2, sharing="")
    call_command("load_catalog")
    deployment, copies = host("quarter", red, cluster, "0.25", 2)
    result = fit_check(cluster, request_for(deployment))
    assert "SharingNotConfigured" in result.notices
    assert result.fit_now == 2  # each quarter takes a whole GPU without a sharing strategy


@pytest.mark.django_db
def test_a_share_with_no_whole_gpu_free_but_the_bytes_on_one_names_sharing_as_the_reason(red):
    """Each quarter took a whole GPU (no sharing strategy); the third finds no whole GPU free,
    though either GPU has the bytes: sharing, not capacity, is what is missing (DESIGN §4)."""
    cluster = factories.make_cluster("plain", gpus=2, sharing="")
    call_command("load_catalog")
    first, first_copies = host("quarters", red, cluster, "0.25", 2)
    assert len(reserve(first, first_copies).placed) == 2
    third, third_copies = host("third", red, cluster, "0.25", 1)
    result = reserve(third, third_copies)
    assert result.placed == () and result.fit_empty == 2  # either GPU, on the empty cluster
    (refused,) = result.not_placed
    assert refused.reason == "sharing_not_configured"
    assert refused.message.startswith("This cluster has no GPU sharing set up, so a copy of 0.25")
    assert "enough for this copy's" in refused.message and "enable GPU sharing" in refused.message


def place_in_a_thread(deployment_id: int, barrier, outcomes) -> None:
    from deployments.models import Deployment

    try:
        deployment = Deployment.objects.get(pk=deployment_id)
        copies = list(deployment.copies.all())
        barrier.wait(timeout=60)
        result = reserve(deployment, copies)
        outcomes.put((deployment_id, len(result.placed), [n.reason for n in result.not_placed]))
    except Exception as error:  # reported to the parent, which fails the test
        outcomes.put((deployment_id, -1, [repr(error)]))
    finally:
        connections.close_all()


def place_in_a_process(deployment_ids: list[int], barrier, outcomes) -> None:
    threads = [
        threading.Thread(target=place_in_a_thread, args=(i, barrier, outcomes))
        for i in deployment_ids
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_requests_for_eight_gpus_reserve_exactly_eight(red):
    cluster = Cluster.objects.create(name="eight", kind="simulator", sharing_strategy="fractional")
    machine = Machine.objects.create(cluster=cluster, name="m1", system_memory_bytes=512 * GIB)
    for index in range(8):
        Accelerator.objects.create(
            machine=machine,
            index=index,
            product="NVIDIA-H100-80GB-HBM3",
            memory_bytes=81559 * 2**20,
            compute_capability="9.0",
            sharing_class=SharingClass.SHARED,
        )
    call_command("load_catalog")
    ids = [host(f"racer-{n}", red, cluster, "1", 1)[0].pk for n in range(20)]
    connections.close_all()  # children must not share the parent's connection
    context = multiprocessing.get_context("fork")
    barrier, outcomes = context.Barrier(20), context.Queue()
    processes = [
        context.Process(target=place_in_a_process, args=(ids[n::4], barrier, outcomes))
        for n in range(4)
    ]
    for process in processes:
        process.start()
    results = [outcomes.get(timeout=120) for _ in ids]
    for process in processes:
        process.join(timeout=60)
    assert all(placed >= 0 for _, placed, _ in results), results
    assert sum(placed for _, placed, _ in results) == 8
    refused = [reasons for _, placed, reasons in results if placed == 0]
    assert len(refused) == 12 and all(reasons == ["insufficient_capacity"] for reasons in refused)
    assert Reservation.objects.count() == 8
    per_gpu = {}
    for row in Reservation.objects.select_related("accelerator"):
        per_gpu.setdefault(row.accelerator_id, []).append(row)
    assert len(per_gpu) == 8
    for rows in per_gpu.values():
        assert sum(r.share for r in rows) <= 1
        assert sum(r.reserved_bytes for r in rows) <= rows[0].accelerator.memory_bytes
