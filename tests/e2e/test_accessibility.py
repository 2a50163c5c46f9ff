"""Every page passes axe-core's WCAG 2.1 A and AA rules, with nothing serious or critical (issue 20).

The pages, their order and their content are test_layout.py's (every page the URL conf names,
opened or excluded there with its reason), at the desktop's size. axe-core, vendored by
scripts/vendor.py under tests/e2e/vendor/ (never served), is injected into each page: the pages'
CSP (script-src 'self', no inline scripts) rightly refuses a script from a test, so this test's
browser contexts alone bypass the CSP; every other browser test keeps it.

A second check reads every table of every page: a screen reader user who lists a page's buttons
hears their names only, so per-row buttons and links that do different things must not share a
name ("Stop" five times) but name their row's object ("Stop qwen3-chat-assistant").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from console import keys
from console.models import Role
from tests import factories
from tests.e2e.test_layout import VIEWPORTS, Visit, _Row, go_to, pages_to_open, seed_content
from tests.e2e.test_navigation import log_in

pytestmark = pytest.mark.e2e

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
WCAG_21_A_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING = {"serious", "critical"}

# (URL name, axe rule id) -> why Berth lets that violation stand. Narrow on purpose: a page and a
# rule, never a whole page, and only for markup Berth does not write.
KNOWN: dict[tuple[str, str], str] = {}

RUN_AXE = """async (tags) => {
  const results = await axe.run(document, {runOnly: {type: 'tag', values: tags},
                                           resultTypes: ['violations']});
  return results.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    targets: v.nodes.map((n) => n.target.join(' ')),
  }));
}"""

# Per row of a table with two rows or more, and per card of a list of cards: each control's
# accessible name and description (axe computes them as a screen reader does; Django's admin names
# a row's object in aria-describedby) and what it does (a link's address, a button's form and
# value, a field's name and value). Two controls in different rows with one name but different
# effects cannot be told apart out of context, as a screen reader's list of buttons gives them.
SAME_NAMES = """() => {
  axe.setup(document);
  const problems = [];
  try {
    const effect = (el) => {
      // Attributes as written: resolved addresses are empty on a page without a base URL.
      if (el.tagName === 'A') return 'link ' + el.getAttribute('href');
      if (el.tagName === 'SUMMARY') return 'summary ' + Math.random();  // opens its own row
      const hx = ['hx-get', 'hx-post', 'hx-delete'].map((a) => el.getAttribute(a) || '').join(' ');
      const action = el.getAttribute('formaction') || (el.form ? el.form.getAttribute('action') : '');
      return [el.tagName, action, hx, el.name, el.value].join(' ');
    };
    const heard = (el) => {
      const described = (el.getAttribute('aria-describedby') || '').split(/\\s+/).filter(Boolean)
        .map((id) => document.getElementById(id)).filter(Boolean).map((d) => d.textContent);
      return [axe.commons.text.accessibleText(el), ...described].join(' ').replace(/\\s+/g, ' ').trim();
    };
    const groups = [...document.querySelectorAll('table')].map((table) => ({
      what: (table.caption && table.caption.textContent.trim()) || table.getAttribute('aria-label')
        || table.id || 'a table',
      rows: [...table.tBodies].flatMap((body) => [...body.rows]),
    }));
    for (const cards of document.querySelectorAll('.cards'))
      groups.push({what: 'cards', rows: [...cards.children]});
    for (const {what, rows} of groups) {
      if (rows.length < 2) continue;
      const byName = new Map();  // what a screen reader says -> {effects, rows}
      rows.forEach((row, index) => {
        const controls = row.querySelectorAll(
          'a[href], button, input:not([type=hidden]), select, textarea, summary, [role=button]');
        for (const el of controls) {
          const name = heard(el);
          const seen = byName.get(name) || {effects: new Set(), rows: new Set()};
          seen.effects.add(effect(el));
          seen.rows.add(index);
          byName.set(name, seen);
        }
      });
      for (const [name, seen] of byName)
        if (seen.rows.size > 1 && seen.effects.size > 1)
          problems.push(what + ': ' + seen.rows.size + ' rows have a control named "' + name
            + '" that does different things; name its row\\'s object in it');
    }
  } finally {
    axe.teardown();
  }
  return problems;
}"""

# The parts that change by themselves, announced politely (a log as a log): page -> selectors.
LIVE_REGIONS = {
    "deployment_list": ["#deployment-rows[aria-live=polite]"],
    "deployment_detail": [
        "#deployment-state[aria-live=polite]",
        "#last-message[aria-live=polite]",
        "#deployment-copies[aria-live=polite]",
        "#engine-figures[aria-live=polite]",
        "#deployment-files[aria-live=polite]",
        "#live-status[role=status]",
    ],
    "deployment_logs": ["[role=log] #log-lines"],
    "server_models": ["tbody[aria-live=polite] tr[id^=server-model-]"],
    "model_detail": ["[id^=variant-files-][aria-live=polite]"],
}

# Lists whose per-row buttons only an admin sees, opened once more as alice.
ADMIN_VISITS = [Visit("server_models", "alice", "/models/on-this-server/")]


def more_rows(seed: dict[str, Any]) -> None:
    """A second row in the lists test_layout's seed gives one: API keys, team members."""
    keys.issue(User.objects.get(username="bob"), "notebook-experiments")
    factories.add_member(factories.make_user("carol"), seed["deployment"].team, Role.VIEWER)


def test_every_page_passes_axe_and_names_its_row_controls(browser, console_url, transactional_db):
    seed = seed_content()
    more_rows(seed)
    width, height = VIEWPORTS["desktop"]
    contexts: dict[str, Any] = {}
    failures: list[str] = []
    try:
        for visit in pages_to_open(seed) + ADMIN_VISITS:
            page = contexts.get(visit.user)
            if page is None:
                context = browser.new_context(
                    viewport={"width": width, "height": height}, bypass_csp=True
                )
                page = contexts[visit.user] = context.new_page()
                page.set_default_timeout(15_000)
                if visit.user:
                    log_in(page, console_url, visit.user)
            failures += check_page(page, console_url, visit)
    finally:
        for page in contexts.values():
            page.context.close()
    assert not failures, f"{len(failures)} accessibility problems:\n" + "\n".join(failures)


def check_page(page, console_url: str, visit: Visit) -> list[str]:
    landed = go_to(page, console_url, visit)
    if landed != visit.name:
        return [f"{visit.label}: landed on {landed} ({page.url})"]
    page.add_script_tag(path=str(AXE))
    problems = []
    for violation in page.evaluate(RUN_AXE, WCAG_21_A_AA):
        if violation["impact"] not in BLOCKING or (visit.name, violation["id"]) in KNOWN:
            continue
        problems.append(
            f"{visit.label}: {violation['id']} ({violation['impact']}): {violation['help']}; "
            + ", ".join(violation["targets"][:8])
        )
    problems += [f"{visit.label}: {problem}" for problem in page.evaluate(SAME_NAMES)]
    for region in LIVE_REGIONS.get(visit.name, []):
        if not page.locator(region).count():
            problems.append(f"{visit.label}: no live region {region}")
    return problems


def keys_table(second_label: str) -> str:
    rows = "".join(
        f'<tr><td>{key}</td><td><form method="post" action="/keys/{n}/revoke/">'
        f'<button type="submit" aria-label="{label}">Revoke</button></form></td></tr>'
        for n, (key, label) in enumerate([("ci", "Revoke key ci"), ("notebook", second_label)])
    )
    return f"<main><table><caption>Keys</caption><tbody>{rows}</tbody></table></main>"


def test_the_row_check_catches_row_buttons_without_their_object(page):
    """The check above can fail: two rows whose Revoke buttons are heard as "Revoke" alone."""
    page.set_content(keys_table("Revoke key notebook"))
    page.add_script_tag(path=str(AXE))
    assert page.evaluate(SAME_NAMES) == []
    page.set_content(keys_table("Revoke key ci"))  # the second row's label names the wrong key
    page.add_script_tag(path=str(AXE))
    assert page.evaluate(SAME_NAMES) == [
        'Keys: 2 rows have a control named "Revoke key ci" that does different things;'
        " name its row's object in it"
    ]


def test_known_violations_name_pages_that_are_opened():
    """A known violation for a page no longer opened would hide nothing, silently: drop it."""

    fake_seed = {
        name: _Row() for name in ("deployment", "cluster", "model", "webhook", "recipient")
    }
    opened = {visit.name for visit in pages_to_open(fake_seed)}
    assert {name for name, _ in KNOWN} <= opened
