"""Every page holds its layout at a desktop's 1440×900 and a phone's 390×844 (issue 19).

Each page the URL conf names is opened with real content in Chromium and screenshotted (full page,
under BERTH_LAYOUT_SHOTS or pytest's tmp_path); one script in the page then looks for what a
person would see as broken: a page wider than the window, controls lying on top of one another, a
field whose label is missing, hidden or squeezed, a button or link whose words are cut, and a
sidebar that stops before the page does. A named page that is neither opened here nor excluded
with its reason fails the test, so a new page cannot slip past it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils import timezone

from catalog.models import Model
from clusters.models import Accelerator
from console import keys
from console.models import Role
from deployments.choices import LogLevel, LogStream
from deployments.guard import state_change_allowed
from deployments.logs import write_lines
from deployments.models import (
    Copy,
    Delivery,
    Deployment,
    EmailRecipient,
    Event,
    Reservation,
    Webhook,
)
from tests import factories
from tests.e2e.test_navigation import log_in
from tests.integration.test_lifecycle import on_this_server, simulated_cluster

pytestmark = pytest.mark.e2e

VIEWPORTS = {"desktop": (1440, 900), "phone": (390, 844)}

# Named URLs that are not pages a person opens, each with its reason.
NOT_PAGES = {
    "health": "JSON for monitors",
    "oidc_authentication_init": "sends the browser to the single sign-on provider",
    "oidc_authentication_callback": "where the provider sends the browser back",
    "health_web": "JSON for load balancers",
    "logout": "POST only",
    "revoke_api_key": "POST only",
    "account_time_zone": "POST only",
    "team_webhook_enable": "POST only",
    "team_webhook_disable": "POST only",
    "team_webhook_delete": "POST only",
    "team_webhook_test": "POST only",
    "team_email_add": "POST only (the notifications page holds its form)",
    "team_email_enable": "POST only",
    "team_email_disable": "POST only",
    "team_email_delete": "POST only",
    "team_email_test": "POST only",
    "export_events": "a download (text/csv), not a page",
    "export_usage": "a download (text/csv), not a page",
    "set_quota": "POST only (the keys and team pages hold its form)",
    "remove_quota": "POST only",
    "deployment_bulk": "POST only (its answer, the confirmation page, lists the chosen rows)",
    "account_password": "POST only",
    "team_add_member": "POST only",
    "team_role": "POST only",
    "team_remove_member": "POST only",
    "team_hf_token": "POST only",
    "team_hf_token_clear": "POST only",
    "deployment_scale": "POST only (the scale dialog's form posts here)",
    "deployment_start": "POST only",
    "deployment_check_now": "POST only",
    "deployment_sync_files": "POST only",
    "deployment_offer_in_chat": "POST only",
    "deployment_reply_wait": "POST only",
    "deployment_routing": "POST only",
    "deployment_queue": "POST only",
    "deployment_rollback": "POST only (the Revisions tab's Roll back forms)",
    "deployment_auto_rollback": "POST only (the Revisions tab's switch)",
    "deployment_logs_download": "a download (text/plain), not a page",
    "deployment_engine_settings_check": "POST only (htmx check of the editor)",
    "deployment_scale_fit": "htmx fragment inside the scale dialog, which is opened",
    "wizard_mode": "POST only (the mode toggle)",
    "wizard_fit": "POST only (htmx fit check inside the Where step)",
    "wizard_settings_check": "POST only (htmx check of the Settings step)",
    "deployment_autoscaling": "POST only (the Autoscaling panel's form)",
    "download_model": "POST only",
    "ask_code_trust": "POST only",
    "server_model_row": "htmx fragment: one row of On this server, which is opened",
    "server_model_try_again": "POST only",
    "server_model_delete": "POST only",
    "chat_send": "POST only (JSON stream)",
}
# Whole namespaces: the JSON API, and Django's admin beyond the index and one changelist below
# (its pages share one stylesheet, which is not Berth's).
NOT_PAGE_NAMESPACES = {"api-v1": "the JSON API (django-ninja)", "admin": "Django's admin"}
ADMIN_CHANGELIST = "admin:deployments_deployment_changelist"


def url_names(patterns: list[Any], namespace: str = "") -> list[str]:
    names = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = ":".join(n for n in (namespace, pattern.namespace or "") if n)
            names += url_names(pattern.url_patterns, inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            names.append(f"{namespace}:{pattern.name}" if namespace else pattern.name)
    return names


@dataclass
class Visit:
    name: str  # the URL name the page must land on
    user: str  # "bob" (operator), "alice" (platform admin) or "" (anonymous)
    path: str = ""  # opened directly; empty: reached with Next from the wizard's step before
    mode: str = ""  # "advanced": the mode toggle is clicked first (it holds for later visits)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.mode})" if self.mode else self.name


def pages_to_open(seed: dict[str, Any]) -> list[Visit]:
    d, c, m = seed["deployment"].pk, seed["cluster"].pk, seed["model"].pk
    w, r = seed["webhook"].pk, seed["recipient"].pk
    return [
        Visit("login", "", "/login/"),
        Visit("home", "bob", "/"),  # the fleet overview, with its map of the seed's GPUs
        Visit("deployment_list", "bob", "/deployments/"),
        Visit("deployment_detail", "bob", f"/deployments/{d}/"),
        Visit("deployment_logs", "bob", f"/deployments/{d}/logs/"),
        Visit("deployment_revisions", "bob", f"/deployments/{d}/revisions/"),
        Visit("deployment_engine_settings", "bob", f"/deployments/{d}/settings/"),
        Visit("deployment_scale_dialog", "bob", f"/deployments/{d}/scale/dialog/"),
        Visit("deployment_stop", "bob", f"/deployments/{d}/stop/"),
        Visit("deployment_delete", "bob", f"/deployments/{d}/delete/"),
        Visit("wizard_model", "bob", "/deployments/new/"),  # wizard_start: a draft, then Model
        Visit("wizard_where", "bob", f"/deployments/new/?model={m}"),
        Visit("wizard_settings", "bob"),  # Next on Where
        Visit("wizard_review", "bob"),  # Next on Settings
        Visit("marketplace", "bob", "/models/"),
        Visit("model_detail", "bob", f"/models/{m}/"),
        Visit("add_model", "bob", "/models/add/"),
        Visit("add_model_from_path", "alice", "/models/add-from-path/"),
        Visit("server_models", "bob", "/models/on-this-server/"),
        Visit("cluster_list", "bob", "/clusters/"),
        Visit("cluster_detail", "bob", f"/clusters/{c}/"),
        Visit("chat", "bob", "/chat/"),
        Visit("api_keys", "bob", "/account/api-keys/"),
        Visit("account", "bob", "/account/"),
        Visit("event_list", "bob", "/events/"),
        Visit("usage", "bob", "/usage/"),
        Visit("team_detail", "alice", "/teams/research-platform/"),  # an admin's controls
        Visit("team_webhooks", "alice", "/teams/research-platform/notifications/"),
        Visit("team_webhook_log", "alice", f"/teams/research-platform/notifications/{w}/"),
        Visit("team_email_log", "alice", f"/teams/research-platform/notifications/email/{r}/"),
        Visit("platform_status", "alice", "/status/"),
        Visit("admin:index", "alice", "/admin/"),
        Visit(ADMIN_CHANGELIST, "alice", "/admin/deployments/deployment/"),
        # Advanced mode shows every engine flag: the widest forms Berth has.
        Visit("deployment_engine_settings", "bob", f"/deployments/{d}/settings/", "advanced"),
        Visit("wizard_where", "bob", f"/deployments/new/?model={m}", "advanced"),
        Visit("wizard_settings", "bob", mode="advanced"),
    ]


# Names reached on the way rather than landed on: wizard_start redirects to the first step.
REACHED_ON_THE_WAY = {"wizard_start": "wizard_model"}


class _Row:
    pk = 1


def test_every_named_page_is_opened_or_excluded_with_a_reason():
    fake_seed = {
        "deployment": _Row(),
        "cluster": _Row(),
        "model": _Row(),
        "webhook": _Row(),
        "recipient": _Row(),
    }
    opened = {visit.name for visit in pages_to_open(fake_seed)} | set(REACHED_ON_THE_WAY)
    missing, both = [], []
    for name in url_names(get_resolver().url_patterns):
        namespace = name.split(":")[0] if ":" in name else ""
        excluded = name in NOT_PAGES or namespace in NOT_PAGE_NAMESPACES
        if name in opened and name in NOT_PAGES:
            both.append(name)
        elif name not in opened and not excluded:
            missing.append(name)
    assert not missing, f"pages neither opened by test_layout nor excluded with a reason: {missing}"
    assert not both, f"opened and excluded at once: {both}"


# --- the seed: a team's real content -----------------------------------------------------------


def seed_content() -> dict[str, Any]:
    bob = factories.make_user("bob")
    factories.make_user("alice", staff=True)
    team = factories.make_team("research-platform")
    factories.add_member(bob, team, Role.OPERATOR)
    call_command("load_catalog", stdout=open(os.devnull, "w"))  # noqa: SIM115
    tiny = Model.objects.get(repo_id="Qwen/Qwen3-0.6B")
    for variant in tiny.variants.all():
        on_this_server(variant)
    cluster = simulated_cluster("gpu-lab-frankfurt", gpus=8)
    serving = deployment_with_copies("qwen3-chat-assistant", team, cluster, tiny, copies=3)
    for n in range(4):
        deployment_with_copies(f"batch-embeddings-{n}", team, cluster, tiny, copies=1)
    log_lines(serving)
    keys.issue(bob, "ci-pipeline-deploys", expires_in_days=90)
    webhook = a_webhook_with_deliveries(team, serving)
    recipient = EmailRecipient.objects.create(
        team=team, address="ml-platform-oncall@example.com", events=["failed", "degraded"]
    )
    return {
        "deployment": serving,
        "cluster": cluster,
        "model": tiny,
        "webhook": webhook,
        "recipient": recipient,
    }


def a_webhook_with_deliveries(team, deployment: Deployment) -> Webhook:
    """Made as its rows are (notifications.py checks the address, which needs DNS here)."""
    webhook = Webhook(
        team=team, name="on-call-pager", url="https://hooks.example.com/berth/on-call"
    )
    webhook.events = ["failed", "degraded", "recovered"]
    webhook.set_secret("whsec_layout-only")
    webhook.save()
    for attempts, code in ((1, 200), (3, 503)):
        Delivery.objects.create(
            webhook=webhook, event="failed", deployment=deployment,
            deployment_name=deployment.name, payload={"event": "failed"}, attempts=attempts,
            last_status_code=code, last_error="" if code == 200 else "HTTP 503 Service Unavailable",
        )  # fmt: skip
    return webhook


def deployment_with_copies(name, team, cluster, model, copies: int) -> Deployment:
    deployment = factories.make_deployment(
        name,
        team,
        cluster=cluster,
        model=model,
        variant=model.variants.get(name="bf16"),
        accelerators_per_copy=Decimal("0.5"),
        copies_wanted=copies,
        chat_name=name,
        last_message="All copies serve; the last health check passed.",
    )
    gpus = list(Accelerator.objects.filter(machine__cluster=cluster).order_by("index"))
    for ordinal in range(copies):
        copy = factories.make_copy(deployment, ordinal)
        gpu = gpus[(deployment.pk + ordinal) % len(gpus)]
        Reservation.objects.create(
            copy=copy,
            machine=gpu.machine,
            accelerator=gpu,
            reserved_bytes=gpu.memory_bytes // 2,
            share=Decimal("0.5"),
        )
        with state_change_allowed():
            Copy.objects.filter(pk=copy.pk).update(
                state="READY", machine=gpu.machine, port=18000 + ordinal, process_id=4000 + ordinal
            )
    with state_change_allowed():
        Deployment.objects.filter(pk=deployment.pk).update(state="DEPLOYED")
    Event.objects.create(
        deployment=deployment,
        deployment_name=name,
        kind="state",
        from_state="DEPLOYING",
        to_state="DEPLOYED",
        message="Every copy passed its health check.",
    )
    return deployment


def log_lines(deployment: Deployment) -> None:
    start = timezone.now() - timedelta(minutes=5)
    copy = deployment.copies.first()
    lines = []
    for n in range(60):
        level = LogLevel.ERROR if n % 17 == 0 else LogLevel.WARNING if n % 7 == 0 else LogLevel.INFO
        text = (
            f"INFO 05-12 10:{n:02d}:03 [engine.py:{100 + n}] Avg prompt throughput: {n * 3.1:.1f}"
            " tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 3 reqs, Swapped: 0 reqs,"
            " Pending: 0 reqs, GPU KV cache usage: 12.4%, CPU KV cache usage: 0.0%."
        )
        lines.append((copy, LogStream.ENGINE, level, start + timedelta(seconds=n), text))
    lines.append((copy, LogStream.ENGINE, LogLevel.ERROR, start, "x" * 400))  # no spaces at all
    write_lines(deployment.pk, lines)


# --- what the page script looks for --------------------------------------------------------------

CHECK_PAGE = """(wantsFullHeightSidebar) => {
  const problems = [];
  const vw = window.innerWidth, vh = window.innerHeight;
  const name = (el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    if (typeof el.className === 'string' && el.className.trim())
      s += '.' + el.className.trim().split(/\\s+/).join('.');
    const text = (el.innerText || el.value || el.getAttribute('aria-label') || '').trim();
    if (text) s += ' "' + text.replace(/\\s+/g, ' ').slice(0, 40) + '"';
    return s;
  };
  const box = (el) => el.getBoundingClientRect();
  // An ancestor that clips (overflow other than visible), html and body aside.
  const clipper = (el) => {
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o !== 'visible') return a;
    }
    return null;
  };
  // The part of an element one can see: its box cut by every ancestor that clips.
  const seen = (el) => {
    const r = box(el);
    let left = r.left, right = r.right, top = r.top, bottom = r.bottom;
    for (let a = clipper(el); a; a = clipper(a)) {
      const c = box(a);
      left = Math.max(left, c.left); right = Math.min(right, c.right);
      top = Math.max(top, c.top); bottom = Math.min(bottom, c.bottom);
    }
    return {left, right, top, bottom, width: right - left, height: bottom - top};
  };
  const shown = (el) => {
    // checkVisibility: not display:none, visibility:hidden, opacity 0, nor in a closed <details>.
    const opts = {opacityProperty: true, visibilityProperty: true, contentVisibilityAuto: true};
    if (!el.checkVisibility(opts)) return false;
    const r = seen(el);
    return r.width > 1 && r.height > 1 && r.right > 0 && r.bottom + window.scrollY > 0;
  };

  // 1. Nothing wider than the window, unless it scrolls inside a wrapper of its own.
  if (document.documentElement.scrollWidth > vw + 1) {
    const wide = [...document.body.querySelectorAll('*')].filter(
      (el) => shown(el) && box(el).right > vw + 1 && !clipper(el));
    const culprits = wide.filter((el) => !wide.some((other) => other !== el && el.contains(other)));
    culprits.sort((a, b) => box(b).right - box(a).right);
    problems.push('the page is ' + document.documentElement.scrollWidth + 'px wide in a '
      + vw + 'px window; widest: ' + culprits.slice(0, 6).map(
        (el) => name(el) + ' (right edge ' + Math.round(box(el).right) + 'px)').join(', '));
  }

  // 2. No control lies on another.
  const controls = [...document.querySelectorAll(
    'a[href], button, input:not([type=hidden]), select, textarea, label[for], [role=button], summary'
  )].filter(shown);
  for (let i = 0; i < controls.length; i++) {
    const a = controls[i], ra = seen(a);
    for (let j = i + 1; j < controls.length; j++) {
      const b = controls[j];
      if (a.contains(b) || b.contains(a)) continue;
      if (a.tagName === 'LABEL' && a.htmlFor && a.htmlFor === b.id) continue;
      if (b.tagName === 'LABEL' && b.htmlFor && b.htmlFor === a.id) continue;
      const rb = seen(b);
      const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
      const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
      if (w > 2 && h > 2) problems.push('controls overlap: ' + name(a) + ' and ' + name(b));
    }
  }

  // 3. Every field has a label a person can read; no button's or link's words are cut.
  const canvas = document.createElement('canvas').getContext('2d');
  const ownText = (el) => {
    // Text a person sees: not the options of a wrapped select, not text hidden for screen readers.
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT, {acceptNode: (node) =>
      node.parentElement.closest('select, textarea, option, input, small, .form-error')
        || !shown(node.parentElement) ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
    let text = '';
    while (walker.nextNode()) text += walker.currentNode.textContent;
    return text.replace(/\\s+/g, ' ').trim();
  };
  const imageText = (el) => [...el.querySelectorAll('img[alt]')].filter(shown).map((i) => i.alt).join(' ');
  const fitsProblem = (el, text) => {
    const style = getComputedStyle(el);
    if (style.display !== 'inline' && el.scrollWidth > el.clientWidth + 1)
      return 'its text is cut (' + el.scrollWidth + 'px of text in ' + el.clientWidth + 'px)';
    const word = text.split(' ').sort((x, y) => y.length - x.length)[0] || '';
    canvas.font = style.font;
    const needed = canvas.measureText(word).width;
    const inner = box(el).width - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)
      - parseFloat(style.borderLeftWidth) - parseFloat(style.borderRightWidth);
    if (style.display !== 'inline' && needed > inner + 2)
      return 'squeezed: "' + word + '" needs ' + Math.round(needed) + 'px, it has ' + Math.round(inner) + 'px';
    const clip = clipper(el);
    if (clip && getComputedStyle(clip).overflowX === 'hidden') {
      const rc = box(clip), re = box(el);
      if (re.right > rc.right + 1 || re.left < rc.left - 1) return 'cut off by ' + name(clip);
    }
    return '';
  };
  const fields = [...document.querySelectorAll(
    'input:not([type=hidden]):not([type=submit]):not([type=button]):not([type=reset]), select, textarea'
  )].filter(shown);
  for (const field of fields) {
    if ((field.getAttribute('aria-label') || '').trim()) continue;
    const labels = [...(field.labels || [])];
    for (const id of (field.getAttribute('aria-labelledby') || '').split(/\\s+/).filter(Boolean)) {
      const by = document.getElementById(id);
      if (by) labels.push(by);
    }
    if (!labels.length) { problems.push('field without a label: ' + name(field)); continue; }
    const readable = labels.filter((label) => shown(label) && (ownText(label) || imageText(label)));
    if (!readable.length) {
      problems.push('field whose label is hidden or empty: ' + name(field) + ' (label: '
        + labels.map(name).join(', ') + ')');
      continue;
    }
    for (const label of readable.filter(ownText)) {
      const why = fitsProblem(label, ownText(label));
      if (why) problems.push('label of ' + name(field) + ' ' + why + ': ' + name(label));
    }
  }
  for (const el of controls) {
    if (!['A', 'BUTTON', 'SUMMARY'].includes(el.tagName) && el.getAttribute('role') !== 'button') continue;
    const text = ownText(el);
    if (!text) continue;
    const why = fitsProblem(el, text);
    if (why) problems.push(el.tagName.toLowerCase() + ' ' + why + ': ' + name(el));
  }

  // 4. The sidebar's dark column runs the page's whole height (a sticky 100vh box does not: it
  // ends where the first screen does, in a full-page view and a printed page alike).
  const sidebar = document.querySelector('.sidebar');
  if (wantsFullHeightSidebar && sidebar) {
    const r = box(sidebar), page = document.documentElement.scrollHeight;
    const fixed = getComputedStyle(sidebar).position === 'fixed' && r.top <= 1 && r.bottom >= vh - 1;
    const top = r.top + window.scrollY, bottom = r.bottom + window.scrollY;
    if (!fixed && (top > 1 || bottom < page - 1))
      problems.push('the sidebar spans ' + Math.round(top) + '..' + Math.round(bottom)
        + 'px of a ' + page + 'px page: ' + name(sidebar).slice(0, 40));
  }
  return problems;
}"""


def shots_folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("BERTH_LAYOUT_SHOTS") or tmp_path / "layout")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_every_page_holds_its_layout(browser, console_url, transactional_db, tmp_path, viewport):
    seed = seed_content()
    width, height = VIEWPORTS[viewport]
    folder = shots_folder(tmp_path)
    contexts: dict[str, Any] = {}
    failures: list[str] = []
    try:
        for visit in pages_to_open(seed):
            page = contexts.get(visit.user)
            if page is None:
                context = browser.new_context(viewport={"width": width, "height": height})
                page = contexts[visit.user] = context.new_page()
                page.set_default_timeout(15_000)
                if visit.user:
                    log_in(page, console_url, visit.user)
            failures += open_and_check(page, console_url, visit, viewport, folder)
    finally:
        for page in contexts.values():
            page.context.close()
    assert not failures, (
        f"{len(failures)} layout problems (screenshots in {folder}):\n" + "\n".join(failures)
    )


def go_to(page, console_url: str, visit: Visit) -> str:
    """Open the visit's page (its mode first, or Next from the step before); return the URL name
    it landed on. test_accessibility.py opens the pages the same way."""
    if visit.path:
        page.goto(console_url + visit.path)
        toggle = page.locator(f"#mode-toggle button[value={visit.mode}][aria-pressed=false]")
        if visit.mode and toggle.count():
            with page.expect_navigation():
                toggle.click()
    else:
        page.click("button[name=action][value=next]")
        page.wait_for_url(re.compile(rf"/{visit.name.removeprefix('wizard_')}/$"))
    page.wait_for_load_state("load")
    return resolve(urlsplit(page.url).path).view_name


def open_and_check(page, console_url: str, visit: Visit, viewport: str, folder: Path) -> list[str]:
    landed = go_to(page, console_url, visit)
    width, height = VIEWPORTS[viewport]
    where = f"{visit.label} at {viewport} {width}×{height}"
    if landed != visit.name:
        return [f"{where}: landed on {landed} ({page.url})"]
    shot = re.sub(r"[^\w-]+", "-", f"{viewport}-{visit.label}").strip("-")
    page.screenshot(path=str(folder / f"{shot}.png"), full_page=True)
    problems = page.evaluate(CHECK_PAGE, viewport == "desktop")
    return [f"{where}: {problem}" for problem in problems]
