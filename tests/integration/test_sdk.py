"""The SDK (berth_sdk) against a running console, as a notebook or a CI job would use it: the
seeds' flow (deploy_model blocks until DEPLOYED, or raises DeploymentFailedError or a
TimeoutError), the estimate the console makes, logs that follow, and chat through the gateway.
Real web server, worker, beat, watcher and gateway on the test database; simulated engines."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date

import pytest
from berth_sdk import (
    ApplyPlan,
    ApplyRefusedError,
    AsyncBerthClient,
    Autoscaling,
    BerthAPIError,
    BerthClient,
    BerthError,
    CostDay,
    CostItem,
    CostReport,
    DeploymentFailedError,
    DeploymentStatus,
    DeploymentTimeoutError,
    PlanItem,
    Revision,
    RevisionChange,
)

from catalog.models import Model
from console import keys
from deployments.choices import DeploymentState, ErrorCode
from deployments.models import Deployment
from deployments.placing import estimate
from tests.integration.conftest import QWEN, Console
from tests.integration.test_cost import stopped_and_priced
from tests.integration.test_lifecycle import on_this_server, simulated_cluster
from tests.processes import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

SETTINGS = {"max_model_len": 4096}
POLL_S = 0.2


def deploy(client: BerthClient, **fields: object) -> int:
    asked = {
        "repo_id": QWEN,
        "variant": "bf16",
        "cluster": "sdk",
        "engine_settings": SETTINGS,
        "poll_interval_seconds": POLL_S,
        "timeout_seconds": 120,
        **fields,
    }
    return client.serving.deploy_model(**asked)  # type: ignore[arg-type]


def test_deploy_model_waits_for_deployed_or_returns_at_once_and_logs_follow_a_chat(berth_console):
    with berth_console.client() as client:
        pk = deploy(client, chat_name="qwen")  # wait=True: blocks until DEPLOYED
        assert Deployment.objects.get(pk=pk).state == DeploymentState.DEPLOYED
        assert client.serving.get_deployment_status(pk) is DeploymentStatus.DEPLOYED

        bounded = Autoscaling(min_copies=1, max_copies=2, target_in_flight=8)
        assert client.serving.set_autoscaling(pk, bounded).autoscaling == bounded
        assert client.serving.get_deployment(pk).autoscaling == bounded
        assert client.serving.set_autoscaling(pk, None).autoscaling is None
        assert client.serving.get_deployment(pk).routing == "least_loaded"
        assert client.serving.set_routing(pk, "session").routing == "session"
        with pytest.raises(BerthAPIError) as no_policy:
            client.serving.set_routing(pk, "nearest")
        assert (no_policy.value.status_code, no_policy.value.field) == (422, "routing")
        queued = client.serving.set_queue(pk, 16, queue_wait_s=30)
        assert (queued.max_waiting, queued.queue_wait_s) == (16, 30)

        later = deploy(client, name="later", wait=False, routing="prefix")
        assert client.serving.get_deployment(later).routing == "prefix"
        assert client.serving.get_deployment_status(later) is not DeploymentStatus.DEPLOYED
        ready = client.serving.wait_deployment_ready(later, 120, POLL_S)
        assert ready.id == later and ready.state is DeploymentStatus.DEPLOYED
        assert Deployment.objects.get(pk=later).state == DeploymentState.DEPLOYED

        last = max(line.seq for line in client.serving.logs(pk))
        with following(berth_console, pk, last) as followed:
            reply = client.openai().chat.completions.create(
                model="qwen", messages=[{"role": "user", "content": "Hello"}], max_tokens=8
            )
            assert reply.choices[0].message.content
            # The engine logs the request it has just answered; the follower yields that line.
            line = wait_for_line(followed, lambda text: "/v1/chat/completions" in text)
        assert line.seq > last

        # The gateway recorded the chat under bob's key: "Hello" is 8 prompt tokens to the
        # simulator, and the reply its 8.
        rows = wait_for(lambda: list(client.usage(group_by="key")), 10, 0.2, "the chat's usage")
        assert [(r.name, r.requests, r.prompt_tokens, r.completion_tokens) for r in rows] == [
            ("sdk tests", 1, 8, 8)
        ]


def test_cost_reads_each_deployments_cost_per_day_and_refuses_a_bad_range(berth_console, red):
    deployment = stopped_and_priced(red)
    with berth_console.client() as client:
        report = client.cost(since=date(2026, 3, 1), until="2026-03-02")
        assert (report.currency, report.first_day, report.last_day) == (
            "USD", date(2026, 3, 1), date(2026, 3, 2),
        )  # fmt: skip
        assert report.items == [
            CostItem(deployment.pk, "priced", 3.0, 1_500_000, 2.0, [],
                     [CostDay(date(2026, 3, 2), 3.0, 1_500_000, 2.0)])
        ]  # fmt: skip
        by_team = client.cost("team", since="2026-03-02", until="2026-03-02")
        assert [(item.name, item.cost) for item in by_team.items] == [("red", 3.0)]
        with pytest.raises(BerthAPIError) as refused:
            client.cost(group_by="region")
        assert (refused.value.status_code, refused.value.field, refused.value.message) == (
            400, "group_by", "group_by: 'region' is not one of deployment, team",
        )  # fmt: skip

    async def awaited() -> CostReport:
        async with AsyncBerthClient(base_url=berth_console.url, api_key=berth_console.key) as api:
            return await api.cost(since="2026-03-01", until="2026-03-02")

    assert asyncio.run(awaited()) == report


def revised(client: BerthClient) -> int:
    """Hosted where engines never finish loading (so each revision stays pending), with a
    comment, then routed, queued and scaled: four revisions by bob."""
    pk = deploy(client, name="revised", cluster="stuck", wait=False, comment="first try")
    client.serving.set_routing(pk, "prefix", comment="chats")
    client.serving.set_queue("revised", 8, comment="bursts")
    client.serving.scale(pk, 2)
    return pk


def test_revisions_list_compare_and_roll_back_and_refuse_a_missing_one_in_words(berth_console):
    with berth_console.client() as client:
        pk = revised(client)
        listed = client.serving.revisions("revised")
        assert [(r.number, r.by, r.comment, r.current, r.outcome, r.restores) for r in listed] == [
            (4, "bob", "", True, "pending", None),
            (3, "bob", "bursts", False, "pending", None),
            (2, "bob", "chats", False, "pending", None),
            (1, "bob", "first try", False, "pending", None),
        ]  # fmt: skip
        assert [[c.words for c in r.changes] for r in listed] == [
            ["copies: 1 → 2"], ["queue length: 0 → 8"], ["routing: least_loaded → prefix"], [],
        ]  # fmt: skip
        assert client.serving.revision(pk, 2).changes == [
            RevisionChange("routing", "routing", "least_loaded", "prefix",
                           "routing: least_loaded → prefix")
        ]  # fmt: skip
        assert [c.words for c in client.serving.compare_revisions(pk, 4, 1)] == [
            "copies: 2 → 1", "routing: prefix → least_loaded", "queue length: 8 → 0",
        ]  # fmt: skip

        rolled = client.serving.roll_back("revised", 1, comment="too much at once")
        assert (rolled.copies_wanted, rolled.routing, rolled.max_waiting) == (1, "least_loaded", 0)
        newest = client.serving.revisions(pk)[0]
        assert (newest.number, newest.restores, newest.comment, newest.current) == (
            5, 1, "too much at once", True,
        )  # fmt: skip
        assert newest.spec == listed[-1].spec
        with pytest.raises(BerthAPIError) as missing:
            client.serving.roll_back(pk, 9)
        assert (missing.value.status_code, missing.value.field, missing.value.message) == (
            400, "revision", "revision: revised has no revision 9: it has revisions 1 to 5",
        )  # fmt: skip
        assert client.serving.set_auto_rollback(pk, True).auto_rollback is True
        assert client.serving.get_deployment(pk).auto_rollback is True

    async def awaited() -> tuple[list[Revision], list[RevisionChange], bool, list[Revision]]:
        async with AsyncBerthClient(base_url=berth_console.url, api_key=berth_console.key) as api:
            before = await api.serving.revisions("revised")
            compared = await api.serving.compare_revisions(pk, 5, 2)
            await api.serving.roll_back(pk, 2)
            off = await api.serving.set_auto_rollback("revised", False)
            return before, compared, off.auto_rollback, await api.serving.revisions(pk)

    before, compared, auto_rollback, after = asyncio.run(awaited())
    assert before[0] == newest
    assert [c.words for c in compared] == ["routing: least_loaded → prefix"]
    assert auto_rollback is False
    assert [(r.number, r.restores, r.by) for r in after[:2]] == [(6, 2, "bob"), (5, 1, "bob")]


def test_two_models_hosted_with_defaults_share_one_gpu_and_both_answer(berth_console):
    """The size left out is the smallest usual one that holds a copy with its whole context:
    Qwen3-0.6B takes a quarter of the GPU, and Qwen3-8B (22.45 GiB with its 40,960 tokens, where
    a third of this cluster's H100 gives an engine at most 21.22 GiB) half, side by side."""
    simulated_cluster("one", gpus=1)
    on_this_server(Model.objects.get(repo_id="Qwen/Qwen3-8B").variants.get(name="bf16"))
    with berth_console.client() as client:
        small = client.serving.host(repo_id=QWEN, cluster="one", chat_name="small")
        large = client.serving.host(repo_id="Qwen/Qwen3-8B", cluster="one", chat_name="large")
        assert small.chosen["accelerators_per_copy"].value == "0.25"
        assert large.chosen["accelerators_per_copy"].value == "0.5"
        for hosted in (small, large):
            ready = client.serving.wait_deployment_ready(hosted.id, 120, POLL_S)
            assert ready.state is DeploymentStatus.DEPLOYED
        chat = client.openai()
        for name in ("small", "large"):
            reply = chat.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "Hello"}], max_tokens=8
            )
            assert reply.choices[0].message.content
    placed = Deployment.objects.filter(cluster__name="one", state=DeploymentState.DEPLOYED)
    assert placed.count() == 2


@contextmanager
def following(console: Console, pk: int, after: int) -> Iterator[queue.Queue]:
    """The lines of logs(follow=True), read on a thread of their own (following never ends
    by itself: the thread stops at the first line after the block)."""
    lines: queue.Queue = queue.Queue()
    done = threading.Event()

    def read() -> None:
        try:
            with console.client() as client:
                for line in client.serving.logs(
                    pk, after=after, follow=True, poll_interval_seconds=0.2
                ):
                    if done.is_set():
                        return
                    lines.put(line)
        except BerthError as error:  # the console stopped after the test: no one is waiting
            if not done.is_set():
                lines.put(error)

    threading.Thread(target=read, daemon=True).start()
    try:
        yield lines
    finally:
        done.set()


def wait_for_line(lines: queue.Queue, wanted, timeout_s: float = 30):
    seen = []
    while True:
        try:
            line = lines.get(timeout=timeout_s)
        except queue.Empty:
            pytest.fail(f"no followed line matched within {timeout_s} s; saw: {seen}")
        if isinstance(line, BerthError):
            raise line
        if wanted(line.text):
            return line
        seen.append(line.text)


def test_failures_raise_what_the_seed_says_and_refusals_carry_the_field(berth_console):
    with berth_console.client() as client:
        # A model that can never fit: DeploymentFailedError, with the code and the reason.
        with pytest.raises(DeploymentFailedError) as raised:
            deploy(client, repo_id="deepseek-ai/DeepSeek-V3", variant="fp8", engine_settings=None)
        failed = raised.value
        stored = Deployment.objects.get(pk=failed.deployment_id)
        assert failed.status is DeploymentStatus.FAILED and stored.state == DeploymentState.FAILED
        assert failed.last_error_code == ErrorCode.NO_FIT == "NoFitError"
        assert failed.last_error_message == stored.last_error_message
        assert "NoFitError: Each copy needs" in str(failed)

        # An engine that hangs: a TimeoutError naming the deployment, which goes on.
        with pytest.raises(TimeoutError) as timed_out:
            deploy(client, name="hangs", cluster="stuck", timeout_seconds=3)
        assert isinstance(timed_out.value, DeploymentTimeoutError)
        stuck = Deployment.objects.get(pk=timed_out.value.deployment_id)
        assert stuck.name == "hangs" and stuck.state != DeploymentState.DEPLOYED
        assert f"deployment {stuck.pk} is still" in str(timed_out.value)

        # Refusals: the status, the console's words and the field they are about.
        with pytest.raises(BerthAPIError) as refused:
            client.serving.deploy_model(repo_id=QWEN, name="Not a name", wait=False)
        # Against the name's pattern, which the OpenAPI document states: a 422 (README).
        assert refused.value.status_code == 422 and refused.value.field == "name"
        assert "name" in refused.value.message
        with pytest.raises(BerthAPIError) as missing:
            client.serving.get_deployment(10**6)
        assert missing.value.status_code == 404
        with pytest.raises(BerthAPIError) as bad_range:
            list(client.usage(since="2026-03-02", until="2026-03-01T12:00"))
        assert (bad_range.value.status_code, bad_range.value.field) == (400, "from")
        assert bad_range.value.message == (
            "from: 2026-03-02T00:00:00+00:00 is not before to (2026-03-01T12:00:00+00:00); "
            "give a from before to"
        )
    assert Deployment.objects.count() == 2  # the refused one left nothing behind
    with BerthClient(base_url=berth_console.url, api_key="berth_not-a-key") as stranger:
        with pytest.raises(BerthAPIError) as unknown_key:
            stranger.serving.get_deployment(stuck.pk)
        assert unknown_key.value.status_code == 401


def test_retry_deployment_tries_a_failed_one_again_once_room_is_free(berth_console, bob):
    with berth_console.client() as client:
        holder = deploy(client, name="holder", copies=2, accelerators_per_copy=1)
        with pytest.raises(DeploymentFailedError) as raised:  # both GPUs are the holder's
            deploy(client, name="waiter", accelerators_per_copy=1)
        waiter = raised.value.deployment_id
        with pytest.raises(BerthAPIError) as started:
            client.serving.start_deployment(waiter)
        assert (started.value.status_code, started.value.message) == (
            400,
            "it failed: try it again with retry (Check now on its page), not start",
        )
        with BerthClient(base_url=berth_console.url, api_key=read_key(bob)) as reader:
            with pytest.raises(BerthAPIError) as read_only:
                reader.serving.retry_deployment(waiter)
        assert read_only.value.status_code == 403

        client.serving.stop_deployment(holder)
        wait_for(lambda: state_of_pk(holder) == DeploymentState.STOPPED, 60, what="STOPPED")
        retried = client.serving.retry_deployment("waiter")
        assert (retried.id, retried.name) == (waiter, "waiter")
        ready = client.serving.wait_deployment_ready(waiter, 120, POLL_S)
        assert ready.state is DeploymentStatus.DEPLOYED

        with pytest.raises(BerthAPIError) as again:
            client.serving.retry_deployment(waiter)
        assert (again.value.status_code, again.value.message) == (
            400,
            "only a failed deployment can be tried again; it is deployed",
        )


def read_key(user: object) -> str:
    return keys.issue(user, "dashboard", "read")[1]


def state_of_pk(pk: int) -> str:
    return Deployment.objects.get(pk=pk).state


def test_estimate_model_vram_is_the_consoles_estimate(berth_console):
    model = Model.objects.get(repo_id=QWEN)
    variant = model.variants.get(name="bf16")
    console_says = estimate(model, variant, {"max_model_len": 8192}, 1).total_bytes
    with berth_console.client() as client:
        by_repo = client.serving.estimate_model_vram(QWEN, "bf16", max_model_len=8192)
        by_id = client.serving.estimate_model_vram(model.pk, "bf16", max_model_len=8192)
        longer = client.serving.estimate_model_vram(QWEN, "bf16", max_model_len=32768)
    assert by_repo == by_id == console_says
    assert longer > by_repo  # a longer context needs more KV cache


def test_export_and_apply_plan_carry_out_and_refuse_with_the_plan(berth_console):
    with berth_console.client() as client:
        deploy(client, name="filed", cluster="stuck", wait=False)
        document = client.config_files.export(["filed"])
        assert [(d["name"], d["cluster"], d["routing"]) for d in document["deployments"]] == [
            ("filed", "stuck", "least_loaded")
        ]
        document["deployments"][0]["routing"] = "session"
        planned = client.config_files.apply(document, dry_run=True)
        assert planned == ApplyPlan(
            dry_run=True, applied=False,
            counts={"create": 0, "update": 1, "unchanged": 0, "delete": 0, "would_not_fit": 0,
                    "refused": 0},
            items=[PlanItem("filed", "update", [RevisionChange(
                "routing", "routing", "least_loaded", "session", "routing: least_loaded → session"
            )], "")],
        )  # fmt: skip
        assert Deployment.objects.get(name="filed").routing == "least_loaded"
        done = client.config_files.apply(document)
        assert (done.applied, done.counts["update"]) == (True, 1)
        assert Deployment.objects.get(name="filed").routing == "session"
        assert client.config_files.apply_schema()["required"] == ["version", "deployments"]
        elsewhere = {**document["deployments"][0], "name": "elsewhere", "cluster": "nowhere"}
        blocked = {**document, "deployments": [*document["deployments"], elsewhere]}
        with pytest.raises(ApplyRefusedError) as refused:
            client.config_files.apply(blocked)
        assert (refused.value.status_code, refused.value.message) == (
            409, "nothing was applied: fix elsewhere first",
        )  # fmt: skip
        assert [(i.name, i.action, i.reason) for i in refused.value.plan.items] == [
            ("filed", "unchanged", ""),
            ("elsewhere", "refused", "cluster: there is no cluster named nowhere"),
        ]  # fmt: skip

    async def awaited() -> tuple[dict, ApplyPlan, ApplyRefusedError]:
        async with AsyncBerthClient(base_url=berth_console.url, api_key=berth_console.key) as api:
            exported = await api.config_files.export(team="red")
            again = await api.config_files.apply(exported)
            try:
                await api.config_files.apply(blocked, dry_run=False)
            except ApplyRefusedError as error:
                return exported, again, error
            raise AssertionError("the blocked apply was carried out")

    exported, again, error = asyncio.run(awaited())
    assert exported == document
    assert (again.applied, [(i.name, i.action) for i in again.items]) == (
        True, [("filed", "unchanged")],
    )  # fmt: skip
    assert error.plan == refused.value.plan
    assert not Deployment.objects.filter(name="elsewhere").exists()
