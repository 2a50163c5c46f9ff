"""The hosting wizard in Chromium, once in novice and once in advanced mode, each ending on the
page of a deployment that reaches DEPLOYED on the simulator (the real worker, beat and watcher run
beside the e2e server, on the test database). Along the way: the fit check's words change when
the size changes (htmx, no reload), a suggested size is applied with one click, and the browser's
back and forward keep every value."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from catalog.models import Model
from console.models import Role
from deployments.models import Deployment
from tests import factories
from tests.e2e.test_navigation import log_in
from tests.integration.test_lifecycle import on_this_server, simulated_cluster
from tests.processes import console_processes, wait_for

pytestmark = pytest.mark.e2e
DEPLOYED_WITHIN_MS = 60_000


@pytest.fixture
def operator(transactional_db):
    user = factories.make_user("bob")
    team = factories.make_team("red")
    factories.add_member(user, team, Role.OPERATOR)
    call_command("load_catalog", stdout=open("/dev/null", "w"))  # noqa: SIM115
    tiny = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    for variant in tiny.variants.all():
        on_this_server(variant)
    return user, tiny


def fit_text(page) -> str:
    return page.locator("#fit-words").inner_text()


def back_to(page, step: str) -> None:
    """The browser's Back until the step shows (a preset applied is its own history entry)."""
    for _ in range(4):
        page.go_back()
        if page.url.endswith(f"/{step}/"):
            return
    raise AssertionError(f"Back never reached {step}: at {page.url}")


def forward_to(page, step: str) -> None:
    for _ in range(4):
        page.go_forward()
        if page.url.endswith(f"/{step}/"):
            return
    raise AssertionError(f"Forward never reached {step}: at {page.url}")


def wait_deployed(page, name: str) -> None:
    """Host lands on the deployment's page, which says Deployed once it serves. (The page
    following it live is tested in test_live_pages; here it is reloaded once it serves.)"""
    deployment = Deployment.objects.get(name=name)
    page.wait_for_url(re.compile(rf"/deployments/{deployment.pk}/$"))
    wait_for(
        lambda: Deployment.objects.get(pk=deployment.pk).state == "DEPLOYED",
        DEPLOYED_WITHIN_MS / 1000,
        what=f"{name} DEPLOYED",
    )
    page.reload()
    page.locator("#deployment-health .badge").filter(has_text="Deployed").wait_for()


def test_novice_hosts_from_the_model_step_to_a_deployed_model(
    page, console_url, operator, tmp_path
):
    _user, tiny = operator
    simulated_cluster("wiz")
    log_in(page, console_url, "bob")
    with console_processes(tmp_path):
        page.goto(f"{console_url}/deployments/new/")
        page.locator(f"#model-{tiny.pk} button").click()
        page.wait_for_url(re.compile(r"/where/$"))
        expect(page.locator("#picked-variant")).to_contain_text("Variant: fp8")

        # The fit check follows the size without a reload.
        page.check("input[name=size][value='1']")
        expect(page.locator("#fit-words .fit-has")).to_contain_text("the engine may use 63.72 GiB")
        whole = fit_text(page)
        page.check("input[name=size][value='0.5']")
        expect(page.locator("#fit-words .fit-has")).to_contain_text("½ of an accelerator")
        assert fit_text(page) != whole
        expect(page.locator("#fit-words .fit-empty")).to_contain_text(
            "Room now for 4 copies of this size"
        )

        # A better size, applied with one click: a tenth, the smallest share placement tries,
        # holds the fp8 copy at its full 40960-token context (weights 0.70 GiB + KV 4.38 +
        # sampler warm-up 0.29 + CUDA graphs and non-torch 0.44 = 5.82 GiB) in a tenth's engine
        # budget of an H100 (0.8 × 0.1 × 79.65 GiB = 6.37 GiB).
        suggestion = page.locator("#apply-suggestion")
        expect(suggestion).to_have_attribute("value", "0.1")
        suggestion.click()
        page.wait_for_load_state()
        expect(page.locator("input[name=size][value='0.1']")).to_be_checked()
        expect(page.locator("#fit-words .fit-headline")).to_contain_text("The copy fits now.")

        page.click("button[name=action][value=next]")
        page.wait_for_url(re.compile(r"/settings/$"))
        expect(page.locator("#presets")).to_contain_text("Tuned for")
        expect(page.locator("#other-flags")).to_have_count(0)  # novice: only what a novice needs
        page.fill("input[name=max_model_len]", "4096")
        expect(page.locator("#argv-preview")).to_contain_text("--max-model-len 4096")
        page.click("button[name=action][value=next]")

        page.wait_for_url(re.compile(r"/review/$"))
        expect(page.locator("input[name=name]")).to_have_value("qwen3-0-6b")
        page.click("#host-button")
        wait_deployed(page, "qwen3-0-6b")
    deployment = Deployment.objects.get(name="qwen3-0-6b")
    assert str(deployment.accelerators_per_copy) == "0.100"
    assert deployment.variant.name == "fp8" and deployment.engine_settings["max_model_len"] == 4096


def test_advanced_hosts_with_every_setting_and_back_and_forward_keep_values(
    page, console_url, operator, tmp_path
):
    _user, tiny = operator
    simulated_cluster("adv")
    log_in(page, console_url, "bob")
    with console_processes(tmp_path):
        page.goto(f"{console_url}/deployments/new/?model={tiny.pk}")
        page.click("#mode-toggle button[value=advanced]")
        expect(page.locator("#variant-choices")).to_contain_text("on llama.cpp")
        bf16 = tiny.variants.get(name="bf16")
        page.check(f"input[name=variant][value='{bf16.pk}']")
        page.check("input[name=size][value='0.5']")
        page.fill("input[name=copies]", "2")
        expect(page.locator("#fit-words .fit-headline")).to_contain_text("All 2 copies fit now.")
        page.click("button[name=action][value=next]")

        page.wait_for_url(re.compile(r"/settings/$"))
        page.click("#preset-low_memory")
        expect(page.locator(".editor-notice")).to_contain_text("Tuned for Low memory: changed")
        expect(page.locator("#control-enforce_eager")).to_have_class(re.compile("changed"))
        page.fill("input[name=other_flags]", "--max-lora-rank 16")
        page.fill("#flag-search", "lora rank")
        expect(page.locator("#all-flags")).to_contain_text("--max-lora-rank")
        expect(page.locator("#argv-preview")).to_contain_text("--max-lora-rank 16")
        page.click("button[name=action][value=next]")
        page.wait_for_url(re.compile(r"/review/$"))

        # Back and forward with the browser: every value is still there.
        back_to(page, "settings")
        expect(page.locator("input[name=other_flags]")).to_have_value("--max-lora-rank 16")
        expect(page.locator("input[name=max_model_len]")).to_have_value("4096")
        back_to(page, "where")
        expect(page.locator("input[name=size][value='0.5']")).to_be_checked()
        expect(page.locator("input[name=copies]")).to_have_value("2")
        expect(page.locator(f"input[name=variant][value='{bf16.pk}']")).to_be_checked()
        forward_to(page, "settings")
        expect(page.locator("input[name=other_flags]")).to_have_value("--max-lora-rank 16")
        forward_to(page, "review")

        page.fill("input[name=name]", "tiny-advanced")
        page.fill("input[name=chat_name]", "")
        page.click("#host-button")
        wait_deployed(page, "tiny-advanced")
    deployment = Deployment.objects.get(name="tiny-advanced")
    assert deployment.copies_wanted == 2 and deployment.variant == bf16
    assert deployment.engine_settings["other_flags"] == "--max-lora-rank 16"
    assert deployment.engine_settings["enforce_eager"] is True
