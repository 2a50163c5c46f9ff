"""A Ray cluster that requires a token (its head started with RAY_AUTH_MODE=token): refused in
words without the token or with a wrong one (the token itself never in the words), added with
it from a file as addcluster takes it, kept write-only, and its driver connects with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.core.management import CommandError, call_command

from clusters.admin import ClusterAdminForm
from clusters.backends.ray.dashboard import TOKEN_REFUSED
from clusters.models import Cluster
from clusters.ray_driver import start_if_ray, stop
from clusters.registry import backend_for, install_id
from tests.integration.conftest import free_port, ray_temp_dir
from tests.integration.test_ray_clusters import form_fields
from tests.processes import wait_for

pytestmark = pytest.mark.django_db

TOKEN = "tok-" + "7f3a9c2e51b84d06"


@pytest.fixture(scope="module")
def token_head() -> Iterator[str]:
    """A Ray head that requires TOKEN; its address."""
    with ray_temp_dir() as temp_dir:
        yield from started_token_head(temp_dir)


def started_token_head(temp_dir: str) -> Iterator[str]:
    gcs, dashboard = free_port(), free_port()
    ray = Path(sys.executable).parent / "ray"
    argv = [str(ray), "start", "--head", "--block", "--num-cpus=1", f"--port={gcs}",
            f"--dashboard-port={dashboard}", "--include-dashboard=true", "--disable-usage-stats",
            f"--temp-dir={temp_dir}"]  # fmt: skip
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN,
           "RAY_USAGE_STATS_ENABLED": "0"}  # fmt: skip
    head = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{dashboard}/api/v0/cluster_metadata"
        wait_for(lambda: answers(url) == 401, 90, every=1, what="the head asking for its token")
        yield f"127.0.0.1:{gcs}"
    finally:
        os.killpg(head.pid, signal.SIGKILL)  # the head and every process it started
        head.wait(30)


def answers(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return 0


def test_with_a_wrong_token_it_is_refused_in_words_that_do_not_show_it(token_head):
    form = ClusterAdminForm(data={**form_fields(), "address": token_head,
                                  "ray_token": "tok-wrong-5d1e"})  # fmt: skip
    assert not form.is_valid()
    error = form.errors["address"][0]
    assert error == f"cannot connect to the Ray cluster at {token_head}: {TOKEN_REFUSED}"
    assert "tok-wrong" not in error
    assert not Cluster.objects.exists()


def test_added_with_its_token_from_a_file_the_driver_connects_with_it(token_head, tmp_path):
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    with pytest.raises(CommandError) as refused:  # without one
        call_command("addcluster", "locked", "--kind", "ray", "--address", token_head,
                     "--gpu-memory", "H100=80")  # fmt: skip
    assert TOKEN_REFUSED in str(refused.value)
    call_command("addcluster", "locked", "--kind", "ray", "--address", token_head,
                 "--gpu-memory", "H100=80", "--token-file", str(secret))  # fmt: skip
    cluster = Cluster.objects.get(name="locked")
    assert cluster.ray_token() == TOKEN and TOKEN not in cluster.ray_token_encrypted
    assert TOKEN not in ClusterAdminForm(instance=cluster).as_p()

    driver = start_if_ray(cluster.pk)
    try:
        backend = backend_for(cluster)
        deadline = time.monotonic() + 90
        while True:  # the driver connects (Ray's client sends the token) and answers
            try:
                assert backend.running_engines(install_id()) == []
                break
            except Exception:
                if time.monotonic() > deadline or (driver and driver.poll() is not None):
                    raise
                time.sleep(1)
    finally:
        stop(driver)
