"""The deployment page and its logs follow what happens, in Chromium, without a reload."""

from __future__ import annotations

import os
import signal

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import expect

from deployments.choices import LogStream
from deployments.logs import write_lines
from deployments.models import Copy, Deployment
from tests import factories
from tests.e2e.test_navigation import log_in
from tests.integration.test_lifecycle import host, simulated_cluster
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def operator(transactional_db):
    from console.models import Role

    user = factories.make_user("bob")
    team = factories.make_team("red")
    factories.add_member(user, team, Role.OPERATOR)
    call_command("load_catalog")
    return user, team


def wait_for_the_live_socket(page) -> None:
    """Waits until the page's live socket is open (static/js/live.js marks its element): the
    console joins the socket to its group before accepting it, so what changes from now on
    reaches the page."""
    expect(page.locator("[ws-connect][data-live-open]")).to_have_count(1, timeout=15_000)


def test_the_badge_and_logs_follow_a_deployment_live_and_its_failure_shows(
    page, console_url, operator, tmp_path
):
    user, team = operator
    log_in(page, console_url, "bob")
    cluster = simulated_cluster("live", BERTH_SIM_LOAD_S_PER_GB="3", BERTH_SIM_INIT_S="1")
    with console_processes(tmp_path):
        deployment = host(user, team, cluster, "watched", engine_settings={"max_model_len": 4096})
        page.goto(f"{console_url}/deployments/{deployment.pk}/")
        badge = page.locator("#deployment-health .badge")
        badge.filter(has_text="Deployed").wait_for(timeout=60_000)  # no reload in between
        assert page.locator("#copies-ready").inner_text() == "1 / 1"

        page.goto(f"{console_url}/deployments/{deployment.pk}/logs/")
        page.locator("#log-lines tr", has_text="Application startup complete").first.wait_for()
        page.locator("#log-lines tr", has_text="serves on live-1").first.wait_for()

        copy = Copy.objects.get(deployment=deployment)
        page.goto(f"{console_url}/deployments/{deployment.pk}/")
        page.locator("#deployment-health .badge", has_text="Deployed").wait_for()
        wait_for_the_live_socket(page)
        os.killpg(copy.process_id, signal.SIGKILL)
        wait_for(
            lambda: Deployment.objects.get(pk=deployment.pk).last_error_code,
            60,
            what="the failure recorded",
        )
        # It appears without a reload: the socket was open before the engine was killed.
        expect(page.locator("#last-error")).to_contain_text(
            "Engine exited (CONTAINER_EXITED)", timeout=20_000
        )
        page.goto(f"{console_url}/deployments/{deployment.pk}/logs/?stream=serving")
        page.locator("#log-lines tr", has_text="Copy 0 stopped").first.wait_for()


def many_lines(deployment, count: int) -> None:
    now = timezone.now()
    batch = []
    for n in range(count):
        level = "ERROR" if n % 500 == 0 else "INFO"
        stream = LogStream.SERVING if n % 10 == 0 else LogStream.ENGINE
        batch.append((None, stream, level, now, f"line {n} of the engine log"))
    write_lines(deployment.pk, batch)


def test_a_20000_line_log_stays_light_and_filters_in_the_database(page, console_url, operator):
    user, team = operator
    deployment = factories.make_deployment("long-log", team)
    many_lines(deployment, 20_000)
    log_in(page, console_url, "bob")
    page.goto(f"{console_url}/deployments/{deployment.pk}/logs/")
    assert page.locator("#log-lines tr").count() <= 400
    assert "line 19999 of the engine log" in page.locator("#log-lines").inner_text()

    page.select_option("select[name=level]", "ERROR")
    # Waited for with locators: the pages' policy refuses the eval a string predicate needs.
    expect(page.locator("#log-lines tr")).to_have_count(40, timeout=30_000)
    assert all("ERROR" in row for row in page.locator("#log-lines tr").all_inner_texts())

    page.select_option("select[name=level]", "")
    page.fill("input[name=q]", "line 12345 ")
    expect(page.locator("#log-lines tr")).to_have_count(1, timeout=30_000)

    page.fill("input[name=q]", "")
    page.select_option("select[name=stream]", "serving")
    rows = page.locator("#log-lines tr")
    expect(rows.filter(has_not_text="Model serving")).to_have_count(0, timeout=30_000)
    assert rows.count() > 0
    with page.expect_download() as download:
        page.click("#download-logs")
    text = open(download.value.path()).read()
    header, _, lines = text.partition("\n")
    assert header.endswith(": times in UTC (ISO 8601)")
    assert lines.count("\n") == 2000 and "line 19990 of the engine log" in lines


def test_sync_shows_the_files_arriving_on_each_machine_without_a_reload(
    page, console_url, operator, tmp_path
):
    from tests.integration.test_model_files import host as host_with_files
    from tests.integration.test_model_files import three_machines

    user, team = operator
    log_in(page, console_url, "bob")
    cluster = three_machines("sync")
    # About four seconds per copy of the files, so that the progress can be seen.
    with console_processes(tmp_path, BERTH_SIMULATOR_COPY_BYTES_PER_S=str(2**28)):
        deployment = host_with_files(user, team, cluster, "synced")
        wait_for(
            lambda: Deployment.objects.get(pk=deployment.pk).state == "DEPLOYED",
            90,
            what="DEPLOYED",
        )
        page.goto(f"{console_url}/deployments/{deployment.pk}/")
        summary = page.locator("#files-on")
        assert summary.inner_text() == "Model files: On 1 of 3 machines."
        page.locator("#sync-files").click()
        done = "Syncing the model files to 2 machines; 1 not ready, left out."
        page.locator(".message-success", has_text=done).wait_for()
        page.locator("#deployment-files progress").first.wait_for(timeout=20_000)
        page.locator("#files-on", has_text="On 2 of 3 machines.").wait_for(timeout=30_000)
        assert page.locator("#deployment-files progress").count() == 0
        assert "Not ready" in page.locator("#deployment-files").inner_text()


def in_another_thread(work):
    """Run ORM work beside Playwright's event loop (whose thread cannot broadcast), as another
    process of the console would, on a connection of its own."""
    import threading

    from django.db import connection

    done = {}

    def run() -> None:
        try:
            done["value"] = work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    return done["value"]


def test_a_deployment_hosted_elsewhere_appears_in_the_open_list_without_a_reload(
    page, console_url, operator
):
    user, team = operator
    cluster = simulated_cluster("arrivals")
    log_in(page, console_url, "bob")  # lands on the deployments list, empty
    expect(page.locator("#deployments-empty")).to_contain_text("No deployments yet.")
    expect(page.locator("#deployment-list table")).to_be_hidden()
    wait_for_the_live_socket(page)
    in_another_thread(lambda: host(user, team, cluster, "arrived"))
    page.locator("#deployment-rows tr", has_text="arrived").wait_for(timeout=15_000)
    expect(page.locator("#deployments-empty")).to_be_empty()
    expect(page.locator("#deployment-list table")).to_be_visible()
    expect(page.get_by_role("checkbox", name="Select arrived")).to_be_visible()
    assert page.url == f"{console_url}/deployments/"
