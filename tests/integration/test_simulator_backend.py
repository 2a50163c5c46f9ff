"""The simulator backend: the demo's machines from data, copies as real engine simulators.

Each launch runs ``clusters.simulator.engine`` as a supervised process on a free 127.0.0.1 port
with fast load settings; the fixture stops every copy a test launched, whatever happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from catalog.tiny_model import GGUF_FILE, write_tiny_model
from clusters.backends import supervisor
from clusters.backends.base import BackendError, CopyHandle, CopySpec, ModelFiles
from clusters.backends.simulator import SimulatorBackend, WaitForRoom, engine_argv
from clusters.simulator import build_env
from console.demo import DEMO_MACHINES

pytestmark = pytest.mark.timeout(60)

GIB = 1 << 30
MIB = 1 << 20
API_KEY = "sk-copy-7"
FAST = build_env(load_s_per_gb=0.02, init_s=0.05)
LLAMA_8B = {  # meta-llama/Llama-3.1-8B-Instruct (reference/vllm.md §6)
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "weights_bytes": 16_060_522_496,
}
STARTUP_LINES = [
    "vLLM API server version",
    "Model loading took",
    "Available KV cache memory:",
    "GPU KV cache size:",
    "init engine (profile, create kv cache, warmup model) took",
    "Starting vLLM API server 0 on http://127.0.0.1:",
    "Application startup complete.",
]


def wait_until(condition: Callable[[], object], timeout: float = 20.0, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def vllm_argv(model: str, port: int, *flags: str) -> tuple[str, ...]:
    """The command line the console builds for a real vLLM."""
    return (
        "vllm", "serve", model, "--served-model-name", "qwen", "--host", "127.0.0.1",
        "--port", str(port), "--api-key", API_KEY, *flags,
    )  # fmt: skip


def copy_spec(copy_id: int, machine: str, **changes: object) -> CopySpec:
    port = supervisor.free_port()
    fields: dict[str, object] = {
        "copy_id": copy_id,
        "deployment_name": "qwen",
        "ordinal": 0,
        "argv": vllm_argv("Qwen/Qwen3-0.6B", port, "--max-model-len", "4096"),
        "env": FAST,
        "machine": machine,
        "gpu_indexes": (0,),
        "memory_share": 0.9,
        "port": port,
    }
    fields.update(changes)
    return CopySpec(**fields)  # type: ignore[arg-type]


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[SimulatorBackend]:
    """The demo cluster; every copy launched through it is stopped afterwards."""
    simulator = SimulatorBackend(
        {"machines": DEMO_MACHINES},
        tmp_path / "state",
        model_facts_for={"meta-llama/Llama-3.1-8B-Instruct": LLAMA_8B},
        copy_bytes_per_second=10 * GIB,
        stop_timeout_s=5,
    )
    launched: list[CopyHandle] = []
    real_launch = simulator.launch

    def launch(spec: CopySpec) -> CopyHandle:
        handle = real_launch(spec)
        launched.append(handle)
        return handle

    simulator.launch = launch  # type: ignore[method-assign]
    yield simulator
    for handle in launched:
        simulator.stop(handle)


def statuses(backend: SimulatorBackend, handle: CopyHandle) -> str:
    return backend.observe([handle])[0].status


# ---------------------------------------------------------------- discovery


def test_discovery_reads_the_demo_machines(backend: SimulatorBackend) -> None:
    discovery = backend.discover()
    machines = {machine.name: machine for machine in discovery.machines}
    assert sorted(machines) == ["h100-1", "h100-2", "h200-mig", "l4-shared"]
    assert discovery.notices == () and discovery.reachable
    h100s = [gpu for machine in discovery.machines for gpu in machine.accelerators
             if gpu.product == "NVIDIA-H100-80GB-HBM3"]  # fmt: skip
    assert len(h100s) == 8
    assert {gpu.memory_bytes for gpu in h100s} == {81559 * MIB}
    assert machines["h100-1"].cpu_count == 96
    assert machines["h100-1"].system_memory_bytes == 1024 * GIB
    assert h100s[0].compute_capability == "9.0" and h100s[0].driver_version == "550.90.07"


def test_the_h200_is_split_by_mig_and_the_l4s_are_time_sliced(backend: SimulatorBackend) -> None:
    machines = {machine.name: machine for machine in backend.discover().machines}
    (h200,) = machines["h200-mig"].accelerators
    assert (h200.hardware_class, h200.sharing_class) == ("hardware_isolated", "mig")
    assert [(s.profile, s.memory_bytes) for s in h200.slices] == [
        ("3g.71gb", 71424 * MIB),
        ("2g.35gb", 35584 * MIB),
        ("1g.18gb", 16384 * MIB),
        ("1g.18gb", 16384 * MIB),
    ]
    assert len({s.uuid for s in h200.slices}) == 4
    l4s = machines["l4-shared"].accelerators
    assert [(g.sharing_class, g.replicas, g.hardware_class) for g in l4s] == [
        ("time_sliced", 4, "software_shared")
    ] * 2


def test_a_malformed_machine_is_left_out_and_named(tmp_path: Path) -> None:
    inventory = {"machines": [DEMO_MACHINES[0], {"cpus": 4}]}
    discovery = SimulatorBackend(inventory, tmp_path).discover()
    assert [machine.name for machine in discovery.machines] == ["h100-1"]
    assert discovery.notices == ("PartialDiscovery",)
    assert "left out" in discovery.message


# ---------------------------------------------------------------- files


def model_files(repo_id: str, size: int, revision: str = "abc123") -> ModelFiles:
    return ModelFiles(repo_id, revision, "bf16", size_bytes=size, files=(("m.safetensors", size),))


def test_copying_files_takes_time_in_proportion_to_size_once(backend: SimulatorBackend) -> None:
    small, large = model_files("acme/small", GIB), model_files("acme/large", 4 * GIB)
    took = []
    for files in (small, large, large):
        began = time.monotonic()
        result = backend.prepare_files("h100-1", files)
        took.append(time.monotonic() - began)
        assert result.present
    assert 0.09 < took[0] < 0.35  # 1 GiB at 10 GiB/s
    assert 0.39 < took[1] < 0.8  # 4 GiB
    assert took[2] < 0.05  # already on the machine
    again = SimulatorBackend({"machines": DEMO_MACHINES}, backend.state_dir)
    assert again.prepare_files("h100-1", large).message == "the model is already on h100-1"
    assert not again.files_marker("h100-2", large).exists()
    elsewhere = backend.prepare_files("h100-2", small)
    assert elsewhere.present and "copied" in elsewhere.message
    other_commit = model_files("acme/small", GIB, revision="def456")
    assert not backend.files_marker("h100-1", other_commit).exists()
    assert "copied" in backend.prepare_files("h100-1", other_commit).message


def test_a_copy_of_files_reports_its_bytes_as_they_arrive(backend: SimulatorBackend) -> None:
    seen: list[int] = []
    backend.prepare_files("h100-1", model_files("acme/progress", 8 * GIB), seen.append)
    assert len(seen) >= 3 and seen == sorted(seen) and seen[-1] == 8 * GIB


def test_files_cannot_be_copied_to_a_machine_that_is_not_ready(tmp_path: Path) -> None:
    machines = [dict(DEMO_MACHINES[0], ready=False)]
    backend = SimulatorBackend({"machines": machines}, tmp_path)
    with pytest.raises(BackendError, match="h100-1 is not ready"):
        backend.prepare_files("h100-1", model_files("acme/x", GIB))
    with pytest.raises(BackendError, match="not in the simulated inventory"):
        backend.prepare_files("nowhere", model_files("acme/x", GIB))


# ---------------------------------------------------------------- a copy's life


def test_a_copy_starts_serves_logs_scrapes_and_stops(backend: SimulatorBackend) -> None:
    spec = copy_spec(10, "h100-1", env=build_env(load_s_per_gb=0.02, init_s=1.0))
    handle = backend.launch(spec)
    assert handle.port == spec.port and handle.machine == "h100-1"
    assert statuses(backend, handle) == "starting"  # loading: its port refuses connections
    wait_until(lambda: statuses(backend, handle) == "ready", what="the copy to serve")
    (seen,) = backend.observe([handle])
    assert seen.gpu_uuids == ("GPU-demo-h100-1-0",) and seen.pid == handle.pid

    base = f"http://127.0.0.1:{handle.port}"
    models = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "qwen"
    assert httpx.get(f"{base}/v1/models").status_code == 401

    records = backend.logs(handle, None)
    texts = "\n".join(record.text for record in records)
    for line in STARTUP_LINES:
        assert line in texts
    assert {record.level for record in records} == {"INFO"}
    assert all(record.stream == "engine" and record.machine == "h100-1" for record in records)
    assert [record.at for record in records] == sorted({record.at for record in records})

    samples = backend.metrics(handle)
    names = {sample.name for sample in samples}
    assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc"} <= names
    cache = next(s for s in samples if s.name == "vllm:cache_config_info")
    assert cache.labels["gpu_memory_utilization"] == "0.9"

    backend.stop(handle)
    (seen,) = backend.observe([handle])
    assert (seen.status, seen.exit_code) == ("exited", 0)
    assert supervisor.group_members(handle.pid) == []  # type: ignore[arg-type]
    assert backend.metrics(handle) == []
    later = backend.logs(handle, records[-1].at)  # only what came after: the shutdown lines
    assert later and all(record.at > records[-1].at for record in later)
    assert "Shutting down FastAPI HTTP server." in "\n".join(record.text for record in later)


def test_an_engine_that_runs_out_of_memory_at_load_exits_non_zero(
    backend: SimulatorBackend,
) -> None:
    env = {**FAST, **build_env(oom_at_load=True)}
    handle = backend.launch(copy_spec(11, "h100-2", env=env))
    wait_until(lambda: statuses(backend, handle) == "exited", what="the engine to fail")
    (seen,) = backend.observe([handle])
    assert seen.exit_code == 1 and seen.reason == "Error"
    assert "torch.OutOfMemoryError: CUDA out of memory." in seen.message
    errors = [record for record in backend.logs(handle, None) if record.level == "ERROR"]
    assert any("torch.OutOfMemoryError: CUDA out of memory." in r.text for r in errors)
    assert any("Engine core initialization failed" in r.text for r in errors)


def test_an_engine_that_dies_while_serving_is_unhealthy_then_exited(
    backend: SimulatorBackend,
) -> None:
    env = {**FAST, **build_env(crash_after_s=0.3, dead_linger_s=1.0)}
    handle = backend.launch(copy_spec(16, "h100-2", env=env))
    unhealthy = wait_until(
        lambda: [o for o in backend.observe([handle]) if o.reason == "Unhealthy"],
        what="/health to answer 503",
    )
    assert unhealthy[0].status == "starting"  # type: ignore[index]
    assert unhealthy[0].message == "the engine answers /health with 503"  # type: ignore[index]
    wait_until(lambda: statuses(backend, handle) == "exited", what="the engine to exit")
    (seen,) = backend.observe([handle])
    assert seen.exit_code == 1
    assert "CUDA error: an illegal memory access was encountered" in seen.message


def test_a_mig_slice_gives_the_engine_only_the_slices_memory(backend: SimulatorBackend) -> None:
    port = supervisor.free_port()
    spec = copy_spec(
        12, "h200-mig",
        argv=vllm_argv("meta-llama/Llama-3.1-8B-Instruct", port, "--max-model-len", "4096"),
        port=port, mig_profile="1g.18gb",
    )  # fmt: skip
    handle = backend.launch(spec)
    wait_until(lambda: statuses(backend, handle) == "exited", what="the engine to fail")
    (seen,) = backend.observe([handle])
    assert seen.gpu_uuids == ("MIG-demo-h200-0-2",)
    # 16 GB of weights do not fit 90 % of a 16 GiB slice: torch says so, with the slice's size.
    assert "GPU 0 has a total capacity of 16.00 GiB" in seen.message


def test_a_second_copy_on_a_shared_gpu_waits_for_room(backend: SimulatorBackend) -> None:
    first = backend.launch(copy_spec(13, "l4-shared", memory_share=0.5, reserved_bytes=11 * GIB))
    second = copy_spec(14, "l4-shared", memory_share=0.6, reserved_bytes=13 * GIB)
    with pytest.raises(WaitForRoom, match=r"11\.25 GiB free on GPU 0, the copy needs 13\.00 GiB"):
        backend.launch(second)
    other_gpu = backend.launch(copy_spec(15, "l4-shared", gpu_indexes=(1,), memory_share=0.5))
    backend.stop(first)
    assert statuses(backend, first) == "exited"
    third = backend.launch(second)  # the memory is free again
    wait_until(lambda: statuses(backend, third) == "ready", what="the copy to serve")
    # The other GPU's copy never waited: it serves too (once its engine has started).
    wait_until(lambda: statuses(backend, other_gpu) == "ready", what="the other GPU's copy")


def test_the_vllm_command_line_becomes_the_simulators() -> None:
    argv = engine_argv(["vllm", "serve", "m", "--port", "1"], python="/usr/bin/python3")
    assert argv == [
        "/usr/bin/python3",
        "-m",
        "clusters.simulator.engine",
        "serve",
        "m",
        "--port",
        "1",
    ]


@pytest.mark.parametrize("engine", ["vllm", "llama-server"])
def test_with_engine_sockets_a_copy_listens_on_its_own_socket_only(tmp_path: Path, engine: str):
    """As the console's clusters run them: vLLM's --uds, llama-server's --host PATH.sock; the
    port of the command line is not listened on, and the backend reaches the engine anyway."""
    simulator = SimulatorBackend(
        {"machines": DEMO_MACHINES}, tmp_path / "state", engine_sockets=True, stop_timeout_s=5
    )
    port = supervisor.free_port()
    if engine == "vllm":
        argv = vllm_argv("Qwen/Qwen3-0.6B", port, "--max-model-len", "4096")
    else:
        gguf = tmp_path / "tiny.gguf"
        write_tiny_model(tmp_path / "tiny")
        (tmp_path / "tiny" / GGUF_FILE).rename(gguf)
        argv = ("llama-server", "-m", str(gguf), "--alias", "qwen", "--host", "127.0.0.1",
                "--port", str(port), "-c", "512", "--metrics", "--api-key", API_KEY)  # fmt: skip
    handle = simulator.launch(copy_spec(11, "h100-1", argv=argv, port=port))
    try:
        assert handle.socket.endswith("/engine.sock") and str(handle.socket) in " ".join(
            simulator.read_record(11)["argv"]
        )
        wait_until(lambda: statuses(simulator, handle) == "ready", what="the copy to serve")
        with httpx.Client(transport=httpx.HTTPTransport(uds=handle.socket)) as over_socket:
            models = over_socket.get(
                "http://localhost/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}
            )
        assert models.status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        keyed = replace(handle, api_key=API_KEY)  # llama.cpp guards /metrics with the key
        assert simulator.metrics(keyed)
    finally:
        simulator.stop(handle)
    assert statuses(simulator, handle) == "exited"
