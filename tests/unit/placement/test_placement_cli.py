"""`python -m placement plan|estimate`: the contract documented in placement/README.md."""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from placement.cli import main

REPOSITORY = Path(__file__).resolve().parents[3]

SCENARIO: dict[str, Any] = {
    "policy": "binpack",
    "cluster": {
        "sharing": "fractional",
        "machines": [
            {
                "name": "m1",
                "system_memory_gb": 512,
                "unified_memory": False,
                "accelerators": [
                    {
                        "index": 0,
                        "vendor": "nvidia",
                        "product": "NVIDIA-H100-80GB-HBM3",
                        "memory_gb": 79.2,
                        "compute_capability": "9.0",
                        "driver": "550.90.07",
                        "sharing": None,
                    },
                    {
                        "index": 1,
                        "vendor": "nvidia",
                        "product": "NVIDIA-H100-80GB-HBM3",
                        "memory_gb": 79.2,
                        "compute_capability": "9.0",
                        "mig": [
                            {"profile": "3g.40gb", "memory_gb": 39.25},
                            {"profile": "3g.40gb", "memory_gb": 39.25},
                        ],
                    },
                ],
            }
        ],
        "reservations": [
            {"machine": "m1", "accelerator": 0, "gb": 19.8, "share": 0.25, "slice": None}
        ],
    },
    "request": {
        "model": {
            "name": "Qwen/Qwen3-8B",
            "layers": 36,
            "attention_heads": 32,
            "kv_heads": 8,
            "head_dim": 128,
            "hidden_size": 4096,
            "vocab_size": 151936,
            "max_context": 40960,
            "weight_bytes": 16381470720,
            "sliding_window": None,
            "global_layers": None,
            "mla": None,
            "encoder_only": False,
        },
        "engine": {
            "vendor": "nvidia",
            "min_compute_capability": "8.0",
            "max_model_len": 8192,
            "kv_cache_dtype": "auto",
            "dtype_bytes": 2,
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
            "enforce_eager": False,
            "min_driver": None,
        },
        "accelerators_per_copy": 0.5,
        "copies": 5,
    },
}


def run_cli(command: str, data: object) -> tuple[int, str, str]:
    text = data if isinstance(data, str) else json.dumps(data)
    out, err = io.StringIO(), io.StringIO()
    status = main([command, "-"], stdin=io.StringIO(text), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def changed(path: str, value: object) -> dict[str, Any]:
    """The scenario with one field (a dotted path) set to a value, or removed when ...."""
    scenario = copy.deepcopy(SCENARIO)
    *parents, last = path.split(".")
    node: Any = scenario
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return scenario


def test_plan_prints_the_plan_and_exits_0() -> None:
    status, out, err = run_cli("plan", SCENARIO)
    assert (status, err) == (0, "")
    result = json.loads(out)
    assert set(result) == {
        "estimate",
        "placed",
        "not_placed",
        "notices",
        "fit_now",
        "fit_empty",
        "suggested_accelerators_per_copy",
    }
    assert set(result["estimate"]) >= {
        "weights_gb",
        "kv_cache_gb",
        "activations_gb",
        "overhead_gb",
        "total_gb",
    }
    assert set(result["placed"][0]) >= {
        "copy",
        "machine",
        "accelerators",
        "slice",
        "allocated_capacity_gb",
        "share",
        "gpu_memory_utilization",
        "hardware_class",
        "sharing_class",
    }
    slices = [p["slice"] for p in result["placed"]]
    assert slices == [None, "3g.40gb", "3g.40gb"]
    assert result["placed"][0]["allocated_capacity_gb"] == 39.6
    assert (result["fit_now"], result["fit_empty"]) == (3, 4)
    assert [n["reason"] for n in result["not_placed"]] == ["insufficient_capacity"] * 2
    assert result["estimate"]["total_gb"] == 17.95


def test_plan_exits_0_when_nothing_fits() -> None:
    status, out, _ = run_cli("plan", changed("request.model.weight_bytes", 400 * 2**30))
    assert status == 0
    assert json.loads(out)["placed"] == []


def test_estimate_prints_only_the_parts() -> None:
    no_cluster = changed("cluster", ...)
    status, out, _ = run_cli("estimate", no_cluster)
    assert status == 0
    assert json.loads(out) == {
        "weights_gb": 15.26,
        "kv_cache_gb": 1.13,
        "activations_gb": 0.33,
        "overhead_gb": 1.23,
        "total_gb": 17.95,
        "kv_bytes_per_token": 147456,
        "tensor_parallel": 1,
    }


@pytest.mark.parametrize(
    ("data", "error"),
    [
        pytest.param(
            changed("request.model.layers", ...),
            "error: request.model.layers: is missing",
            id="missing field",
        ),
        pytest.param(
            changed("request.copies", "three"),
            "error: request.copies: must be a whole number",
            id="wrong type",
        ),
        pytest.param(
            changed("request.copies", -1),
            "error: request.copies: must not be negative",
            id="negative copies",
        ),
        pytest.param(
            changed("request.copies", 10**6),
            "error: request.copies: must be at most 10000",
            id="too many copies",
        ),
        pytest.param(
            changed("policy", "first_fit"),
            "error: policy: must be one of binpack, spread, not 'first_fit'",
            id="unknown policy",
        ),
        pytest.param(
            '{"policy": "binpack",',
            "error: input is not valid JSON: Expecting property name enclosed in double quotes "
            "at line 1 column 22",
            id="bad JSON",
        ),
        pytest.param(
            changed("request.accelerators_per_copy", 1.5),
            "error: request.accelerators_per_copy: must be a share between 0 and 1, or a whole "
            "number of accelerators, not 1.5",
            id="size between 1 and 2",
        ),
        pytest.param(
            changed("request.accelerators_per_copy", 3),
            "error: request.accelerators_per_copy: 3 do not divide the model's 32 attention heads",
            id="tensor parallel that does not divide the heads",
        ),
        pytest.param(
            changed("cluster.machines.0.accelerators.0.memory_gb", 0),
            "error: cluster.machines[0].accelerators[0].memory_gb: must be greater than 0",
            id="zero memory",
        ),
        pytest.param(
            changed("cluster.reservations.0.machine", "m9"),
            "error: cluster.reservations[0].machine: no machine is named 'm9'",
            id="reservation on an unknown machine",
        ),
        pytest.param(
            changed("request.engine.max_model_len", 50000),
            "error: request.engine.max_model_len: 50000 is longer than the model's context of "
            "40960 tokens",
            id="context longer than the model's",
        ),
        pytest.param(
            changed("request.engine.kv_cache_dtype", "int3"),
            "error: request.engine.kv_cache_dtype: must be one of auto, float16, bfloat16, fp8, "
            "fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla",
            id="unknown KV cache dtype",
        ),
        pytest.param(
            changed("request.engine.kv_cache_dtype", "fp8_ds_mla"),
            "error: request.engine.kv_cache_dtype: fp8_ds_mla is only for MLA models (DeepSeek)",
            id="MLA cache for a model without MLA",
        ),
        pytest.param(
            changed("request.engine.max_modl_len", 4096),
            "error: request.engine.max_modl_len: is not a known field",
            id="misspelt field",
        ),
        pytest.param([], "error: scenario: must be a JSON object", id="not an object"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field(data: object, error: str) -> None:
    status, out, err = run_cli("plan", data)
    assert (status, out) == (2, "")
    assert err == error + "\n"


def test_paths_in_lists_name_the_item() -> None:
    data = changed("cluster.machines.0.accelerators.1.mig.0.profile", 7)
    _, _, err = run_cli("plan", data)
    assert (
        err
        == "error: cluster.machines[0].accelerators[1].mig[0].profile: must be a non-empty string\n"
    )


def test_a_missing_file_exits_2() -> None:
    err = io.StringIO()
    assert main(["plan", "/nonexistent/scenario.json"], stderr=err) == 2
    assert err.getvalue() == (
        "error: cannot read /nonexistent/scenario.json: No such file or directory\n"
    )


def test_python_dash_m_placement_reads_a_file(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    done = subprocess.run(
        [sys.executable, "-m", "placement", "plan", str(scenario)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fit_now"] == 3
