"""Routing by prefix and by session (issue 39): the gateway's own process in front of three
engine simulators, each a copy of one deployment; which copy served a request is read from the
engines' own counters. The load margin and the indexes' bounds are checked on the parts
themselves (gateway/picking.py, gateway/routing.py)."""

from __future__ import annotations

import re
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from deployments.choices import RoutingPolicy
from gateway.directory import Route, Upstream
from gateway.picking import Picker
from gateway.routing import ENTRY_BYTES, LruIndex, Wish, block_hashes, prompt_text, wish_for
from tests import factories
from tests.integration.test_gateway import Engine, key_for, on_offer, post, serving, serving_engines
from tests.processes import gateway_server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

NAMES = ["red-prefix", "red-session", "red-queue"]
SYSTEM_A = "You answer questions about ships. " * 40
SYSTEM_B = "You answer questions about trains. " * 40


@pytest.fixture(scope="module")
def copies() -> Iterator[list[Engine]]:
    started = serving_engines(**{f"copy{i}": ("Qwen/Qwen3-0.6B", NAMES, {}) for i in range(3)})
    yield list(started.values())
    for engine in started.values():
        engine.kill()


@pytest.fixture(scope="module")
def gateway(django_db_setup) -> Iterator[str]:
    with gateway_server(BERTH_GATEWAY_REFRESH_S="0.2") as url:
        yield url


def answered(engines: list[Engine]) -> list[int]:
    return [engine.finished() for engine in engines]


def served_by(engines: list[Engine], before: list[int]) -> list[int]:
    """How many requests each copy has answered since `before`."""
    return [now - then for now, then in zip(answered(engines), before, strict=True)]


def turn(gateway: str, key: str, model: str, messages: list[dict], **extra) -> str:
    body = {"model": model, "messages": messages, "max_tokens": 4, **extra}
    reply = post(f"{gateway}/v1/chat/completions", key, body)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]


def conversation(gateway: str, key: str, system: str, turns: int) -> None:
    """A multi-turn chat: each turn sends the whole conversation so far, as chat clients do."""
    messages = [{"role": "system", "content": system}]
    for number in range(turns):
        messages.append({"role": "user", "content": f"Question {number}?"})
        messages.append(
            {"role": "assistant", "content": turn(gateway, key, "red-prefix", messages)}
        )


def test_each_conversation_stays_on_the_copy_that_holds_its_prefix(gateway, copies, bob, red):
    deployment = factories.make_deployment("red-prefix", red, routing=RoutingPolicy.PREFIX)
    serving(deployment, *(engine.port for engine in copies))
    key = key_for(bob)
    on_offer(gateway, key, "red-prefix")

    for system in (SYSTEM_A, SYSTEM_B):
        before, hits_before = answered(copies), cache_hits(copies)
        conversation(gateway, key, system, 8)
        served = served_by(copies, before)
        assert sorted(served) == [0, 0, 8]  # one copy took all eight turns
        hits = [now - then for now, then in zip(cache_hits(copies), hits_before, strict=True)]
        # Turns 2 to 8 found at least the system message cached there: its 244 tokens (240
        # and 4 of framing) are 15 whole blocks of 16, 240 tokens. No other copy had a hit.
        assert hits[served.index(8)] >= 7 * 240
        assert sum(hits) == hits[served.index(8)]


def cache_hits(engines: list[Engine]) -> list[float]:
    return [engine.metric("vllm:prefix_cache_hits_total") for engine in engines]


def test_a_session_sticks_to_its_copy_by_header_or_by_user(gateway, copies, bob, red):
    deployment = factories.make_deployment("red-session", red, routing=RoutingPolicy.SESSION)
    serving(deployment, *(engine.port for engine in copies))
    key = key_for(bob)
    on_offer(gateway, key, "red-session")
    hello = [{"role": "user", "content": "Hello"}]

    for session in ("header", "user"):
        before = answered(copies)
        for _ in range(6):
            if session == "header":
                body = {"model": "red-session", "messages": hello, "max_tokens": 2}
                reply = httpx.post(
                    f"{gateway}/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {key}", "X-Berth-Session": "s-1"},
                    timeout=30,
                )
                assert reply.status_code == 200, reply.text
            else:
                turn(gateway, key, "red-session", hello, user="alice@example.com")
        assert sorted(served_by(copies, before)) == [0, 0, 6], session


def test_the_prefix_index_counts_a_new_prompts_whole_blocks_on_metrics(gateway, copies, bob, red):
    deployment = factories.make_deployment("red-prefix", red, routing=RoutingPolicy.PREFIX)
    serving(deployment, *(engine.port for engine in copies))
    key = key_for(bob)
    on_offer(gateway, key, "red-prefix")

    def index_figures() -> dict[str, int]:
        text = httpx.get(
            f"{gateway}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10
        ).text
        found = re.findall(r"^(berth_gateway_\w+_index_\w+) (\d+)$", text, re.M)
        return {name: int(value) for name, value in found}

    before = index_figures()
    # Framed as the gateway hashes it: "\x1esystem\x1f" + 632 characters (640 in all), then
    # "\x1euser\x1f" + "hi" (8): 648 characters, 10 whole blocks of 16 tokens × 4 characters.
    turn(gateway, key, "red-prefix", [{"role": "system", "content": "x" * 632},
                                      {"role": "user", "content": "hi"}])  # fmt: skip
    after = index_figures()
    grew = {name: after[name] - before[name] for name in after}
    assert grew == {
        "berth_gateway_prefix_index_entries": 10,
        "berth_gateway_prefix_index_bytes": 10 * 200,
        "berth_gateway_session_index_entries": 0,
    }


# ---------------------------------------------------------------- the parts


def route(policy: str, copy_ids: tuple[int, ...] = (1, 2, 3)) -> Route:
    upstreams = tuple(Upstream(i, 7, f"http://127.0.0.1:{i}", {}) for i in copy_ids)
    return Route(7, "d", 1, "red", 0, "", "DEPLOYED", "d", 180, upstreams, routing=policy)


def test_a_wished_copy_is_passed_over_once_it_is_busier_than_the_margin(settings):
    settings.GATEWAY_ROUTING_MARGIN = 2
    prefixes, sessions = LruIndex(1000, 1 << 20), LruIndex(1000, 1 << 20)
    served = route(RoutingPolicy.SESSION)
    body = {"messages": [], "user": "u"}
    wish = wish_for([served], True, body, "", prefixes, sessions)
    assert wish is not None
    picker = Picker()
    picker.start(served.upstreams[2])  # copy 3 has one in flight: copy 1 is the least loaded
    wish.went_to(served.upstreams[1])  # the session used copy 2
    for _ in range(2):
        picker.start(served.upstreams[1])
    assert picker.choose([served], set(), wish)[1].copy_id == 2  # 2 over copy 1: still 2
    picker.start(served.upstreams[1])
    assert picker.choose([served], set(), wish)[1].copy_id == 1  # 3 over: the least loaded
    assert wish_for([route(RoutingPolicy.LEAST_LOADED)], True, body, "", prefixes, sessions) is None


def test_a_prompt_matches_only_behind_the_same_blocks_and_per_deployment():
    one = block_hashes(7, "a" * 64 + "b" * 64, 64)
    assert block_hashes(7, "a" * 64 + "c" * 64, 64)[0] == one[0]
    assert block_hashes(7, "z" * 64 + "b" * 64, 64)[1] != one[1]
    assert block_hashes(8, "a" * 64, 64)[0] != one[0]  # another deployment's
    assert len(block_hashes(7, "a" * 127, 64)) == 1  # whole blocks only
    chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert prompt_text(True, chat) == "\x1euser\x1fhi"


def test_the_index_keeps_the_copy_of_the_deepest_block_and_drops_the_least_recent():
    index = LruIndex(most_entries=4, most_bytes=1 << 20)
    index.remember([1, 2, 3], copy_id=10)
    index.remember([1, 2], copy_id=20)  # the same beginning, served since by copy 20
    assert index.deepest([1, 2, 3], {10, 20}) == 10
    assert index.deepest([1, 2, 3], {20}) == 20  # copy 10 is not ready: the next best
    index.remember([5, 6], copy_id=30)  # 5 entries over a bound of 4: key 3 was least recent
    assert (len(index), index.deepest([1, 2, 3], {10})) == (4, None)
    by_bytes = LruIndex(most_entries=1000, most_bytes=10 * ENTRY_BYTES)
    by_bytes.remember(range(50), copy_id=1)
    assert (len(by_bytes), by_bytes.bytes) == (10, 10 * ENTRY_BYTES)


def test_an_entry_takes_no_more_memory_than_it_is_accounted_at():
    index = LruIndex(most_entries=200_000, most_bytes=1 << 30)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    # The keys are made here, as a request's hashes are: their int objects count too.
    index.remember((hash(("measured", n)) for n in range(20_000)), copy_id=123_456)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(index) == 20_000
    assert grown / 20_000 <= ENTRY_BYTES


def test_a_wish_names_the_copy_only_among_its_deployments_ready_copies():
    index = LruIndex(100, 1 << 20)
    wish = Wish(index, {7: [1, 2]})
    index.remember([1, 2], copy_id=3)
    assert wish.preferred(route(RoutingPolicy.PREFIX).upstreams) == 3
    assert wish.preferred(route(RoutingPolicy.PREFIX, (1, 2)).upstreams) is None


# ---------------------------------------------------------------- the queue


def long_chat(gateway: str, key: str, tokens: int) -> tuple[httpx.Response, float]:
    """A chat that runs to `tokens` tokens (ignore_eos), and when its reply came back."""
    body = {"model": "red-queue", "messages": [{"role": "user", "content": "Go on"}],
            "max_tokens": tokens, "ignore_eos": True}  # fmt: skip
    reply = post(f"{gateway}/v1/chat/completions", key, body)
    return reply, time.monotonic()


def queued(gateway: str, copies: list[Engine], red, **fields) -> None:
    """red-queue on one copy whose engine runs one request at a time (max_num_seqs 1)."""
    deployment = factories.make_deployment(
        "red-queue", red, engine_settings={"max_num_seqs": 1}, **fields
    )
    serving(deployment, copies[0].port)


def test_past_a_full_copy_requests_wait_in_turn_and_past_the_queue_get_429(
    gateway, copies, bob, red
):
    queued(gateway, copies, red, max_waiting=2)
    key = key_for(bob)
    on_offer(gateway, key, "red-queue")
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(long_chat, gateway, key, 100)  # 0.5 s at the copy
        wait_for(lambda: copies[0].running() == 1, 10, 0.02, "the first at the copy")
        waiting = [pool.submit(long_chat, gateway, key, 20) for _ in range(2)]
        wait_for(lambda: queue_length(gateway, key) == 2, 10, 0.02, "two waiting")
        refused, _at = long_chat(gateway, key, 20)
        answers = [first.result(30), *(w.result(30) for w in waiting)]
    assert (refused.status_code, refused.headers["retry-after"]) == (429, "2")
    assert refused.json()["error"]["message"] == (
        "Every copy of red-queue is busy and 2 requests already wait for one; try again in a "
        "few seconds, or ask an operator for more copies."
    )
    assert [reply.status_code for reply, _at in answers] == [200, 200, 200]
    assert queue_length(gateway, key) == 0


def test_a_request_that_waits_past_its_queue_wait_gets_503(gateway, copies, bob, red):
    queued(gateway, copies, red, max_waiting=5, queue_wait_s=1)
    key = key_for(bob)
    on_offer(gateway, key, "red-queue")
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(long_chat, gateway, key, 600)  # 3 s at the copy
        wait_for(lambda: copies[0].running() == 1, 10, 0.02, "the first at the copy")
        late, _at = long_chat(gateway, key, 5)
        assert busy.result(30)[0].status_code == 200
    assert (late.status_code, late.headers["retry-after"]) == (503, "5")
    assert late.json()["error"]["message"] == (
        "Every copy of red-queue stayed busy for the 1 s this request waited; try again "
        "shortly, or ask an operator for more copies."
    )


def test_the_waiting_requests_of_two_keys_take_turns(gateway, copies, bob, red):
    queued(gateway, copies, red, max_waiting=10)
    first_key, second_key = key_for(bob), key_for(bob)
    on_offer(gateway, first_key, "red-queue")
    with ThreadPoolExecutor(4) as pool:
        running = pool.submit(long_chat, gateway, first_key, 100)
        wait_for(lambda: copies[0].running() == 1, 10, 0.02, "the first at the copy")
        firsts = []
        for number in range(2):
            firsts.append(pool.submit(long_chat, gateway, first_key, 40))
            wait_for(lambda n=number: queue_length(gateway, first_key) == n + 1, 10, 0.02,
                     "the first key's requests waiting")  # fmt: skip
        second = pool.submit(long_chat, gateway, second_key, 40)
        wait_for(lambda: queue_length(gateway, first_key) == 3, 10, 0.02, "three waiting")
        running.result(30)
        ended = {"first key, 1st": firsts[0].result(30)[1], "first key, 2nd": firsts[1].result(30)[1],
                 "second key": second.result(30)[1]}  # fmt: skip
    # The second key's request came last but was served before the first key's second.
    assert sorted(ended, key=ended.__getitem__) == [
        "first key, 1st",
        "second key",
        "first key, 2nd",
    ]


def queue_length(gateway: str, key: str) -> int:
    text = httpx.get(f"{gateway}/metrics", headers={"Authorization": f"Bearer {key}"}).text
    found = re.search(r'^berth_gateway_queue_waiting\{deployment="red-queue"\} (\d+)$', text, re.M)
    return int(found.group(1)) if found else 0
