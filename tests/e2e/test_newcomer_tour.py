"""A newcomer's tour, as the README tells it: the console started as `make run` starts it (every
process of the Procfile under honcho, the demo seeded by the same commands), log in as the demo operator, Deploy a
model with every default, watch it become Deployed without a reload, and chat until the model
answers. Then Ctrl-C, which must leave the model serving, and `make stop`, which must stop it and
say so. The tour's time is printed: the README quotes it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from clusters.backends import supervisor
from deployments.models import Copy, Deployment
from tests.processes import (
    ROOT,
    process_env,
    purge_queue,
    spelled_out_for_this_worker,
    wait_for,
    wait_until_healthy,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]
DEPLOYED_WITHIN_MS = 120_000
ANSWERED_WITHIN_MS = 60_000


class Quickstart:
    """`make run`'s last step on the test database: honcho with the Procfile, through
    `python -m console.services run` (which records its pid for `make stop`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.web_port = supervisor.free_port()
        self.env = spelled_out_for_this_worker(
            process_env(
                folder / "state",
                BERTH_VAR_DIR=str(folder / "var"),
                BERTH_PORT=str(self.web_port),
                BERTH_GATEWAY_PORT=str(supervisor.free_port()),
                BERTH_BEAT_SCHEDULE=str(folder / "beat-schedule"),
                BERTH_MODELS_DIR=str(folder / "models"),
                BERTH_DEMO="1",
            )
        )
        self.url = f"http://127.0.0.1:{self.web_port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.folder / "honcho.log", "ab")  # noqa: SIM115 - kept open for honcho
        argv = [sys.executable, "-m", "console.services", "run", "--"]
        argv += [str(Path(sys.executable).parent / "honcho"), "start", "-f", "Procfile"]
        self.process = subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # as in a terminal: Ctrl-C reaches honcho's group only
        )  # fmt: skip
        wait_until_healthy(self.url, self.process, timeout=90)

    def manage(self, command: str) -> None:
        done = subprocess.run(
            [sys.executable, "manage.py", command],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    def ctrl_c(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGINT)
        self.process.wait(timeout=60)

    def make_stop(self) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "console.services", "stop"],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def log(self) -> str:
        return (self.folder / "honcho.log").read_text(errors="replace")[-6000:]


@pytest.fixture
def quickstart(transactional_db, tmp_path) -> Iterator[Quickstart]:
    """The demo as `make run` seeds it, then the console; whatever happens, all of it stops."""
    purge_queue()
    started = Quickstart(tmp_path)
    for command in ("seed_demo", "make_tiny_model"):
        started.manage(command)
    try:
        started.start()
        yield started
    finally:
        if started.process is not None and started.process.poll() is None:
            os.killpg(started.process.pid, signal.SIGTERM)
            started.process.wait(timeout=60)
        started.make_stop()


def log_in_as_the_demo_operator(page, url: str) -> None:
    page.goto(f"{url}/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "berth-operator")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")


def deploy_with_every_default(page) -> Deployment:
    """Deploy a model → the first model listed → Next → Next → Host, changing nothing."""
    page.get_by_role("button", name="Deploy a model").click()
    page.wait_for_url(re.compile(r"/deployments/new/"))
    page.locator("[id^=model-] button").first.click()
    page.wait_for_url(re.compile(r"/where/$"))
    expect(page.locator("#fit-words .fit-headline")).to_contain_text("fits now")
    page.click("button[name=action][value=next]")
    page.wait_for_url(re.compile(r"/settings/$"))
    page.click("button[name=action][value=next]")
    page.wait_for_url(re.compile(r"/review/$"))
    page.click("#host-button")
    page.wait_for_url(re.compile(r"/deployments/\d+/$"))
    return Deployment.objects.get(pk=int(page.url.rstrip("/").rsplit("/", 1)[-1]))


def chat_until_it_answers(page, url: str) -> str:
    page.locator("nav[aria-label=Main]").get_by_role("link", name="Chat", exact=True).click()
    page.wait_for_url(f"{url}/chat/")
    page.fill("#chat-message", "Hello! Who are you?")
    page.click("#chat-send")
    figures = page.locator(".turn-assistant .reply-figures").first
    figures.filter(has_text="First token after").wait_for(timeout=ANSWERED_WITHIN_MS)
    return page.locator(".turn-assistant p").first.inner_text().strip()


def test_a_newcomer_deploys_with_every_default_chats_and_make_stop_stops_the_model(
    quickstart, page
):
    began = time.monotonic()
    log_in_as_the_demo_operator(page, quickstart.url)
    deployment = deploy_with_every_default(page)
    assert deployment.state != "FAILED", deployment.last_message
    badge = page.locator("#deployment-health .badge")
    # Live: the page that Host landed on turns to Deployed by itself, never reloaded.
    badge.filter(has_text="Deployed").wait_for(timeout=DEPLOYED_WITHIN_MS)
    deployed_after = time.monotonic() - began
    answer = chat_until_it_answers(page, quickstart.url)
    took = time.monotonic() - began
    print(
        f"\nnewcomer tour: {deployment.name} ({deployment.variant.name} on "
        f"{deployment.cluster.name}) Deployed {deployed_after:.1f} s after logging in; "
        f"answered after {took:.1f} s"
    )
    assert answer, quickstart.log()

    engines = list(Copy.objects.filter(deployment=deployment).values_list("process_id", flat=True))
    assert engines and all(engines), engines
    quickstart.ctrl_c()
    assert all(supervisor.is_alive(pid) for pid in engines), "Ctrl-C stopped a model"

    printed = quickstart.make_stop()
    for pid in engines:
        assert f"copy {Copy.objects.get(process_id=pid).pk} (pid {pid})" in printed, printed
        wait_for(lambda p=pid: not supervisor.is_alive(p), 30, what=f"engine {pid} gone")
    assert printed.startswith(f"Stopped the engine of {deployment.name}, copy "), printed
