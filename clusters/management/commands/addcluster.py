"""manage.py addcluster: add a cluster from a terminal, with the same checks and the same words
as the admin's form (the form is the one home of those rules), exit code 1 on refusal. Secrets
come from a file or the environment, never from the command line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from clusters.admin import ClusterAdminForm
from clusters.models import ClusterKind, RepackPolicy, SharingStrategy, Topology

# The form's fields as this command's options name them, for the errors.
OPTION = {
    "name": "NAME",
    "kind": "--kind",
    "address": "--address",
    "gpu_memory_gib": "--gpu-memory",
    "ray_token": "--token-file/--token-env",
    "kubeconfig": "--kubeconfig",
    "namespace": "--namespace",
    "simulated_inventory": "--spec",
    "sharing_strategy": "--sharing",
    "repack_policy": "--repack-policy",
    "consolidate_window": "--consolidate-window",
    "consolidate_above_percent": "--consolidate-above",
    "consolidate_below_load": "--consolidate-below-load",
}


def read_file(option: str, path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as error:
        raise CommandError(f"{option} {path}: cannot read it ({error.strerror})") from None


def gpu_memory(pairs: list[str]) -> dict[str, float]:
    from clusters.backends.ray.dashboard import parse_gpu_memory

    try:
        return parse_gpu_memory(pairs)
    except ValueError as bad:
        raise CommandError(f"--gpu-memory {bad}") from None


def token(options: dict[str, Any]) -> str:
    if options["token_file"] and options["token_env"]:
        raise CommandError("give --token-file or --token-env, not both")
    if options["token_file"]:
        return read_file("--token-file", options["token_file"]).strip()
    if options["token_env"]:
        value = os.environ.get(options["token_env"], "")
        if not value:
            raise CommandError(f"--token-env {options['token_env']}: that variable is not set")
        return value
    return ""


def only_for(options: dict[str, Any], kind: str) -> None:
    """Options that mean something for one kind only are refused with another."""
    meant = {
        "address": ClusterKind.RAY,
        "gpu_memory": ClusterKind.RAY,
        "simulated_engines": ClusterKind.RAY,
        "token_file": ClusterKind.RAY,
        "token_env": ClusterKind.RAY,
        "kubeconfig": ClusterKind.KUBERNETES,
        "namespace": ClusterKind.KUBERNETES,
        "spec": ClusterKind.SIMULATOR,
    }
    for option, its_kind in meant.items():
        if options[option] and kind != its_kind:
            flag = "--" + option.replace("_", "-")
            raise CommandError(f"{flag} is for --kind {its_kind} only, not --kind {kind}")


class Command(BaseCommand):
    help = (
        "Add a cluster: --kind ray --address HEAD:6379 [--gpu-memory TYPE=GiB …] "
        "[--token-file F | --token-env VAR]; --kind kubernetes --kubeconfig FILE "
        "[--namespace NS]; --kind standalone; --kind simulator --spec FILE; re-packing with "
        "--repack-policy and --consolidate-*. Checked as the "
        "admin's form checks it; exit code 1 on refusal."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--kind", required=True, choices=ClusterKind.values)
        parser.add_argument("--description", default="")
        parser.add_argument("--sharing", choices=SharingStrategy.values, default=None)
        parser.add_argument("--address", help="Ray: the head's address as ray.init takes it")
        parser.add_argument(
            "--simulated-engines",
            action="store_true",
            help="Ray: copies run the engine simulator instead of vLLM (demos, tests)",
        )
        parser.add_argument(
            "--gpu-memory",
            action="append",
            default=[],
            metavar="TYPE=GiB",
            help="Ray: the GPU memory of an accelerator type Ray names, for nodes where NVML "
            "cannot read it (repeat per type)",
        )
        parser.add_argument("--token-file", help="Ray: a file holding the cluster's token")
        parser.add_argument("--token-env", help="Ray: a variable holding the cluster's token")
        parser.add_argument("--kubeconfig", help="Kubernetes: the kubeconfig file")
        parser.add_argument("--namespace", help="Kubernetes: the namespace (default berth)")
        parser.add_argument("--spec", help="simulator: a JSON file of machines and GPUs")
        parser.add_argument(
            "--repack-policy",
            default=RepackPolicy.OFF,
            help="off (moves only where an operator accepts them), on_request (moves to make "
            "room without asking) or consolidate (also packs copies to free whole GPUs)",
        )
        parser.add_argument(
            "--consolidate-window",
            default="",
            metavar="HH:MM-HH:MM",
            help="consolidate: when it may (the console's time zone; default: any time)",
        )
        parser.add_argument(
            "--consolidate-above",
            default="30",
            metavar="PERCENT",
            help="consolidate: when more than this share of the free room lies in pieces",
        )
        parser.add_argument(
            "--consolidate-below-load",
            default="1",
            metavar="REQUESTS",
            help="consolidate: only while its copies have fewer requests in flight each",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        kind = options["kind"]
        only_for(options, kind)
        form = ClusterAdminForm(data=self.form_data(options, kind))
        if not form.is_valid():
            field, errors = next(iter(form.errors.items()))
            where = OPTION.get(field, field)
            raise CommandError(f"{where}: {' '.join(errors)}")
        cluster = form.save()
        from clusters.inventory import refresh

        discovery = refresh(cluster)
        self.stdout.write(f"Added {kind} cluster {cluster.name}. {discovery.message}".rstrip())

    def form_data(self, options: dict[str, Any], kind: str) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": options["name"],
            "description": options["description"],
            "kind": kind,
            "topology": Topology.STANDALONE if kind == ClusterKind.STANDALONE else Topology.MANAGED,
            "namespace": options["namespace"] or "berth",
            "engine_image": "vllm/vllm-openai",
            "sharing_strategy": options["sharing"] or default_sharing(kind),
            "simulated_inventory": "{}",
            "gpu_memory_gib": "{}",
            "repack_policy": options["repack_policy"],
            "consolidate_window": options["consolidate_window"],
            "consolidate_above_percent": options["consolidate_above"],
            "consolidate_below_load": options["consolidate_below_load"],
        }
        if kind == ClusterKind.RAY:
            data["address"] = options["address"] or ""
            data["gpu_memory_gib"] = json.dumps(gpu_memory(options["gpu_memory"]))
            data["ray_token"] = token(options)
            data["simulated_engines"] = "on" if options["simulated_engines"] else ""
        if kind == ClusterKind.KUBERNETES:
            if not options["kubeconfig"]:
                raise CommandError("--kind kubernetes needs --kubeconfig FILE")
            data["kubeconfig"] = read_file("--kubeconfig", options["kubeconfig"])
        if kind == ClusterKind.SIMULATOR:
            if not options["spec"]:
                raise CommandError("--kind simulator needs --spec FILE (JSON: machines and GPUs)")
            data["simulated_inventory"] = read_file("--spec", options["spec"])
        return data


def default_sharing(kind: str) -> str:
    """Ray and the simulator share GPUs by fractions; the others one copy per GPU unless set."""
    shares = kind in (ClusterKind.RAY, ClusterKind.SIMULATOR)
    return SharingStrategy.FRACTIONAL if shares else SharingStrategy.NONE
