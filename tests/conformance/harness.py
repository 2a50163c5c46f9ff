"""One engine, real or simulated, started through Berth's own backend with the same argv and
environment: the real vLLM CPU build (or llama-server) through the standalone backend, the
engine simulator through the simulator backend. Outcomes are read through Berth's code too:
the backend's observation and log reader, the classifier, the metrics reader."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clusters.backends.base import CopyHandle, CopySpec, Observation
from clusters.backends.local import LocalProcessBackend, http_get
from clusters.backends.simulator import SimulatorBackend
from clusters.backends.standalone import StandaloneBackend
from clusters.backends.supervisor import free_port
from clusters.registry import engine_programs
from deployments.classify import Failure, classify

# The key the gateway tests give READY copies, so their helpers can point copies here.
KEY = "sk-engine-only-the-gateway-knows"
SERVED = "tiny"
REAL, SIMULATED = "real", "simulated"
# The simulated machine: a GPU for each simulated engine a module starts (handed out in turn,
# never twice in a module), so that no simulated engine finds another's memory taken (the real
# engines share this machine's CPU by their own budgets).
SIM_GPUS = 32
SIM_INVENTORY = {
    "machines": [
        {
            "name": "sim-1",
            "accelerators": [
                {"index": n, "product": "NVIDIA-L4", "memory_mib": 23034, "uuid": f"GPU-sim-{n}"}
                for n in range(SIM_GPUS)
            ],
        }
    ]
}
_next_copy = iter(range(1000, 100000))
_next_sim_gpu = iter(range(10**6))


def model_facts(folder: Path) -> dict[str, Any]:
    """What the simulator knows of the tiny model: its config.json and its weights' size."""
    facts = json.loads((folder / "config.json").read_text())
    weights = folder / "model.safetensors"
    facts["weights_bytes"] = weights.stat().st_size if weights.exists() else 0
    return facts


@dataclass
class Started:
    kind: str
    backend: LocalProcessBackend
    handle: CopyHandle

    @property
    def port(self) -> int:
        return int(self.handle.port or 0)

    def observe(self) -> Observation:
        return self.backend.observe_one(self.handle)

    def wait(self, until: set[str], timeout: float = 300) -> Observation:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = self.observe()
            if seen.status in until:
                return seen
            time.sleep(0.5)
        raise AssertionError(f"the {self.kind} engine was not {until} within {timeout:.0f} s")

    def lines(self) -> list[str]:
        return [record.text for record in self.backend.logs(self.handle, None)]

    def failure(self) -> tuple[Observation, Failure | None]:
        """How the engine ended, and what Berth's classifier makes of its lines and exit."""
        seen = self.wait({"exited", "gone"})
        return seen, classify(self.lines(), seen.exit_code)

    def failed_for_good(self, exit_code: int) -> Failure:
        """The engine exited with `exit_code`, and Berth will not start it again as it was."""
        seen, failure = self.failure()
        assert (seen.status, seen.exit_code) == ("exited", exit_code)
        assert failure is not None and failure.permanent, failure
        return failure

    def get(self, path: str, key: str = KEY) -> tuple[int, bytes]:
        return http_get(f"http://127.0.0.1:{self.port}{path}", 10, key)

    def stop(self) -> None:
        self.backend.stop(self.handle)


def backend_of(kind: str, state_dir: Path, folder: Path) -> LocalProcessBackend:
    if kind == REAL:
        return StandaloneBackend(state_dir, "this-machine", programs=engine_programs())
    facts = model_facts(folder)
    return SimulatorBackend(SIM_INVENTORY, state_dir, lambda spec: facts)


def start(
    kind: str, state_dir: Path, folder: Path, command: list[str], env: dict[str, str]
) -> Started:
    """`command` is what Berth renders before the port: e.g. ["vllm", "serve", FOLDER, …]."""
    port = free_port()
    argv = [*command, "--host", "127.0.0.1", "--port", str(port)]
    real = kind == REAL
    copy_id = next(_next_copy)
    spec = CopySpec(
        copy_id=copy_id,
        deployment_name=SERVED,
        ordinal=0,
        argv=tuple(argv),
        env=env,
        machine="this-machine" if real else "sim-1",
        gpu_indexes=() if real else (next(_next_sim_gpu) % SIM_GPUS,),
        memory_share=0.0 if real else 0.8,
        port=port,
        on_cpu=real,
        model_files=str(folder),
        secret_env={"VLLM_API_KEY": KEY, "LLAMA_API_KEY": KEY},
    )
    backend = backend_of(kind, state_dir, folder)
    # As the watcher does: the handle carries the key for what the engine guards with it.
    return Started(kind, backend, replace(backend.launch(spec), api_key=KEY))
