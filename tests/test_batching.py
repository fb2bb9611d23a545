"""Token-budget and block batch samplers: budget, coverage, epochs, seeds, ranks."""

import numpy as np
import pytest

from attnlab.data.batching import BlockBatchSampler, TokenBatchSampler, padding_fraction

MAX_TOKENS = 300


@pytest.fixture(scope="module")
def lengths():
    rng = np.random.default_rng(0)
    src = rng.integers(2, 40, size=1000)
    tgt = np.clip(src + rng.integers(-5, 6, size=1000), 2, 45)
    return src.tolist(), tgt.tolist()


def _cost(batch, src, tgt):
    return len(batch) * (max(src[i] for i in batch) + max(tgt[i] for i in batch))


@pytest.mark.parametrize("shuffle", [True, False])
def test_budget_and_exact_cover(lengths, shuffle):
    src, tgt = lengths
    sampler = TokenBatchSampler(src, tgt, max_tokens=MAX_TOKENS, shuffle=shuffle, seed=1)
    for _ in range(2):  # two epochs
        batches = list(sampler)
        assert len(batches) == len(sampler)
        assert all(_cost(b, src, tgt) <= MAX_TOKENS for b in batches)
        assert sorted(i for b in batches for i in b) == list(range(len(src)))
        # "about max_tokens": almost every batch is more than half full
        assert np.mean([_cost(b, src, tgt) > MAX_TOKENS / 2 for b in batches]) > 0.9


def test_epochs_reshuffle_and_seed_determines_order(lengths):
    src, tgt = lengths
    a = TokenBatchSampler(src, tgt, max_tokens=MAX_TOKENS, seed=3)
    b = TokenBatchSampler(src, tgt, max_tokens=MAX_TOKENS, seed=3)
    a.set_epoch(5)
    b.set_epoch(5)
    epoch5 = list(a)
    assert epoch5 == list(b) == list(a)  # iterating again does not advance the epoch
    a.set_epoch(6)
    epoch6 = list(a)
    assert epoch6 != epoch5
    # epoch_fn (e.g. reading trainer.current_epoch) takes precedence over set_epoch
    epoch = {"now": 6}
    c = TokenBatchSampler(src, tgt, max_tokens=MAX_TOKENS, seed=3, epoch_fn=lambda: epoch["now"])
    assert list(c) == epoch6
    epoch["now"] = 5
    assert list(c) == epoch5
    # contents change too, not only the order of fixed batches
    assert {tuple(sorted(x)) for x in epoch5} != {tuple(sorted(x)) for x in epoch6}
    other_seed = TokenBatchSampler(src, tgt, max_tokens=MAX_TOKENS, seed=4)
    other_seed.set_epoch(5)
    assert list(other_seed) != epoch5
    assert len(a) == len(epoch5) == len(epoch6)  # len() is the same in every epoch


def test_eval_order_is_fixed(lengths):
    src, tgt = lengths
    s = TokenBatchSampler(src, tgt, max_tokens=MAX_TOKENS, shuffle=False)
    assert list(s) == list(s)


@pytest.mark.parametrize("drop_last", [True, False])
def test_ranks_get_disjoint_batches_of_equal_count(lengths, drop_last):
    src, tgt = lengths
    n = len(TokenBatchSampler(src, tgt, max_tokens=MAX_TOKENS, seed=2))
    R = 3
    assert n % R == 2, "the fixture should leave a remainder to drop or pad"
    # max_tokens is the global budget: R ranks at R * MAX_TOKENS cut MAX_TOKENS-token batches
    ranks = [
        TokenBatchSampler(
            src, tgt, R * MAX_TOKENS, seed=2, num_replicas=R, rank=r, drop_last=drop_last
        )
        for r in range(R)
    ]
    for r in ranks:
        r.set_epoch(7)
    per_rank = [list(r) for r in ranks]
    assert all(_cost(b, src, tgt) <= MAX_TOKENS for batches in per_rank for b in batches)
    assert {len(b) for b in per_rank} == {len(r) for r in ranks} == {-(-n // R) - drop_last}
    seen = [{i for b in batches for i in b} for batches in per_rank]
    if drop_last:
        assert all(not seen[a] & seen[b] for a in range(R) for b in range(a + 1, R))
    else:  # the missing batch is filled by repeating one: all data seen, one batch twice
        assert set.union(*seen) == set(range(len(src)))
        n_seen = sum(len(b) for batches in per_rank for b in batches)
        assert n_seen - len(src) == len(per_rank[-1][-1])


def test_eval_ranks_cover_every_example_once(lengths):
    src, tgt = lengths
    parts = [
        list(TokenBatchSampler(src, tgt, MAX_TOKENS, shuffle=False, num_replicas=3, rank=r))
        for r in range(3)
    ]
    assert sorted(i for p in parts for b in p for i in b) == list(range(len(src)))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_max_tokens_is_the_global_budget(lengths):
    src, tgt = lengths
    one = TokenBatchSampler(src, tgt, max_tokens=MAX_TOKENS, seed=1)
    two = [TokenBatchSampler(src, tgt, MAX_TOKENS, seed=1, num_replicas=2, rank=r) for r in (0, 1)]
    assert two[0].rank_max_tokens == MAX_TOKENS // 2
    steps = list(zip(*(list(t) for t in two), strict=True))
    # one step of two ranks holds about as many tokens as one single-process batch
    per_step = np.mean([sum(_cost(b, src, tgt) for b in step) for step in steps])
    single = np.mean([_cost(b, src, tgt) for b in one])
    assert 0.8 < per_step / single <= 1.0
    assert all(_cost(b, src, tgt) <= MAX_TOKENS // 2 for step in steps for b in step)
    with pytest.raises(ValueError, match="max_tokens=1 must be at least num_replicas=2"):
        TokenBatchSampler(src, tgt, max_tokens=1, num_replicas=2)


def test_bad_rank():
    with pytest.raises(ValueError, match="rank=2 must be in"):
        TokenBatchSampler([3, 4], [3, 4], num_replicas=2, rank=2)


def test_padding_fraction(lengths):
    assert padding_fraction([[0, 1]], [2, 4], [3, 3]) == pytest.approx(1 - 12 / 14)
    src, tgt = lengths
    sorted_batches = list(TokenBatchSampler(src, tgt, max_tokens=MAX_TOKENS))
    random_batches = np.array_split(np.random.default_rng(0).permutation(len(src)), 100)
    sorted_pad = padding_fraction(sorted_batches, src, tgt)
    assert 0 <= sorted_pad < 0.1 < padding_fraction(random_batches, src, tgt)


def test_block_sampler_train_offsets():
    n, block = 1000, 32
    s = BlockBatchSampler(n, block, batch_size=4, seed=0)
    offsets = set()
    for epoch in range(6):
        s.set_epoch(epoch)
        starts = [i for b in list(s) for i in b]
        assert len(starts) == (n - block) // block  # same count every epoch
        assert len({i % block for i in starts}) == 1  # one offset per epoch
        assert len(set(starts)) == len(starts)  # non-overlapping
        assert min(starts) >= 0 and max(starts) + block + 1 <= n
        offsets.add(starts[0] % block)
    assert len(offsets) > 1
    assert len(s) == -(-((n - block) // block) // 4)


def test_block_sampler_eval_covers_every_target_once():
    n, block = 1000, 32
    starts = [i for b in BlockBatchSampler(n, block, 4, shuffle=False) for i in b]
    targets = [t for i in starts for t in range(i + 1, min(i + block + 1, n))]
    assert targets == list(range(1, n))


def test_block_sampler_too_short():
    with pytest.raises(ValueError, match="too short for block_size=64"):
        BlockBatchSampler(100, 64, 4)


@pytest.mark.parametrize("shuffle", [True, False])
def test_block_sampler_batch_size_is_global(shuffle):
    """With R ranks, the R batches of step i are together the single-process batch i."""
    n, block, R = 1000, 16, 3
    one = list(BlockBatchSampler(n, block, batch_size=6, seed=5, shuffle=shuffle))
    ranks = [
        list(BlockBatchSampler(n, block, 6, shuffle=shuffle, seed=5, num_replicas=R, rank=r))
        for r in range(R)
    ]
    assert {len(b) for rank in ranks for b in rank[:-1]} == {2}
    steps = list(zip(*ranks, strict=False))  # the steps every rank has
    assert len(steps) >= len(one) - 1
    for i, step in enumerate(steps[: len(one) - 1]):
        assert [x for b in step for x in b] == one[i]


def test_block_sampler_batch_size_must_divide():
    with pytest.raises(
        ValueError, match=r"data\.batch_size=5 is not divisible by the world size 2"
    ):
        BlockBatchSampler(1000, 16, batch_size=5, num_replicas=2, rank=0)
