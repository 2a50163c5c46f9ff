"""The simulator's prefix cache (clusters/simulator/prefix_cache.py): whole blocks behind the
same prefix, at most the prompt less one token, least recently used evicted first."""

from __future__ import annotations

from clusters.simulator.prefix_cache import PrefixCache


def words(*names: str) -> list[str]:
    return [f"{name}{i}" for name in names for i in range(4)]


def test_a_block_is_reused_only_behind_the_same_blocks():
    cache = PrefixCache(block_size=4, capacity_blocks=100)
    assert cache.take(words("a", "b", "c")) == 0
    assert cache.take(words("a", "b", "x")) == 8  # a and b
    assert cache.take(words("x", "b", "c")) == 0  # b behind another first block is another block


def test_a_whole_cached_prompt_still_computes_its_last_token():
    cache = PrefixCache(block_size=4, capacity_blocks=100)
    cache.take(words("a", "b"))
    assert cache.take(words("a", "b")) == 4  # 8 tokens: at most 7 cached, in whole blocks
    assert cache.take([*words("a", "b"), "z"]) == 8


def test_the_least_recently_used_block_goes_first_and_off_means_no_hits():
    cache = PrefixCache(block_size=4, capacity_blocks=2)
    cache.take(words("a", "b"))
    cache.take(words("c", "d"))  # a and b are evicted
    assert cache.take([*words("a", "b"), "z"]) == 0
    off = PrefixCache(block_size=4, capacity_blocks=100, enabled=False)
    off.take(words("a", "b"))
    assert off.take(words("a", "b")) == 0
