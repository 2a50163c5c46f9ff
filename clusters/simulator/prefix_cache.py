"""The engine's prefix cache, as vLLM's (V1) keeps one: full blocks of prompt tokens, each found
by the hash of its tokens and of every block before it, so that a block is reused only behind
the same prefix. A request's hit is its leading run of cached blocks; when the whole prompt is
cached the last block is computed again (the engine needs one token's logits), so a hit is at
most the prompt less one token, in whole blocks. Hits and queries are counted in tokens.

Blocks are kept least recently used first and evicted when the cache holds as many blocks as
the KV cache has: vLLM keeps freed blocks cached until it needs their room.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    def __init__(self, block_size: int, capacity_blocks: int, enabled: bool = True) -> None:
        self.block_size = block_size
        self.capacity = capacity_blocks if enabled else 0
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def block_hashes(self, tokens: Sequence[str]) -> list[int]:
        """The chained hash of each full block of the prompt."""
        hashes: list[int] = []
        previous = 0
        size = self.block_size
        for start in range(0, len(tokens) - size + 1, size):
            previous = hash((previous, *tokens[start : start + size]))
            hashes.append(previous)
        return hashes

    def take(self, tokens: Sequence[str]) -> int:
        """The prompt's tokens found cached; its full blocks are cached from now on."""
        if self.capacity <= 0 or not tokens:
            return 0
        hashes = self.block_hashes(tokens)
        most = (len(tokens) - 1) // self.block_size  # the last token is always computed
        hit = 0
        for block in hashes[:most]:
            if block not in self.blocks:
                break
            hit += 1
        for block in hashes:
            self.blocks[block] = None
            self.blocks.move_to_end(block)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        return hit * self.block_size
