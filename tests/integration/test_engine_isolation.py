"""Local engines run as one unprivileged user per team, each copy in a folder of its own: a
probe program launched as an engine by the standalone backend reports what it can reach.
It must not read the console's keys, log into the embedded PostgreSQL or Redis without their
passwords, change the model files, or reach another team's engine: its environment, its
folder, or the copies' records and logs."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings

from clusters.backends import isolation
from clusters.backends.base import CopySpec
from clusters.backends.standalone import StandaloneBackend
from clusters.backends.supervisor import free_port
from clusters.registry import engine_programs

PROBE = Path(__file__).resolve().parents[1] / "programs" / "probe_engine.py"
ROOT = Path(__file__).resolve().parents[2]


def probe_spec(copy_id: int, team: str, targets: dict) -> CopySpec:
    argv = (sys.executable, str(PROBE), "--host", "127.0.0.1", "--port", str(free_port()))
    return CopySpec(
        copy_id=copy_id,
        deployment_name=f"probe-{copy_id}",
        ordinal=0,
        argv=(*argv, "--targets", json.dumps(targets)),
        env={},
        machine="this-machine",
        on_cpu=True,
        token_owner=team,
        secret_env={"VLLM_API_KEY": f"key-of-{team}"},
    )


def report(backend: StandaloneBackend, handle) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = backend.log_path(handle.copy_id).read_text()
        line = next((x for x in text.splitlines() if x.startswith("PROBE ")), None)
        if line:
            return json.loads(line.removeprefix("PROBE "))
        assert backend.observe_one(handle).status != "exited", text
        time.sleep(0.2)
    raise AssertionError("the probe reported nothing within 30 s")


class Probes(StandaloneBackend):
    """The standalone backend, remembering what it launched so that the test stops it all."""

    launched: list = []

    def launch(self, spec: CopySpec):
        handle = super().launch(spec)
        self.launched.append(handle)
        return handle


@pytest.fixture
def backend(tmp_path):
    made = Probes(
        tmp_path / "state", "this-machine", programs=engine_programs(), engine_sockets=True
    )
    made.launched = []
    yield made
    for handle in made.launched:
        made.stop(handle)


def targets(tmp_path: Path, **more) -> dict:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    return {
        "keys": str(ROOT / "var" / "keys.json"),
        "postgres_port": int(django_settings.DATABASES["default"]["PORT"]),
        "redis_port": urlsplit(django_settings.REDIS_URL).port,
        "models": str(models),
        **more,
    }


def test_an_engine_reaches_nothing_of_the_console_and_nothing_of_another_team(backend, tmp_path):
    assert os.geteuid() == 0, "isolation needs Berth to run as root (CI does); see isolation.py"
    assert (ROOT / "var" / "keys.json").exists()
    red = backend.launch(probe_spec(1, "red", targets(tmp_path)))
    seen_red = report(backend, red)
    red_home = Path(seen_red["home"])
    blue_targets = targets(
        tmp_path,
        read={"red_environ": f"/proc/{red.pid}/environ", "red_log": str(backend.log_path(1))},
        write={"red_home": str(red_home)},
        list={"red_record": str(backend.copy_dir(1))},
        connect={"red_socket": seen_red["socket"]},
    )
    seen_blue = report(backend, backend.launch(probe_spec(2, "blue", blue_targets)))

    for seen, team in ((seen_red, "red"), (seen_blue, "blue")):
        assert seen["uid"] == isolation.engine_user(team).uid != 0
        assert seen["keys"] == "denied"
        assert seen["postgres"] == "asked for a password"
        assert seen["redis"].startswith("refused: -NOAUTH")
        assert seen["models"] == "denied"
        assert seen["own_home"] == "written"  # its own folder is its own
        assert seen["own_socket"] == "connected"  # it listens on a socket only it can reach
    assert seen_red["uid"] != seen_blue["uid"]
    names = ("red_environ", "red_log", "red_home", "red_record", "red_socket")
    assert {k: seen_blue[k] for k in names} == {
        "red_environ": "denied",
        "red_log": "denied",
        "red_home": "denied",
        "red_record": "denied",
        "red_socket": "denied",  # another team's engine cannot connect to red's
    }
    assert red.socket == seen_red["socket"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as console_side:
        console_side.connect(red.socket)  # the console (and the gateway) reach it there
    assert Path(seen_blue["home"]).parent == red_home.parent != red_home


def test_each_team_gets_its_own_user_name_within_the_system_limit():
    names = {isolation.user_name(team) for team in ("red", "blue", "Red Team", "a" * 80)}
    assert len(names) == 4 and all(len(n) <= 32 for n in names)
    assert isolation.user_name("red").startswith("berth-red-")


@pytest.mark.django_db
def test_the_cluster_page_says_how_far_local_engines_are_fenced_in(as_bob, bob):
    from clusters.models import Cluster, ClusterKind

    local = Cluster.objects.create(name="here", kind=ClusterKind.STANDALONE)
    page = as_bob.get(f"/clusters/{local.pk}/").content.decode()
    assert "one unprivileged user per team" in page  # Berth runs as root here
    assert "Engines on this machine listen on Unix sockets, not ports" in page
    remote = Cluster.objects.create(name="far", kind=ClusterKind.KUBERNETES, namespace="berth")
    assert "unprivileged user" not in as_bob.get(f"/clusters/{remote.pk}/").content.decode()
