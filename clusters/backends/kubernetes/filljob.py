"""The Job that fills the model cache before a copy starts, and how to read how it ended.

Pure functions, like manifests.py. Where the namespace has a ReadWriteMany claim for the cache
(shared storage), one Job fills it for every node. Where it has none, each node keeps its own
cache in a host directory, and one Job per node fills it there (pinned to the node by its
hostname). Either way the engine's pods mount the same cache and find the files already there.

The Job runs huggingface_hub's snapshot_download (the engine image has it) for exactly the files
this server's download chose, at the commit it pinned; the program is fixed and the repository,
revision and file names are its arguments, so nothing is ever interpreted by a shell.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from clusters.backends.base import ModelFiles
from clusters.backends.kubernetes.discovery import AMD_GPU, BERTH, MANAGED_BY, NVIDIA_GPU
from clusters.backends.kubernetes.manifests import (
    HF_CACHE,
    HOSTNAME_LABEL,
    ManifestSettings,
    cache_volume,
    hf_token_env,
    team_cache,
)

FILL_CONTAINER = "fill"
FILES_LABEL = "berth.io/model-files"
# Every few seconds the program prints the bytes in the repository's blob folder (finished
# and partial files), which the backend reads from the pod's log as the fill's progress.
BYTES_MARK = "berth-bytes"
FILL_PROGRAM = """\
import os, sys, threading, time
from huggingface_hub import snapshot_download
repo, revision, *names = sys.argv[1:]
home = os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface"))
blobs = os.path.join(home, "hub", "models--" + repo.replace("/", "--"), "blobs")
def report():
    while True:
        total = 0
        for entry in os.scandir(blobs) if os.path.isdir(blobs) else ():
            try:
                total += entry.stat().st_size
            except OSError:
                pass
        print("berth-bytes", total, flush=True)
        time.sleep(5)
threading.Thread(target=report, daemon=True).start()
path = snapshot_download(repo, revision=revision or None, allow_patterns=names or None)
print("berth: model cache filled at", path, flush=True)
"""
# Retries of a failed download pod before the Job is failed (a flaky network, a node restart).
FILL_BACKOFF_LIMIT = 2

JobOutcome = Literal["running", "succeeded", "failed"]


def fill_job_name(files: ModelFiles, machine: str | None) -> str:
    """One Job per files and node (or per files, for a shared cache): a DNS-1123 name."""
    where = hashlib.sha256(machine.encode()).hexdigest()[:8] if machine else "shared"
    whose = (
        f"-{hashlib.sha256(files.cache_owner.encode()).hexdigest()[:6]}"
        if files.cache_owner
        else ""
    )
    return f"berth-fill-{files.key[:12]}-{where}{whose}"


def fill_cache_mount(files: ModelFiles) -> dict[str, Any]:
    """Where the Job writes: the shared cache, or the team's own part of it."""
    mount = {"name": "model-cache", "mountPath": HF_CACHE}
    return {**mount, "subPath": team_cache(files.cache_owner)} if files.cache_owner else mount


def build_fill_job(
    files: ModelFiles, machine: str | None, namespace: str, settings: ManifestSettings
) -> dict[str, Any]:
    """The Job body. `machine` pins it to one node; None fills the shared claim from anywhere."""
    name = fill_job_name(files, machine)
    labels = {MANAGED_BY: BERTH, FILES_LABEL: files.key}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        # GPU nodes are often tainted so that only GPU pods land there; the cache is on them.
        "tolerations": [{"key": key, "operator": "Exists"} for key in (NVIDIA_GPU, AMD_GPU)],
        "containers": [
            {
                "name": FILL_CONTAINER,
                "image": settings.image,
                "command": ["python3", "-c", FILL_PROGRAM, files.repo_id, files.revision],
                "args": list(files.names),
                "env": [
                    {"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"},
                    *hf_token_env(settings),
                ],
                "volumeMounts": [fill_cache_mount(files)],
            }
        ],
        "volumes": [{"name": "model-cache", **cache_volume(settings)}],
    }
    if machine:
        pod["nodeSelector"] = {HOSTNAME_LABEL: machine}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                "berth.io/machine": machine or "",
                "berth.io/model": f"{files.repo_id}@{files.revision or 'main'} {files.variant}",
            },
        },
        "spec": {
            "backoffLimit": FILL_BACKOFF_LIMIT,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def job_outcome(job: Any) -> tuple[JobOutcome, str]:
    """How a fill Job stands, and the reason Kubernetes gave when it failed."""
    status = job.status
    if status is None:
        return "running", ""
    if status.succeeded:
        return "succeeded", ""
    for condition in status.conditions or ():
        if condition.type == "Failed" and condition.status == "True":
            reason = condition.reason or "Failed"
            return "failed", f"{reason}: {condition.message}" if condition.message else reason
    return "running", ""


def bytes_reported(log_text: str) -> int | None:
    """The last byte count the fill program printed, if any."""
    for line in reversed(log_text.splitlines()):
        mark, _, count = line.strip().partition(" ")
        if mark == BYTES_MARK and count.isdigit():
            return int(count)
    return None
