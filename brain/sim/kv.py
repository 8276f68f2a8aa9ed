"""The KV cache as vLLM's V1 engine keeps it: fixed-size token blocks, a prefix cache, eviction.

vLLM (``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py``, ``kv_cache_utils.py``) splits
every request's tokens into blocks of ``block_size`` (16 by default), hashes each *full* block
chained to the hash of the block before it, and keeps computed blocks after the request ends:
a block nobody references is free, but it keeps its content (and its hash) until a new
allocation needs the space, least recently freed first. A new request first looks up the
longest chain of its prompt's full blocks that is still cached (never the whole prompt: the
last token is always computed, so at most ``(P - 1) // block_size`` blocks hit), then takes
fresh blocks for the rest. ``vllm:kv_cache_usage_perc`` is the share of blocks referenced by
requests (free blocks holding cached content do not count), and the prefix-cache counters
count prompt tokens asked for and tokens found.

The sim's tokens are 4-byte pieces of the rendered prompt (``tokenizer.py``), so a block is 64
bytes of it and hashing byte slices gives the same blocks as hashing token ids, without
computing the ids. Generated tokens fill private blocks that are not cached (their text comes
back re-rendered in the next prompt, where the prompt's own blocks cache it).

This module only keeps the books; the scheduler (``engine.py``) decides who gets blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from brain.sim.tokenizer import BYTES_PER_TOKEN

BLOCK_SIZE = 16
"""vLLM's default ``--block-size`` on CUDA (``CacheConfig.block_size``)."""


def prompt_block_hashes(prompt: str, block_size: int = BLOCK_SIZE) -> tuple[int, ...]:
    """Chained hashes of the prompt's full blocks (the partial last block has none)."""
    data = prompt.encode("utf-8")
    step = block_size * BYTES_PER_TOKEN
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(data) - step + 1, step):
        parent = hash((parent, data[start : start + step]))
        hashes.append(parent)
    return tuple(hashes)


@dataclass
class Allocation:
    """The blocks one request holds: shared prompt blocks (by hash) and private ones."""

    tokens: int
    """Tokens the blocks must hold (prompt + generated so far)."""
    shared: list[int] = field(default_factory=list)
    private: int = 0
    hit_tokens: int = 0

    @property
    def blocks(self) -> int:
        return len(self.shared) + self.private


class KVCache:
    """Block accounting for one engine: ``num_blocks`` blocks of ``block_size`` tokens."""

    def __init__(self, num_blocks: int, block_size: int = BLOCK_SIZE, prefix_caching: bool = True):
        self.num_blocks = max(1, num_blocks)
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._refs: dict[int, int] = {}
        """Cached blocks referenced by at least one request: hash -> reference count."""
        self._evictable: OrderedDict[int, None] = OrderedDict()
        """Cached blocks nobody references, least recently freed first."""
        self._private = 0

    # ------------------------------------------------------------------ views

    @property
    def used_blocks(self) -> int:
        return len(self._refs) + self._private

    @property
    def free_blocks(self) -> int:
        return self.num_blocks - self.used_blocks

    @property
    def usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc``: 1 - free / total, a fraction."""
        return min(1.0, self.used_blocks / self.num_blocks)

    @property
    def cached_blocks(self) -> int:
        return len(self._refs) + len(self._evictable)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    # ------------------------------------------------------------ allocation

    def _hit_blocks(self, hashes: tuple[int, ...], prompt_tokens: int) -> int:
        if not self.prefix_caching:
            return 0
        limit = min(len(hashes), max(0, prompt_tokens - 1) // self.block_size)
        hits = 0
        while hits < limit and (hashes[hits] in self._refs or hashes[hits] in self._evictable):
            hits += 1
        return hits

    def plan(self, hashes: tuple[int, ...], tokens: int, prompt_tokens: int) -> tuple[int, int]:
        """(hit tokens, free blocks needed) for a request of ``tokens`` whose prompt is
        ``prompt_tokens`` with full-block ``hashes``."""
        hits = self._hit_blocks(hashes, prompt_tokens)
        touched = sum(1 for h in hashes[:hits] if h in self._evictable)
        need = self.blocks_for(tokens) - hits + touched
        return hits * self.block_size, need

    def allocate(
        self, hashes: tuple[int, ...], tokens: int, prompt_tokens: int, *, force: bool = False
    ) -> Allocation | None:
        """Blocks for a request being scheduled, or None when they do not fit (``force``:
        take them anyway, for a request alone in an engine too small for it)."""
        hit_tokens, need = self.plan(hashes, tokens, prompt_tokens)
        if need > self.free_blocks and not force:
            return None
        hits = hit_tokens // self.block_size
        alloc = Allocation(tokens=tokens, hit_tokens=hit_tokens)
        for h in hashes[:hits]:
            self._evictable.pop(h, None)
            self._refs[h] = self._refs.get(h, 0) + 1
            alloc.shared.append(h)
        full = min(len(hashes), tokens // self.block_size) if self.prefix_caching else 0
        for h in hashes[hits:full]:
            if h in self._refs:  # computed by a request still running: share it
                self._refs[h] += 1
            else:
                self._evictable.pop(h, None)
                self._take_block()
                self._private -= 1  # the block is now a cached one
                self._refs[h] = 1
            alloc.shared.append(h)
        rest = self.blocks_for(tokens) - len(alloc.shared)
        for _ in range(rest):
            self._take_block()
        alloc.private = rest
        return alloc

    def _take_block(self) -> None:
        """One block out of the free pool: an empty one, else the oldest evictable one."""
        empty = self.num_blocks - self.used_blocks - len(self._evictable)
        if empty <= 0 and self._evictable:
            self._evictable.popitem(last=False)
        self._private += 1

    def grow(self, alloc: Allocation, tokens: int, *, force: bool = False) -> bool:
        """Room for ``tokens`` more in ``alloc``; False (nothing taken) when none is free."""
        need = self.blocks_for(alloc.tokens + tokens) - alloc.blocks
        if need > self.free_blocks and not force:
            return False
        for _ in range(max(0, need)):
            self._take_block()
        alloc.private += max(0, need)
        alloc.tokens += tokens
        return True

    def free(self, alloc: Allocation) -> None:
        """Give the request's blocks back; cached ones stay findable until evicted (the
        tail first, as vLLM frees a request's blocks in reverse order)."""
        self._private -= alloc.private
        for h in reversed(alloc.shared):
            count = self._refs.get(h, 0) - 1
            if count > 0:
                self._refs[h] = count
            else:
                self._refs.pop(h, None)
                self._evictable[h] = None
        alloc.shared.clear()
        alloc.private = 0

    def reset(self) -> None:
        """Forget every cached block nobody holds (vLLM's ``/reset_prefix_cache``)."""
        self._evictable.clear()
