"""From a Copy row to what a backend needs (a CopySpec, a CopyHandle), and the Celery-side
steps that use them: prepare the files, launch the engine, stop it."""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

from django.db import transaction
from django.utils import timezone

from catalog import trust
from catalog.downloads import mark_must_redownload
from clusters.backends.base import ENGINE_GONE, BackendError, CopyHandle, CopySpec
from clusters.backends.engines import EngineMissing
from clusters.backends.local import WaitForRoom
from clusters.backends.supervisor import free_port
from clusters.models import Accelerator, ClusterKind
from clusters.registry import backend_for, install_id
from deployments import lifecycle, machine_files, placing, transitions
from deployments.choices import DEPLOYMENT_PLACEABLE, CopyState, DeploymentState, ErrorCode
from deployments.classify import Failure
from deployments.engine.argv import (
    LaunchFacts,
    cpu_environment,
    cpu_threads,
    key_environment,
    llamacpp_argv,
    vllm_argv,
)
from deployments.engine.settings import EngineSettingsError
from deployments.models import Copy, Deployment, Reservation
from placement import shares

log = logging.getLogger(__name__)


def handle_for(copy: Copy) -> CopyHandle:
    return CopyHandle(
        copy_id=copy.pk,
        machine=copy.machine.name if copy.machine_id else "",
        pid=copy.process_id,
        port=copy.port,
        pod_name=copy.pod_name,
        socket=copy.socket_path,
    )


def placed_accelerators(copy: Copy) -> list[Accelerator]:
    rows = Reservation.objects.filter(copy=copy).select_related("accelerator__parent")
    return [r.accelerator for r in rows if r.accelerator is not None]


def served_name(deployment: Deployment) -> str:
    return deployment.name


def tensor_parallel(deployment: Deployment) -> int:
    return shares.tensor_parallel(float(deployment.accelerators_per_copy))


def engine_share(copy: Copy) -> float:
    """The share placement gave the copy; for a copy placed without one, the share its
    deployment's settings give a copy of its size (as the editor and scale dialog show)."""
    if copy.gpu_memory_utilization:
        return copy.gpu_memory_utilization
    deployment = copy.deployment
    asked = deployment.engine_settings.get("gpu_memory_utilization")
    return shares.engine_share(float(deployment.accelerators_per_copy), asked)


def model_reference(deployment: Deployment) -> str:
    """What the engine loads: on this machine, the folder the files were downloaded to; on
    other clusters, the repository id (their own cache holds the files)."""
    if deployment.cluster.kind == ClusterKind.STANDALONE:
        kept = lifecycle.files_on_this_server(deployment)
        if kept is not None and kept.path:
            return kept.path
    return deployment.model.repo_id


def model_revision(deployment: Deployment) -> str:
    """The revision the engine asks for. On Kubernetes it loads from the cache a Job filled at
    the commit this server's download pinned: it names that commit, so a branch that moved
    since cannot make it fetch other files."""
    if deployment.cluster.kind == ClusterKind.KUBERNETES:
        kept = lifecycle.files_on_this_server(deployment)
        if kept is not None and kept.revision:
            return kept.revision
    return deployment.revision


def gguf_path(deployment: Deployment) -> str:
    kept = lifecycle.files_on_this_server(deployment)
    folder = kept.path if kept is not None and kept.path else deployment.model.repo_id
    return f"{folder}/{deployment.variant.gguf_file}"


def on_cpu(gpus: list[Accelerator]) -> bool:
    return any(gpu.vendor == "cpu" for gpu in gpus)


def launch_facts(copy: Copy, port: int, gpus: list[Accelerator]) -> LaunchFacts:
    deployment = copy.deployment
    cpu = on_cpu(gpus)
    cores = copy.machine.cpu_count if copy.machine_id else 0
    return LaunchFacts(
        model=model_reference(deployment),
        served_name=served_name(deployment),
        port=port,
        gpu_memory_utilization=engine_share(copy),
        tensor_parallel=tensor_parallel(deployment),
        revision=model_revision(deployment),
        on_cpu=cpu,
        cpu_threads=cpu_threads(float(deployment.accelerators_per_copy), cores) if cpu else 0,
        kv_cache_bytes=cpu_cache_bytes(deployment, copy.allocated_bytes) if cpu else 0,
        engine_version=deployment.cluster.engine_version,
        trust_remote_code=trust.is_trusted(deployment.model, deployment.revision),
    )


def cpu_cache_bytes(deployment: Deployment, budget_bytes: int) -> int:
    return placing.cpu_kv_cache_bytes(
        deployment.model, deployment.variant, deployment.engine_settings, budget_bytes
    )


def engine_argv(copy: Copy, port: int) -> list[str]:
    """The command line a copy is launched with (its key goes in its environment)."""
    return argv_for(copy, launch_facts(copy, port, placed_accelerators(copy)))


def argv_for(copy: Copy, facts: LaunchFacts) -> list[str]:
    deployment = copy.deployment
    if deployment.variant.engine == "llamacpp":
        return llamacpp_argv(deployment.engine_settings, facts, gguf_path(deployment))
    # The simulator backend runs the same `vllm serve …` argv with the engine simulator.
    return vllm_argv(deployment.engine_settings, facts)


def simulator_env(copy: Copy) -> dict[str, str]:
    """The simulated hardware and model for the engine simulator (see clusters/simulator)."""
    model = copy.deployment.model
    facts = {
        "num_hidden_layers": model.layers,
        "num_attention_heads": model.attention_heads,
        "num_key_value_heads": model.kv_heads,
        "head_dim": model.head_dim,
        "hidden_size": model.hidden_size,
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_context,
        "weights_bytes": copy.deployment.variant.size_bytes,
        "encoder_only": model.encoder_only,
    }
    env = {"BERTH_SIM_MODEL_JSON": json.dumps(facts)}
    inventory = copy.deployment.cluster.simulated_inventory or {}
    env.update({k: str(v) for k, v in (inventory.get("engine_env") or {}).items()})
    per_deployment = (inventory.get("deployments") or {}).get(copy.deployment.name) or {}
    env.update({k: str(v) for k, v in per_deployment.items()})
    return env


def spec_for(copy: Copy, port: int = 0, api_key: str = "") -> CopySpec:
    gpus = placed_accelerators(copy)
    deployment = copy.deployment
    slices = [g for g in gpus if g.parent_id]
    facts = launch_facts(copy, port, gpus)
    env: dict[str, Any] = cpu_environment(deployment.variant.engine, facts)
    if deployment.cluster.kind == ClusterKind.SIMULATOR:
        env.update(simulator_env(copy))
    return CopySpec(
        copy_id=copy.pk,
        deployment_name=deployment.name,
        ordinal=copy.ordinal,
        argv=tuple(argv_for(copy, facts)) if port else (),
        env=env,
        machine=copy.machine.name if copy.machine_id else "",
        gpu_indexes=tuple(sorted({(g.parent or g).index for g in gpus})),
        mig_slice_uuid=slices[0].uuid if slices else "",
        mig_profile=slices[0].mig_profile if slices else "",
        memory_share=copy.gpu_memory_utilization or 0.0,
        reserved_bytes=copy.allocated_bytes,
        port=port,
        token_owner=deployment.team.name,
        on_cpu=facts.on_cpu,
        model_files=local_model_files(deployment),
        install_id=install_id(),
        cache_owner=deployment.team.name if own_cache(deployment) else "",
        secret_env=key_environment(deployment.variant.engine, api_key) if api_key else {},
    )


def own_cache(deployment: Deployment) -> bool:
    return trust.kept_per_team(deployment.model, deployment.revision)


def local_model_files(deployment: Deployment) -> str:
    """The folder of the model's files on this machine, where the engine loads them from."""
    reference = model_reference(deployment)
    return reference if reference.startswith("/") else ""


def load_copy(copy_id: int) -> Copy | None:
    related = ("deployment__cluster", "deployment__model", "deployment__variant", "machine")
    return Copy.objects.select_related(*related).filter(pk=copy_id).first()


def prepare(copy_id: int) -> None:
    """Put the model's files on the copy's machine, then launch it (or fail it with
    MUST_REDOWNLOAD). This runs on the transfer queue; once the files are there the launch runs
    here too, since a hop back to the control queue would only add its wait to every start."""
    copy = load_copy(copy_id)
    if copy is None or copy.state != CopyState.COPYING_FILES:
        return
    server_copy = lifecycle.files_on_this_server(copy.deployment)
    if server_copy is None:
        words = (
            "The model's files are no longer on this server: download them again "
            "(the model's page, or Models → On this server)."
        )
        missing_files(copy, (), words)
        return
    try:
        result = machine_files.copy_for_launch(copy, server_copy)
    except BackendError as error:
        lifecycle.fail_copy(copy, Failure(ErrorCode.RUNTIME_ERROR, False, str(error)))
        return
    if result is None:
        return  # another worker is copying these files to this machine; it sends the copy on
    if result.present:
        launch(copy_id)
        return
    missing_files(copy, result.missing, result.message)


def missing_files(copy: Copy, missing: tuple[str, ...], message: str) -> None:
    words = message or f"Model files are missing on {copy.machine.name}: {', '.join(missing[:3])}"
    with transaction.atomic():
        transitions.move_copy_if_in(
            copy.pk,
            {CopyState.COPYING_FILES},
            CopyState.FAILED,
            message=words,
            last_error_code=ErrorCode.MUST_REDOWNLOAD,
            last_error_message=words,
        )
        lifecycle.release(copy)
        kept = lifecycle.files_on_this_server(copy.deployment)
        if kept is not None:  # the console's own copy must be fetched again too
            mark_must_redownload(kept.pk, words)
        deployment = Deployment.objects.get(pk=copy.deployment_id)
        if deployment.state in DEPLOYMENT_PLACEABLE:
            transitions.move_deployment(
                deployment.pk,
                DeploymentState.MUST_REDOWNLOAD,
                message=words,
                last_error_code=ErrorCode.MUST_REDOWNLOAD,
                last_error_message=words,
                last_error_at=timezone.now(),
            )


def new_engine_key() -> str:
    """A copy's own engine API key (it travels in the engine's environment, never its argv;
    the prefix keeps it readable as what it is in an engine's own messages)."""
    return f"engine-{secrets.token_urlsafe(24)}"


def engine_port(copy: Copy) -> int:
    """Local engines each take a free port on 127.0.0.1; in a pod the engine has its own IP."""
    if copy.deployment.cluster.kind == ClusterKind.KUBERNETES:
        return 8000
    return free_port()


def neighbour_starting(copy: Copy) -> Copy | None:
    """Another copy starting on one of this copy's GPUs (vLLM checks free memory at start)."""
    gpu_ids = Reservation.objects.filter(copy=copy).values_list("accelerator_id", flat=True)
    return (
        Copy.objects.filter(
            state=CopyState.STARTING, reservations__accelerator_id__in=list(gpu_ids)
        )
        .exclude(pk=copy.pk)
        .first()
    )


def claim_for_launch(copy_id: int) -> tuple[Copy, str] | None:
    """COPYING_FILES → STARTING with a port and a fresh engine key, unless a neighbour starts."""
    with transaction.atomic():
        # Lock the copy's GPUs first: two copies of one GPU claimed at the same moment must not
        # both see "no neighbour starting" and start together.
        gpu_ids = Reservation.objects.filter(copy_id=copy_id).values_list(
            "accelerator_id", flat=True
        )
        list(Accelerator.objects.select_for_update().filter(pk__in=list(gpu_ids)).order_by("pk"))
        copy = (
            Copy.objects.select_for_update()
            .filter(pk=copy_id, state=CopyState.COPYING_FILES)
            .first()
        )
        if copy is None:
            return None
        neighbour = neighbour_starting(copy)
        if neighbour is not None:
            Copy.objects.filter(pk=copy.pk).update(
                pending_reason=f"Waits for copy {neighbour.ordinal} on the same GPU to start."
            )
            return None
        copy = load_copy(copy_id)
        assert copy is not None
        api_key = new_engine_key()
        port = engine_port(copy)
        copy.set_engine_api_key(api_key)
        now = timezone.now()
        transitions.move_copy(
            copy.pk,
            CopyState.STARTING,
            message=f"Starting the engine (attempt {copy.attempts + 1}).",
            attempts=copy.attempts + 1,
            port=port,
            started_at=now,
            startup_deadline=now + lifecycle.startup_deadline(copy),
            pending_reason="",
            engine_api_key_encrypted=copy.engine_api_key_encrypted,
            log_cursor="",
        )
        return load_copy(copy_id), api_key  # type: ignore[return-value]


def launch(copy_id: int) -> None:
    claimed = claim_for_launch(copy_id)
    if claimed is None:
        return
    copy, api_key = claimed
    backend = backend_for(copy.deployment.cluster)
    try:
        handle = backend.launch(spec_for(copy, port=copy.port or 0, api_key=api_key))
    except WaitForRoom as waiting:
        # Memory that placement counted as free is still held (by something outside Berth):
        # give the room back and wait for it, rather than fail.
        lifecycle.give_up_room(
            copy,
            {CopyState.STARTING},
            CopyState.PENDING,
            message=str(waiting),
            pending_reason=str(waiting),
        )
        lifecycle.refresh_state(copy.deployment_id)
        return
    except EngineMissing as missing:
        # Trying again cannot help until someone installs the engine: it waits for the operator.
        lifecycle.fail_copy(copy, Failure(ErrorCode.RUNTIME_ERROR, True, str(missing)))
        return
    except EngineSettingsError as refused:
        # Checked again at launch: stored settings the cluster's vLLM (or the review) refuses
        # never reach an engine; the operator changes them.
        words = f"The engine settings are refused: {refused}. Change them in Engine settings."
        lifecycle.fail_copy(copy, Failure(ErrorCode.RUNTIME_ERROR, True, words))
        return
    except BackendError as error:
        lifecycle.fail_copy(copy, Failure(ErrorCode.RUNTIME_ERROR, False, str(error)))
        return
    Copy.objects.filter(pk=copy.pk).update(
        process_id=handle.pid,
        pod_name=handle.pod_name,
        port=handle.port or copy.port,
        socket_path=handle.socket,
    )
    lifecycle.refresh_state(copy.deployment_id)


def stop(copy_id: int) -> None:
    """Stop a copy's engine. Its room is given back only when its engine is seen gone: here,
    when the backend's stop waited for it (local engines); else when the watcher sees it go
    (a Kubernetes pod terminating still holds its GPU)."""
    copy = load_copy(copy_id)
    if copy is None or copy.state != CopyState.STOPPING:
        return
    if copy.process_id is None and not copy.pod_name:
        lifecycle.observed_stopped(copy, "Stopped before its engine started.")
        return
    backend = backend_for(copy.deployment.cluster)
    handle = handle_for(copy)
    try:
        backend.stop(handle)
        (seen,) = backend.observe([handle])
    except BackendError as error:
        log.warning("stopping copy %s failed: %s", copy.pk, error)
        return
    if seen.status in ENGINE_GONE:
        lifecycle.observed_stopped(copy)
