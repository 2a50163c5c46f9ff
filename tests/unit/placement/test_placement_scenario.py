"""The JSON scenario <-> dataclasses conversion the console and the CLI share."""

from __future__ import annotations

import dataclasses
import json

import pytest
from placement_examples import (
    DEEPSEEK_V3,
    GEMMA_3_27B,
    cluster,
    gib,
    h100,
    h100_machine,
    h100_mig,
    machine,
    request,
    reserve,
)

from placement import (
    ClusterSharing,
    GpuSharing,
    Machine,
    MeasuredRuntime,
    Reservation,
    ScenarioError,
)
from placement.scenario import Scenario, scenario_from_json, scenario_to_json


def round_trip(scenario: Scenario) -> Scenario:
    data = json.loads(json.dumps(scenario_to_json(scenario)))
    return scenario_from_json(data, need_cluster=scenario.inventory is not None)


def test_a_scenario_survives_a_round_trip_through_json() -> None:
    inventory = cluster(
        h100_machine("m1", 2),
        machine("m2", h100_mig(0), h100(1, sharing=GpuSharing.MPS, replicas=4)),
        Machine("spark", (h100(0, memory_bytes=gib(119.7)),), gib(128), unified_memory=True),
        reservations=(reserve("m1", 0, 0.25), Reservation("m2", 0, gib(9.75), 1.0, "a")),
        sharing=ClusterSharing.WHOLE_GPU,
    )
    measured = MeasuredRuntime(activations_bytes=gib(1.2), cuda_graph_bytes=0)
    wanted = request(GEMMA_3_27B, 2, copies=3, kv_cache_dtype="fp8", measured=measured)
    scenario = Scenario(wanted, inventory)
    assert round_trip(scenario) == scenario


def test_an_mla_model_survives_a_round_trip() -> None:
    scenario = Scenario(request(DEEPSEEK_V3, 8, kv_cache_dtype="fp8_ds_mla"), None)
    assert round_trip(scenario) == scenario


def test_the_cluster_may_be_left_out_only_for_an_estimate() -> None:
    data = scenario_to_json(Scenario(request(), None))
    assert scenario_from_json(data, need_cluster=False).inventory is None
    with pytest.raises(ScenarioError) as error:
        scenario_from_json(data)
    assert str(error.value) == "cluster: is missing"
    assert error.value.field == "cluster"


def test_a_reservation_must_name_a_slice_the_accelerator_has() -> None:
    data = scenario_to_json(Scenario(request(), cluster(machine("m1", h100_mig(0)))))
    data["cluster"]["reservations"] = [  # type: ignore[index]
        {"machine": "m1", "accelerator": 0, "gb": 10, "share": 1, "slice": "7g.80gb"}
    ]
    with pytest.raises(ScenarioError, match=r"^cluster\.reservations\[0\]\.slice: "):
        scenario_from_json(data)


def test_constructor_errors_carry_the_json_path() -> None:
    data = scenario_to_json(Scenario(request(), cluster(h100_machine("m1", 1))))
    data["request"]["model"]["global_layers"] = 99  # type: ignore[index]
    with pytest.raises(ScenarioError) as error:
        scenario_from_json(data)
    assert str(error.value) == "request.model.global_layers: must be between 0 and layers (36)"


def test_plan_reservations_read_back_as_the_same_rows() -> None:
    held = dataclasses.replace(reserve("m1", 0, 0.5))
    data = scenario_to_json(
        Scenario(request(), cluster(h100_machine("m1", 1), reservations=(held,)))
    )
    assert scenario_from_json(data).inventory.reservations == (held,)  # type: ignore[union-attr]
