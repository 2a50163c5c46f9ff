"""The real vLLM CPU engine on a Ray cluster, with the real processes (worker, beat, the watcher
and its Ray driver, the gateway): a node that has vLLM installed and the tiny model in its own
Hugging Face cache (nothing can be downloaded here) runs the copy's actor, which starts `vllm
serve` as Berth rendered it; the copy becomes READY on the node Berth planned, a chat answers
through the gateway with vLLM's fingerprint, vLLM's own lines arrive as the copy's logs, and a
stop ends the actor and gives the room back.

The engine comes from `make engines`; without it this test fails, naming what is missing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command

from catalog.management.commands.make_tiny_model import tiny_folder
from catalog.models import Model
from clusters.models import Cluster
from clusters.registry import engine_programs
from console.models import ApiKey
from deployments import actions
from deployments.choices import DeploymentState
from deployments.models import Copy, LogLine, Reservation
from tests.integration.test_lifecycle import reached
from tests.integration.test_ray_copies import described, ray_actors
from tests.processes import console_processes, gateway_server, wait_for
from tests.real_engines import TINY, tiny_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]

ENGINE_START_S = 400  # vLLM's CPU build loads in 30-70 s on 2 cores; this machine is busy too
FAST = {"BERTH_RECONCILE_EVERY_S": "1", "BERTH_GATEWAY_REFRESH_S": "0.2"}
COMMIT = "5b1d0c4e" * 5  # the revision the node's cache holds as `main`


def node_hub_cache(model_folder: Path, cache: Path) -> Path:
    """The model's files as a node's Hugging Face cache holds them once fetched (`main` → a
    snapshot), the GGUF file left out: vLLM loads the safetensors."""
    repo = cache / f"models--{TINY.replace('/', '--')}"
    shutil.copytree(model_folder, repo / "snapshots" / COMMIT,
                    ignore=shutil.ignore_patterns("*.gguf"))  # fmt: skip
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return cache


def test_the_real_vllm_cpu_engine_serves_a_copy_on_a_ray_node(
    ray_cluster, tmp_path, settings, bob, red
):
    vllm = engine_programs().binary("vllm")  # missing: fails here, saying to run make engines
    tiny_model(tmp_path / "models", settings)
    cache = node_hub_cache(tiny_folder(), tmp_path / "hub")
    node_env = {
        "PATH": f"{Path(vllm).parent}:{os.environ['PATH']}",  # vLLM installed on the node
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: the node's own setting for its CPU engines
        "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"),
    }
    node = ray_cluster.cluster.add_node(num_cpus=1, num_gpus=1, env_vars=node_env,
                                        resources={"accelerator_type:L4": 1})  # fmt: skip
    ray_cluster.cluster.wait_for_nodes()
    call_command("addcluster", "ray-vllm", "--kind", "ray", "--address", ray_cluster.address,
                 "--gpu-memory", "L4=24")  # fmt: skip
    cluster = Cluster.objects.get(name="ray-vllm")
    key = ApiKey.issue(bob, "real on ray")[1]
    try:
        with console_processes(tmp_path, **FAST), gateway_server(**FAST) as gateway:
            model = Model.objects.get(repo_id=TINY)  # registered by make_tiny_model
            deployment = actions.host(bob, actions.HostRequest(
                team=red, model=model, variant=model.variants.get(name="safetensors"),
                cluster=cluster, name="tiny-on-ray",
                engine_settings={"max_model_len": 512, "enforce_eager": True}))  # fmt: skip
            wait_for(reached(deployment, DeploymentState.DEPLOYED), ENGINE_START_S, every=1,
                     what=f"DEPLOYED on the Ray node ({described(deployment)})")  # fmt: skip
            copy = Copy.objects.get(deployment=deployment)
            assert copy.machine.accelerators.first().product == "L4"  # the node Berth planned
            actor = ray_actors(ray_cluster.dashboard, tmp_path)[copy.pod_name]
            assert actor.state == "ALIVE" and copy.machine.name.endswith(actor.node_id[:8])

            body = {"model": "tiny-on-ray", "messages": [{"role": "user", "content": "Hi"}],
                    "max_tokens": 8, "temperature": 0}  # fmt: skip
            reply = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=120,
                               headers={"Authorization": f"Bearer {key}"})  # fmt: skip
            assert reply.status_code == 200, reply.text
            assert reply.json()["system_fingerprint"].startswith("vllm-0.32.0")
            # vLLM's own lines, the CPU build's among them (the simulator plays a GPU engine).
            for line in ("Starting vLLM server on http://127.0.0.1:", "CPU KV cache size:"):
                wait_for(lambda line=line: LogLine.objects.filter(copy=copy, text__contains=line)
                         .exists(), 60, what=f"{line!r} in the copy's logs")  # fmt: skip

            actions.stop(bob, deployment)
            wait_for(reached(deployment, DeploymentState.STOPPED), 120, every=0.5,
                     what="STOPPED")  # fmt: skip
            gone = ray_actors(ray_cluster.dashboard, tmp_path)[copy.pod_name]
            assert gone.state == "DEAD"
            assert not Reservation.objects.filter(copy__deployment=deployment).exists()
    finally:
        ray_cluster.cluster.remove_node(node)
