"""Hosting on a machine where `make engines` has not run: the copy fails at once with
RUNTIME_ERROR and words that name the fix, never a traceback, and nothing keeps its room.
Real worker, beat and watcher; an engine cache folder that is empty and a PATH without engines."""

from __future__ import annotations

import pytest

from console.models import ApiKey, Role
from deployments.choices import DeploymentState, ErrorCode
from deployments.models import Deployment, Reservation
from tests import factories
from tests.processes import console_processes, console_server, wait_for
from tests.real_engines import host_through_the_api, local_cluster, tiny_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


# Each variant and what its failure says: both hosted on one set of console processes.
MISSING = {
    "safetensors": "vLLM is not installed on this machine",
    "gguf": "llama.cpp's llama-server is not installed on this machine",
}


def test_hosting_without_the_engines_fails_at_once_naming_make_engines(tmp_path, settings):
    bob = factories.make_user("bob")
    factories.add_member(bob, factories.make_team("red"), Role.OPERATOR)
    key = ApiKey.issue(bob, "tests")[1]
    tiny_model(tmp_path / "models", settings)
    local_cluster()
    (tmp_path / "no-engines").mkdir()
    without = {"BERTH_ENGINE_CACHE": str(tmp_path / "no-engines"), "PATH": "/usr/bin:/bin"}
    with console_processes(tmp_path, **without), console_server() as console_url:
        hosted = {
            variant: host_through_the_api(console_url, key, f"tiny-{variant}", variant)
            for variant in MISSING
        }
        for variant, pk in hosted.items():
            wait_for(
                lambda pk=pk: Deployment.objects.get(pk=pk).state == DeploymentState.FAILED,
                60,
                0.3,
                f"the {variant} deployment FAILED",
            )
    for variant, words in MISSING.items():
        deployment = Deployment.objects.get(pk=hosted[variant])
        assert deployment.last_error_code == ErrorCode.RUNTIME_ERROR
        assert words in deployment.last_error_message
        assert "Run `make engines` to install it" in deployment.last_error_message
        assert "Traceback" not in deployment.last_error_message
        assert not Reservation.objects.filter(copy__deployment=deployment).exists()
