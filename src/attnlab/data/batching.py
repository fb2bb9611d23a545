"""Batch samplers: token-budget batches for translation (Sec. 5.1), blocks for language models.

Both are torch Samplers yielding lists of indices, to pass as `DataLoader(batch_sampler=...)`.

Epochs. The order of epoch e depends only on (seed, e). Like DistributedSampler, a sampler
serves the epoch given to `set_epoch(e)` (0 by default), or, when built with
`epoch_fn=lambda: trainer.current_epoch` (what the DataModules do), whatever epoch that
function returns when iteration starts. The latter is needed because Lightning only calls
`set_epoch` on `dataloader.sampler` and `dataloader.batch_sampler.sampler`, never on a batch
sampler, and may call `iter()` on a loader more than once per epoch (after a reload it does
so twice), so neither Lightning nor an iteration counter can be trusted to advance the epoch.

Distributed training (`num_replicas` = R ranks). Batch sizes are global, as in a single-process
run: TokenBatchSampler's `max_tokens` is the budget of all ranks together and each rank's
batches are cut with max_tokens // R tokens; BlockBatchSampler's `batch_size` is the number of
blocks over all ranks and each rank takes batch_size / R of them (R must divide it:
`per_rank_batch_size`). Rank r takes the shuffled per-rank batches r, r+R, r+2R... so ranks
never share a batch; for blocks the R batches of one step are together exactly the
single-process batch of that step. In training mode the remainder of fewer than R batches is
dropped (`drop_last=True`, a different remainder each epoch) or filled by repeating the first
batches (`drop_last=False`); either way every rank gets the same number of batches, which DDP
needs. In eval mode (shuffle=False) nothing is dropped or repeated: every example is seen
exactly once over all ranks, and ranks may differ by one batch (Lightning's eval loop
synchronises metrics only at the end of the epoch, so this is safe).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler


def per_rank_batch_size(batch_size: int, world_size: int, key: str = "data.batch_size") -> int:
    """The share of a global batch of `batch_size` examples that each of `world_size` ranks
    takes; a ValueError naming `key` when the ranks cannot share it equally."""
    if world_size < 1:
        raise ValueError(f"world size {world_size} must be >= 1")
    if batch_size % world_size:
        raise ValueError(
            f"{key}={batch_size} is not divisible by the world size {world_size} "
            f"(trainer.devices x trainer.num_nodes); the batch is global, so use a multiple "
            f"of {world_size}"
        )
    return batch_size // world_size


class _EpochBatchSampler(Sampler[list[int]]):
    """Epoch counter and sharding over ranks; subclasses make the batches of one epoch."""

    def __init__(
        self,
        shuffle: bool,
        seed: int,
        num_replicas: int,
        rank: int,
        drop_last: bool,
        epoch_fn: Callable[[], int] | None,
    ) -> None:
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must be in [0, num_replicas={num_replicas})")
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.epoch_fn = epoch_fn
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch])

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        raise NotImplementedError

    def _num_batches(self) -> int:
        raise NotImplementedError

    def _shard(self, batches: list[list[int]]) -> list[list[int]]:
        R = self.num_replicas
        if R == 1:
            return batches
        if self.shuffle:
            if self.drop_last:
                batches = batches[: len(batches) // R * R]
            else:
                pad = -len(batches) % R
                batches = batches + (batches * (pad // max(len(batches), 1) + 1))[:pad]
        return batches[self.rank :: R]

    def current_epoch(self) -> int:
        return self.epoch_fn() if self.epoch_fn is not None else self.epoch

    def batches(self, epoch: int | None = None) -> list[list[int]]:
        """This rank's batches for `epoch` (default: the current one)."""
        return self._shard(self._epoch_batches(self.current_epoch() if epoch is None else epoch))

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches())

    def __len__(self) -> int:
        n, R = self._num_batches(), self.num_replicas
        if R == 1:
            return n
        if not self.shuffle:
            return len(range(self.rank, n, R))
        return n // R if self.drop_last else -(-n // R)


class TokenBatchSampler(_EpochBatchSampler):
    """Sentence pairs batched by approximate length, about `max_tokens` tokens per batch.

    Sec. 5.1: "Sentence pairs were batched together by approximate sequence length. Each
    training batch contained a set of sentence pairs containing approximately 25000 source
    tokens and 25000 target tokens." Here the budget counts padding: a batch of n pairs costs
    n * (max src length + max tgt length) <= max_tokens (a single pair longer than max_tokens
    alone is the only exception; the DataModules filter those out of training).

    Pairs are sorted by (src length, tgt length) with ties broken at random, cut greedily into
    batches, and the batches shuffled (shuffle=True) or kept in length order (shuffle=False).
    Because only equal-length pairs swap places, the batch boundaries and hence `len()` are
    the same in every epoch while the batches' contents change.

    `max_tokens` is the global budget: with num_replicas = R the batches are cut with
    `rank_max_tokens` = max_tokens // R tokens, so the R batches of one step hold about
    max_tokens tokens together, as one batch of a single-process run does.
    """

    def __init__(
        self,
        src_lens: Sequence[int],
        tgt_lens: Sequence[int] | None = None,
        max_tokens: int = 4096,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = True,
        epoch_fn: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(shuffle, seed, num_replicas, rank, drop_last, epoch_fn)
        if max_tokens < num_replicas:
            raise ValueError(
                f"max_tokens={max_tokens} must be at least num_replicas={num_replicas} "
                "(it is the global token budget of a step, shared by the ranks)"
            )
        self.src_lens = np.asarray(src_lens, dtype=np.int64)
        self.tgt_lens = (
            np.zeros_like(self.src_lens) if tgt_lens is None else np.asarray(tgt_lens, np.int64)
        )
        if len(self.src_lens) != len(self.tgt_lens):
            raise ValueError(f"{len(self.src_lens)} src lengths but {len(self.tgt_lens)} tgt")
        self.max_tokens = max_tokens
        self.rank_max_tokens = max_tokens // num_replicas
        # Batch boundaries in the sorted order; identical for every tie-breaking.
        order = np.lexsort((self.tgt_lens, self.src_lens))
        self._bounds = _greedy_bounds(
            self.src_lens[order], self.tgt_lens[order], self.rank_max_tokens
        )

    def _num_batches(self) -> int:
        return len(self._bounds)

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        n = len(self.src_lens)
        if self.shuffle:
            rng = self._rng(epoch)
            perm = rng.permutation(n)
            # lexsort is stable: equal (src, tgt) lengths keep their random order
            order = perm[np.lexsort((self.tgt_lens[perm], self.src_lens[perm]))]
        else:
            order = np.lexsort((self.tgt_lens, self.src_lens))
        order = order.tolist()
        batches = [order[a:b] for a, b in self._bounds]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


def _greedy_bounds(src: np.ndarray, tgt: np.ndarray, max_tokens: int) -> list[tuple[int, int]]:
    """[start, end) of consecutive runs whose padded size n * (max src + max tgt) fits."""
    bounds, start, max_s, max_t = [], 0, 0, 0
    for i, (s, t) in enumerate(zip(src.tolist(), tgt.tolist(), strict=True)):
        new_s, new_t = max(max_s, s), max(max_t, t)
        if i > start and (i - start + 1) * (new_s + new_t) > max_tokens:
            bounds.append((start, i))
            start, new_s, new_t = i, s, t
        max_s, max_t = new_s, new_t
    if len(src) > start:
        bounds.append((start, len(src)))
    return bounds


def padding_fraction(
    batches: Sequence[Sequence[int]], src_lens: Sequence[int], tgt_lens: Sequence[int]
) -> float:
    """Fraction of the padded batch tensors (src and tgt together) that is padding."""
    src_lens, tgt_lens = np.asarray(src_lens), np.asarray(tgt_lens)
    real = padded = 0
    for b in batches:
        s, t = src_lens[list(b)], tgt_lens[list(b)]
        real += int(s.sum() + t.sum())
        padded += len(b) * int(s.max() + t.max())
    return 1.0 - real / padded if padded else 0.0


class BlockBatchSampler(_EpochBatchSampler):
    """Start offsets of `block_size`-token blocks of a token stream, `batch_size` per step
    (global: each of num_replicas ranks takes `rank_batch_size` = batch_size / num_replicas).

    Each index is a position in the stream; the block there is stream[i : i + block_size + 1]
    (inputs block[:-1], targets block[1:]). Training (shuffle=True): each epoch the blocks are
    tiled from a random offset in [0, block_size) and shuffled, so block boundaries move between
    epochs; every epoch has the same number of blocks. Eval (shuffle=False): fixed
    non-overlapping blocks from position 0, the last one possibly shorter, so every token but
    the first is a target exactly once.
    """

    def __init__(
        self,
        n_tokens: int,
        block_size: int,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = True,
        epoch_fn: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(shuffle, seed, num_replicas, rank, drop_last, epoch_fn)
        if block_size < 1 or batch_size < 1:
            raise ValueError(f"block_size={block_size}, batch_size={batch_size} must be >= 1")
        if n_tokens < 2 or (shuffle and n_tokens < 2 * block_size):
            raise ValueError(
                f"a stream of {n_tokens} tokens is too short for block_size={block_size} "
                f"(training needs at least 2 * block_size tokens)"
            )
        self.n_tokens, self.block_size, self.batch_size = n_tokens, block_size, batch_size
        self.rank_batch_size = per_rank_batch_size(batch_size, num_replicas)
        if shuffle:  # blocks that fit whatever the offset
            self._n_blocks = (n_tokens - block_size) // block_size
        else:
            self._n_blocks = len(range(0, n_tokens - 1, block_size))

    def _num_batches(self) -> int:
        return -(-self._n_blocks // self.rank_batch_size)

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        if self.shuffle:
            rng = self._rng(epoch)
            offset = int(rng.integers(self.block_size))
            starts = offset + self.block_size * rng.permutation(self._n_blocks)
        else:
            starts = self.block_size * np.arange(self._n_blocks)
        starts = starts.tolist()
        b = self.rank_batch_size  # consecutive per-rank batches, dealt out round-robin
        return [starts[i : i + b] for i in range(0, len(starts), b)]
