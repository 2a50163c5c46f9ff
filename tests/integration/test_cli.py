"""The `berth` command line against a running console, run as a user runs it: its own process,
stdin and stdout not terminals (as in a script or CI), the URL and key from the environment or
from `berth login`. Each command with good and bad input; the exit status and words asserted
(0 done, 1 the console refused, 2 usage, 3 the deployment failed, 4 timed out)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from console.models import ApiKey
from deployments.choices import DeploymentState
from deployments.models import Deployment
from tests.integration.conftest import QWEN, Console
from tests.integration.test_cost import stopped_and_priced
from tests.integration.test_lifecycle import state_of
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(400)]

BERTH = str(Path(sys.executable).with_name("berth"))
ANSI_ESCAPE = "\x1b["


def run(
    console: Console, *args: str, key: str | None = None, stdin: str = "", home: Path | None = None
):
    """`berth ARGS…` with BERTH_URL and BERTH_API_KEY set (unless key="" leaves them out)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    env["XDG_CONFIG_HOME"] = str(home or Path(tempfile.gettempdir()) / "berth-cli-no-login")
    if key != "":
        env |= {"BERTH_URL": console.url, "BERTH_API_KEY": key or console.key}
    return subprocess.run(
        [BERTH, *args], input=stdin, capture_output=True, text=True, env=env, timeout=180
    )


def test_deploy_follows_to_deployed_in_plain_lines_then_every_command_works(berth_console):
    deployed = run(berth_console, "deploy", QWEN, "--name", "cli-qwen", "--variant", "bf16",
                   "--cluster", "sdk", "--chat-name", "cli", "--set", "max_model_len=4096")  # fmt: skip
    assert deployed.returncode == 0, deployed.stderr
    out = deployed.stdout
    assert "cli-qwen is DEPLOYED: 1 of 1 copies serve on sdk." in out
    assert f"Endpoint: {berth_console.gateway}/v1/chat/completions (model 'cli')" in out
    assert "curl " in out and "$BERTH_API_KEY" in out and berth_console.key not in out
    # Not a terminal: plain lines, no progress animation redrawn over itself.
    assert ANSI_ESCAPE not in out and "\r" not in out

    listed = run(berth_console, "ls", "--output", "json")
    assert listed.returncode == 0
    assert [(d["name"], d["state"]) for d in json.loads(listed.stdout)] == [
        ("cli-qwen", "DEPLOYED")
    ]
    status = run(berth_console, "status", "cli-qwen")
    assert status.returncode == 0 and "DEPLOYED" in status.stdout and "sdk" in status.stdout

    logs = run(berth_console, "logs", "cli-qwen", "--stream", "engine")
    assert logs.returncode == 0 and "Starting vLLM API server" in logs.stdout

    chat = run(berth_console, "chat", "cli", "Hello there", "--max-tokens", "8")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.strip()

    def used() -> list[dict]:
        answered = run(berth_console, "usage", "--group-by", "deployment", "--output", "json")
        return json.loads(answered.stdout)

    # "Hello there" is 9 prompt tokens to the simulator; the gateway asked for the usage of the
    # chat's stream, which did not.
    rows = wait_for(used, 20, 0.2, "the chat's usage")
    assert [
        (r["name"], r["requests"], r["prompt_tokens"], r["completion_tokens"]) for r in rows
    ] == [("cli-qwen", 1, 9, 8)]
    table = run(berth_console, "usage", "--group-by", "deployment").stdout.splitlines()
    assert table[0].split() == [
        "FROM",
        "DEPLOYMENT",
        "REQUESTS",
        "PROMPT",
        "COMPLETION",
        "MEAN",
        "TTFT",
    ]
    assert table[1].split()[2:6] == ["cli-qwen", "1", "9", "8"]  # after the day's start
    bad_usage = run(berth_console, "usage", "--from", "yesterday")
    assert bad_usage.returncode == 1
    assert bad_usage.stderr.strip() == (
        "berth: the console refused (HTTP 400) [from]: from: 'yesterday' is not a date or "
        "time: write 2026-03-01 or 2026-03-01T14:30 (UTC, or with an offset such as +02:00)"
    )

    scaled = run(berth_console, "scale", "cli-qwen", "--copies", "2")
    assert scaled.returncode == 0 and "Scaling cli-qwen" in scaled.stdout
    assert Deployment.objects.get(name="cli-qwen").copies_wanted == 2

    autoscaled = run(berth_console, "autoscale", "cli-qwen", "--min", "1", "--max", "3",
                     "--target", "2")  # fmt: skip
    assert autoscaled.returncode == 0, autoscaled.stderr
    assert "Autoscaling cli-qwen" in autoscaled.stdout
    assert (
        "1 to 3 copies, aiming at 2 requests in flight per copy"
        in run(berth_console, "status", "cli-qwen").stdout
    )
    idle = run(berth_console, "autoscale", "cli-qwen", "--min", "0", "--max", "3",
               "--idle-minutes", "30")  # fmt: skip
    assert idle.returncode == 0, idle.stderr
    assert "idle after 30 min" in run(berth_console, "status", "cli-qwen").stdout
    crossed = run(berth_console, "autoscale", "cli-qwen", "--min", "3", "--max", "1")
    assert crossed.returncode == 1 and "[autoscaling.min_copies]" in crossed.stderr
    assert run(berth_console, "autoscale", "cli-qwen").returncode == 2  # neither bounds nor --off
    routed = run(berth_console, "route", "cli-qwen", "prefix")
    assert routed.returncode == 0 and "Routing cli-qwen" in routed.stdout
    assert Deployment.objects.get(name="cli-qwen").routing == "prefix"
    assert "prefix" in [
        line.split()[-1] for line in run(berth_console, "status", "cli-qwen").stdout.splitlines()
        if line.startswith("routing")
    ]  # fmt: skip
    queue = run(berth_console, "queue", "cli-qwen", "--max-waiting", "8", "--wait", "20")
    assert queue.returncode == 0 and "Queue set for cli-qwen" in queue.stdout
    assert (
        "up to 8 when every copy is full, each for 20 s"
        in run(berth_console, "status", "cli-qwen").stdout
    )
    bad_queue = run(berth_console, "queue", "cli-qwen", "--max-waiting", "-3")
    assert bad_queue.returncode == 1 and bad_queue.stderr.strip() == (
        "berth: the console refused (HTTP 422) [max_waiting]: max_waiting: -3 is not allowed: "
        "use 0 (no queue) to 10000"
    )
    no_policy = run(berth_console, "route", "cli-qwen", "nearest")
    assert no_policy.returncode == 2 and "'nearest' is not one of" in no_policy.stderr
    off = run(berth_console, "autoscale", "cli-qwen", "--off")
    assert off.returncode == 0 and "Autoscaling off for cli-qwen" in off.stdout
    assert Deployment.objects.get(name="cli-qwen").autoscaling is None

    stopped = run(berth_console, "stop", "cli-qwen")
    assert stopped.returncode == 0 and "Stopping cli-qwen" in stopped.stdout
    stopping = Deployment.objects.get(name="cli-qwen")
    wait_for(lambda: state_of(stopping) == DeploymentState.STOPPED, 60, what="STOPPED")
    started = run(berth_console, "start", "cli-qwen")
    assert started.returncode == 0 and "Starting cli-qwen" in started.stdout

    unconfirmed = run(berth_console, "delete", "cli-qwen")
    assert unconfirmed.returncode == 2 and "add --yes" in unconfirmed.stderr
    assert Deployment.objects.filter(name="cli-qwen").exists()
    deleted = run(berth_console, "delete", "cli-qwen", "--yes")
    assert deleted.returncode == 0 and "Deleting cli-qwen" in deleted.stdout


def test_cost_gives_each_deployment_its_cost_and_cost_per_million_tokens(berth_console, red):
    deployment = stopped_and_priced(red)
    days = ("--from", "2026-03-01", "--to", "2026-03-02")
    answered = run(berth_console, "cost", *days, "--output", "json")
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout) == {
        "currency": "USD",
        "first_day": "2026-03-01",
        "last_day": "2026-03-02",
        "items": [
            {
                "id": deployment.pk,
                "name": "priced",
                "cost": 3.0,
                "tokens": 1_500_000,
                "cost_per_million_tokens": 2.0,
                "unpriced": [],
                "days": [
                    {"day": "2026-03-02", "cost": 3.0, "tokens": 1_500_000,
                     "cost_per_million_tokens": 2.0}
                ],
            }
        ],
    }  # fmt: skip
    table = run(berth_console, "cost", *days, "--group-by", "team").stdout.splitlines()
    assert table[0] == "Cost from 2026-03-01 to 2026-03-02 (UTC), in USD:"
    assert [line.split() for line in table[1:]] == [
        ["TEAM", "COST", "TOKENS", "PER", "1M", "TOKENS", "UNPRICED"],
        ["red", "3.00", "1500000", "2.00", "-"],
    ]
    none = run(berth_console, "cost", "--from", "2026-02-01", "--to", "2026-02-02")
    assert none.stdout.strip() == "No room held from 2026-02-01 to 2026-02-02."

    backwards = run(berth_console, "cost", "--from", "2026-03-05", "--to", "2026-03-01")
    assert backwards.returncode == 1
    assert backwards.stderr.strip() == (
        "berth: the console refused (HTTP 400) [from]: from: 2026-03-05 is after to "
        "(2026-03-01); give a from on or before to"
    )
    unknown = run(berth_console, "cost", "--group-by", "region")
    assert unknown.returncode == 2 and "'region' is not one of 'deployment', 'team'" in (
        unknown.stderr
    )


def revised_by_cli(console: Console) -> None:
    """Hosted where engines never finish loading (each revision stays pending), then routed,
    queued and scaled, each with a comment: four revisions by bob."""
    for args in [
        ("deploy", QWEN, "--name", "revised", "--variant", "bf16", "--cluster", "stuck",
         "--set", "max_model_len=4096", "--no-wait", "--comment", "first try"),
        ("route", "revised", "prefix", "--comment", "chats"),
        ("queue", "revised", "--max-waiting", "8", "--comment", "bursts"),
        ("scale", "revised", "--copies", "2", "--comment", "more room"),
    ]:  # fmt: skip
        done = run(console, *args)
        assert done.returncode == 0, done.stderr


def cells(line: str) -> list[str]:
    """A line of a table, its time (which the test cannot know) as WHEN."""
    return re.split(r"\s{2,}", re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "WHEN", line).strip())


def test_revisions_lists_each_change_shows_one_in_words_and_compares_two(berth_console):
    revised_by_cli(berth_console)
    listed = run(berth_console, "revisions", "revised")
    assert listed.returncode == 0, listed.stderr
    assert [cells(line) for line in listed.stdout.splitlines()] == [
        ["REVISION", "WHEN", "BY", "OUTCOME", "COMMENT", "WHY"],
        ["*", "4", "WHEN", "bob", "pending", "more room", "Scale to 2 copies"],
        ["3", "WHEN", "bob", "pending", "bursts",
         "Queue when every copy is full: up to 8 requests, each for the reply wait"],
        ["2", "WHEN", "bob", "pending", "chats", "Routing: prefix-aware (prefix)"],
        ["1", "WHEN", "bob", "pending", "first try", "Host 1 × 0.25 on stuck"],
        ["* what revised is asked to be now; back to another: berth rollback revised N"],
    ]  # fmt: skip
    as_json = json.loads(run(berth_console, "revisions", "revised", "-o", "json").stdout)
    assert [(r["number"], r["current"], [c["words"] for c in r["changes"]]) for r in as_json] == [
        (4, True, ["copies: 1 → 2"]), (3, False, ["queue length: 0 → 8"]),
        (2, False, ["routing: least_loaded → prefix"]), (1, False, []),
    ]  # fmt: skip

    one = run(berth_console, "revisions", "revised", "2").stdout.splitlines()
    assert [re.sub(r"\s+", " ", line) for line in one[:11]] == [
        "revision: 2", f"when: {as_json[2]['at'][:19].replace('T', ' ')}", "by: bob",
        "why: Routing: prefix-aware (prefix)", "comment: chats", "restores: -",
        "outcome: pending", "", "Changes from revision 1:", " routing: least_loaded → prefix", "",
    ]  # fmt: skip
    assert '  routing:               "prefix"' in one
    compared = run(berth_console, "revisions", "revised", "4", "--compare", "1")
    assert compared.stdout == (
        "From revision 4 to 1:\n  copies: 2 → 1\n  routing: prefix → least_loaded\n"
        "  queue length: 8 → 0\n"
    )
    missing = run(berth_console, "revisions", "revised", "1", "--compare", "9")
    assert (missing.returncode, missing.stderr) == (
        1, "berth: the console refused (HTTP 400) [revision]: revision: revised has no "
        "revision 9: it has revisions 1 to 4\n",
    )  # fmt: skip
    alone = run(berth_console, "revisions", "revised", "--compare", "2")
    assert alone.returncode == 2 and "--compare M needs the revision NUMBER" in alone.stderr


def test_rollback_makes_the_next_revision_and_auto_rollback_goes_on_and_off(berth_console):
    revised_by_cli(berth_console)
    rolled = run(berth_console, "rollback", "revised", "1", "--comment", "too much")
    assert rolled.returncode == 0, rolled.stderr
    assert rolled.stdout.startswith("Rolling back revised to revision 1. It is ")
    newest = json.loads(run(berth_console, "revisions", "revised", "-o", "json").stdout)[0]
    assert (newest["number"], newest["restores"], newest["comment"], newest["why"]) == (
        5, 1, "too much", "Roll back to revision 1: copies: 2 → 1; routing: prefix → "
        "least_loaded; queue length: 8 → 0",
    )  # fmt: skip
    assert Deployment.objects.get(name="revised").routing == "least_loaded"
    missing = run(berth_console, "rollback", "revised", "9")
    assert (missing.returncode, missing.stderr) == (
        1, "berth: the console refused (HTTP 400) [revision]: revision: revised has no "
        "revision 9: it has revisions 1 to 5\n",
    )  # fmt: skip
    same = run(berth_console, "rollback", "revised", "5", "-o", "json")
    assert (same.returncode, json.loads(same.stdout)["message"]) == (
        1, "revision: revised is asked to be that now: nothing changes",
    )  # fmt: skip

    on = run(berth_console, "auto-rollback", "revised", "on")
    assert on.returncode == 0 and on.stdout.startswith("Auto-rollback on for revised. It is ")
    assert "auto-rollback: on" in run(berth_console, "status", "revised").stdout
    off = run(berth_console, "auto-rollback", "revised", "off", "-o", "json")
    assert (off.returncode, json.loads(off.stdout)["auto_rollback"]) == (0, False)
    assert Deployment.objects.get(name="revised").auto_rollback is False
    maybe = run(berth_console, "auto-rollback", "revised", "maybe")
    assert maybe.returncode == 2 and "'maybe' is not one of 'on', 'off'" in maybe.stderr


def test_a_failed_or_timed_out_deploy_exits_3_or_4_with_the_reason(berth_console):
    failed = run(berth_console, "deploy", "deepseek-ai/DeepSeek-V3", "--variant", "fp8",
                 "--cluster", "sdk", "--name", "huge")  # fmt: skip
    assert failed.returncode == 3
    assert "huge is FAILED: NoFitError" in failed.stdout
    assert "Each copy needs" in failed.stdout  # the console's reason, in its words
    as_json = run(berth_console, "deploy", "deepseek-ai/DeepSeek-V3", "--variant", "fp8",
                  "--cluster", "sdk", "--name", "huge-json", "--output", "json")  # fmt: skip
    assert as_json.returncode == 3
    report = json.loads(as_json.stdout)
    assert report["error"] == "deployment_failed" and report["last_error_code"] == "NoFitError"

    timed_out = run(berth_console, "deploy", QWEN, "--variant", "bf16", "--cluster", "stuck",
                    "--name", "hangs", "--timeout", "2")  # fmt: skip
    assert timed_out.returncode == 4
    assert "Still not ready after 2 s; it goes on" in timed_out.stdout
    assert Deployment.objects.get(name="hangs").state != DeploymentState.DEPLOYED


def test_retry_tries_a_failed_deployment_again_and_start_points_to_it(berth_console, carol):
    held = run(berth_console, "deploy", QWEN, "--name", "holder", "--variant", "bf16",
               "--cluster", "sdk", "--copies", "2", "--size", "1",
               "--set", "max_model_len=4096")  # fmt: skip
    assert held.returncode == 0, held.stderr
    failed = run(berth_console, "deploy", QWEN, "--name", "waiter", "--variant", "bf16",
                 "--cluster", "sdk", "--size", "1", "--set", "max_model_len=4096")  # fmt: skip
    assert failed.returncode == 3
    assert "Its logs: berth logs waiter; after a fix: berth retry waiter" in failed.stdout
    started = run(berth_console, "start", "waiter")
    assert started.returncode == 1
    assert started.stderr == (
        "berth: the console refused (HTTP 400): "
        "it failed: try it again with retry (Check now on its page), not start\n"
    )
    viewer = run(berth_console, "retry", "waiter", key=ApiKey.issue(carol, "cli viewer")[1])
    assert viewer.returncode == 1
    assert viewer.stderr == (
        "berth: the console refused (HTTP 403): "
        "Your role in this deployment's team only lets you read it.\n"
    )

    assert run(berth_console, "stop", "holder").returncode == 0
    holder = Deployment.objects.get(name="holder")
    wait_for(lambda: state_of(holder) == DeploymentState.STOPPED, 60, what="STOPPED")
    retried = run(berth_console, "retry", "waiter")
    assert retried.returncode == 0, retried.stderr
    assert retried.stdout.startswith("Retrying waiter. It is ")
    waiter = Deployment.objects.get(name="waiter")
    wait_for(lambda: state_of(waiter) == DeploymentState.DEPLOYED, 120, what="DEPLOYED")
    again = run(berth_console, "retry", "waiter", "--output", "json")
    assert again.returncode == 1
    assert json.loads(again.stdout) == {
        "error": "refused",
        "message": "only a failed deployment can be tried again; it is deployed",
        "status": 400,
        "field": "",
    }


def test_estimate_fit_and_models_answer_and_bad_input_is_refused_with_words(berth_console):
    models = run(berth_console, "models", "--search", "Qwen3-0.6B")
    assert models.returncode == 0 and QWEN in models.stdout
    estimate = run(berth_console, "estimate", QWEN, "--variant", "bf16", "--context", "8192")
    assert estimate.returncode == 0 and "total per GPU" in estimate.stdout
    assert "8,192 tokens of context" in estimate.stdout
    fit = run(berth_console, "fit", QWEN, "--cluster", "sdk", "--size", "0.5", "--output", "json")
    assert fit.returncode == 0 and json.loads(fit.stdout)["fits"] is True

    # The console refuses: exit 1, its words on stderr.
    nowhere = run(berth_console, "fit", QWEN, "--cluster", "nowhere")
    assert nowhere.returncode == 1 and "nowhere" in nowhere.stderr
    missing = run(berth_console, "status", "nope")
    assert missing.returncode == 1 and "no deployment named nope" in missing.stderr
    bad_name = run(berth_console, "deploy", QWEN, "--name", "Not a name", "--no-wait")
    assert bad_name.returncode == 1 and "[name]" in bad_name.stderr
    wrong_key = run(berth_console, "ls", key="berth_not-a-key")
    assert wrong_key.returncode == 1 and "HTTP 401" in wrong_key.stderr

    # Usage errors: exit 2, before anything is asked of the console.
    assert run(berth_console, "deploy").returncode == 2
    bad_size = run(berth_console, "deploy", QWEN, "--size", "half")
    assert bad_size.returncode == 2 and "is not a size" in bad_size.stderr
    bad_setting = run(berth_console, "deploy", QWEN, "--set", "max_model_len")
    assert bad_setting.returncode == 2 and "is not KEY=VALUE" in bad_setting.stderr
    assert run(berth_console, "scale", "x", "--copies", "many").returncode == 2
    assert run(berth_console, "logs", "x", "--stream", "stdout").returncode == 2
    idle_alone = run(berth_console, "deploy", QWEN, "--idle-minutes", "5")
    assert idle_alone.returncode == 2 and "--idle-minutes need --min-copies" in idle_alone.stderr
    assert run(berth_console, "autoscale", "x", "--min", "0", "--max", "2",
               "--idle-minutes", "0").returncode == 2  # fmt: skip
    # The console's rule between fields: an idle time needs a lowest of 0.
    idle_floor = run(berth_console, "deploy", QWEN, "--min-copies", "1", "--max-copies", "2",
                     "--idle-minutes", "5", "--no-wait")  # fmt: skip
    assert idle_floor.returncode == 1 and "set min_copies to 0" in idle_floor.stderr
    assert not Deployment.objects.exists()  # nothing refused left anything behind


def test_login_stores_the_key_for_the_owner_only_and_the_environment_wins(berth_console, tmp_path):
    home = tmp_path / "config"
    not_logged_in = run(berth_console, "ls", key="", home=home)
    assert not_logged_in.returncode == 1 and "not logged in" in not_logged_in.stderr

    refused = run(
        berth_console, "login", "--url", berth_console.url, key="", home=home, stdin="berth_bad\n"
    )
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr
    assert not (home / "berth").exists() or not any((home / "berth").iterdir())

    logged_in = run(berth_console, "login", "--url", berth_console.url, key="", home=home,
                    stdin=f"{berth_console.key}\n")  # fmt: skip
    assert logged_in.returncode == 0, logged_in.stderr
    assert berth_console.key not in logged_in.stdout + logged_in.stderr
    (stored,) = (home / "berth").iterdir()
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert run(berth_console, "ls", key="", home=home).returncode == 0  # from the stored login
    # BERTH_API_KEY wins over what is stored.
    assert run(berth_console, "ls", key="berth_not-a-key", home=home).returncode == 1

    logged_out = run(berth_console, "logout", key="", home=home)
    assert logged_out.returncode == 0 and f"Removed {stored}." in logged_out.stdout
    assert not stored.exists()
    again = run(berth_console, "logout", key="", home=home)
    assert again.returncode == 0 and "Not logged in: nothing to remove." in again.stdout
    assert run(berth_console, "completion", "tcsh", key="", home=home).returncode == 2

    completion = run(berth_console, "completion", "bash", key="", home=home)
    assert completion.returncode == 0 and "complete" in completion.stdout


def two_for_a_file(console: Console) -> None:
    """alpha and beta hosted on `stuck` (their engines never finish loading), beta routed."""
    for args in [
        ("deploy", QWEN, "--name", "alpha", "--variant", "bf16", "--cluster", "stuck",
         "--set", "max_model_len=4096", "--no-wait"),
        ("deploy", QWEN, "--name", "beta", "--variant", "bf16", "--cluster", "stuck",
         "--chat-name", "beta", "--no-wait"),
        ("route", "beta", "prefix"),
    ]:  # fmt: skip
        done = run(console, *args)
        assert done.returncode == 0, done.stderr


def exported_to(console: Console, path: Path) -> str:
    exported = run(console, "export", "alpha", "beta")
    assert exported.returncode == 0, exported.stderr
    path.write_text(exported.stdout)
    return exported.stdout


def test_export_then_apply_on_an_emptied_console_gives_the_same_file_and_again_nothing(
    berth_console, tmp_path
):
    two_for_a_file(berth_console)
    file = tmp_path / "berth.yaml"
    text = exported_to(berth_console, file)
    assert text.startswith("version: 1\ndeployments:\n- name: alpha\n  team: red\n")
    for name in ("alpha", "beta"):
        assert run(berth_console, "delete", name, "--yes").returncode == 0
    wait_for(lambda: not Deployment.objects.exists(), 60, 0.2, "alpha and beta deleted")

    applied = run(berth_console, "apply", "-f", str(file))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout == (
        "NAME   ACTION  CHANGES  REASON\n"
        "alpha  create  -        -\n"
        "beta   create  -        -\n"
        "Applied: 2 created\n"
    )
    assert run(berth_console, "export", "alpha", "beta").stdout == text  # 0 differences
    again = run(berth_console, "apply", "-f", "-", stdin=text)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:] == [
        "alpha  unchanged  -        -", "beta   unchanged  -        -", "Applied: 2 unchanged",
    ]  # fmt: skip


def test_apply_dry_run_says_the_update_in_words_and_changes_nothing(berth_console, tmp_path):
    two_for_a_file(berth_console)
    file = tmp_path / "berth.yaml"
    text = exported_to(berth_console, file)
    file.write_text(text.replace("routing: prefix", "routing: session"))
    planned = run(berth_console, "apply", "-f", str(file), "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout == (
        "NAME   ACTION     CHANGES                    REASON\n"
        "alpha  unchanged  -                          -\n"
        "beta   update     routing: prefix → session  -\n"
        "1 to update, 1 unchanged\n"
    )
    assert Deployment.objects.get(name="beta").routing == "prefix"
    as_json = json.loads(
        run(berth_console, "apply", "-f", str(file), "--dry-run", "-o", "json").stdout
    )
    assert (as_json["dry_run"], as_json["applied"], as_json["counts"]["update"]) == (True, False, 1)


GAMMA = """\
version: 1
deployments:
- name: gamma
  team: red
  model: Qwen/Qwen3-0.6B
  cluster: {cluster}
  variant: bf16
  accelerators_per_copy: '0.25'
  routing: {routing}
"""


def test_apply_says_a_files_mistakes_at_their_line_and_a_blocked_plan_does_nothing(
    berth_console, tmp_path
):
    file = tmp_path / "gamma.yaml"
    file.write_text(GAMMA.format(cluster="stuck", routing="least_loaded: no"))
    broken = run(berth_console, "apply", "-f", str(file))
    assert (broken.returncode, broken.stderr) == (
        1, f"berth: {file}:9: not valid YAML: mapping values are not allowed here\n",
    )  # fmt: skip
    file.write_text(GAMMA.format(cluster="stuck", routing="random"))
    bad = run(berth_console, "apply", "-f", str(file))
    assert (bad.returncode, bad.stderr) == (
        1, f"berth: {file}:9: document.deployments.0.routing: 'random' is not a routing policy: "
        "use least_loaded, prefix, session\n",
    )  # fmt: skip
    file.write_text(GAMMA.format(cluster="stuck", routing="prefix") + "  colour: red\n")
    unknown = run(berth_console, "apply", "-f", str(file))
    assert (unknown.returncode, unknown.stderr) == (
        1, f"berth: {file}:10: document.deployments.0.colour: Extra inputs are not permitted\n",
    )  # fmt: skip
    file.write_text(GAMMA.format(cluster="nowhere", routing="prefix"))
    blocked = run(berth_console, "apply", "-f", str(file))
    assert blocked.returncode == 1
    assert blocked.stdout == (
        "NAME   ACTION   CHANGES  REASON\n"
        "gamma  refused  -        cluster: there is no cluster named nowhere\n"
        "1 refused\n"
    )
    assert blocked.stderr == (
        "berth: the console refused (HTTP 409): nothing was applied: fix gamma first\n"
    )
    as_json = json.loads(run(berth_console, "apply", "-f", str(file), "-o", "json").stdout)
    assert (as_json["message"], as_json["plan"]["items"][0]["action"]) == (
        "nothing was applied: fix gamma first", "refused",
    )  # fmt: skip
    assert not Deployment.objects.filter(name="gamma").exists()
    schema = json.loads(run(berth_console, "apply", "--schema").stdout)
    assert schema["required"] == ["version", "deployments"]
    assert run(berth_console, "apply").returncode == 2
