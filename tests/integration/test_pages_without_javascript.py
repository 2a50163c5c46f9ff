"""Stop and Delete ask on a page of their own (so they work, and ask, with JavaScript off); no
page carries an inline handler or style, so the Content-Security-Policy needs no
'unsafe-inline'; the other security headers are sent."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.core.management import call_command

from clusters.models import Accelerator, Cluster
from console.security import STRICT
from deployments.choices import DeploymentState
from deployments.models import Deployment, Reservation
from tests import factories

pytestmark = pytest.mark.django_db
# Inline handlers, styles and scripts; and htmx conditions (hx-trigger="…[…]"), which htmx
# runs through eval, which the policy refuses too.
INLINE = re.compile(r'\son[a-z]+=|\sstyle=|<script>|<style|hx-trigger="[^"]*\[', re.IGNORECASE)


@pytest.mark.parametrize(
    "action,question,button,deleted_once_stopped",
    [
        ("stop", "Stop red-qwen?", "Stop it", False),
        ("delete", "Delete red-qwen?", "Delete it", True),
    ],
)
def test_stop_and_delete_ask_on_a_page_then_act_on_its_form(
    as_bob, red_deployment, action, question, button, deleted_once_stopped
):
    factories.make_copy(red_deployment)
    detail = as_bob.get(f"/deployments/{red_deployment.pk}/").content.decode()
    assert f'href="/deployments/{red_deployment.pk}/{action}/"' in detail  # a link, no script
    page = as_bob.get(f"/deployments/{red_deployment.pk}/{action}/")
    words = page.content.decode()
    assert page.status_code == 200 and question in words and f">{button}</button>" in words
    assert "Its 1 copy stop" in words
    assert Deployment.objects.get(pk=red_deployment.pk).state == red_deployment.state  # asked
    done = as_bob.post(f"/deployments/{red_deployment.pk}/{action}/")
    assert done.status_code == 302
    # Its copy is still on its way out (no worker runs here), so both leave it STOPPING; a
    # delete also marks it to go once its copies have stopped.
    after = Deployment.objects.get(pk=red_deployment.pk)
    assert after.state == DeploymentState.STOPPING
    assert after.delete_when_stopped is deleted_once_stopped


@pytest.mark.parametrize("action", ["stop", "delete"])
def test_a_viewer_is_not_even_asked(as_carol, red_deployment, action):
    assert as_carol.get(f"/deployments/{red_deployment.pk}/{action}/").status_code == 403


def test_no_page_has_inline_handlers_or_styles_and_each_is_served_with_the_strict_policy(
    as_alice, as_bob, red_deployment
):
    call_command("seed_demo")
    demo = Cluster.objects.get(name="demo")
    gpu = Accelerator.objects.get(machine__name="h100-1", index=0, parent=None)
    Reservation.objects.create(
        copy=factories.make_copy(red_deployment), machine=gpu.machine, accelerator=gpu,
        reserved_bytes=2**30, share=Decimal(1),
    )  # fmt: skip
    pages = [
        "/deployments/",
        f"/deployments/{red_deployment.pk}/",
        f"/deployments/{red_deployment.pk}/logs/",
        f"/deployments/{red_deployment.pk}/stop/",
        f"/clusters/{demo.pk}/",
        "/models/",
        "/models/on-this-server/",
        "/account/api-keys/",
        "/chat/",
    ]
    for url in pages:
        answer = as_bob.get(url)
        assert answer.status_code == 200, url
        assert not INLINE.search(answer.content.decode()), url
        assert answer["Content-Security-Policy"] == STRICT, url
        assert "'unsafe-inline'" not in answer["Content-Security-Policy"]
        assert answer["X-Frame-Options"] == "DENY"
        assert answer["Referrer-Policy"] == "same-origin"
    assert "script-src 'self';" in as_alice.get("/admin/").headers["Content-Security-Policy"]
