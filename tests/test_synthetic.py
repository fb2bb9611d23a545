"""Synthetic copy / reverse / sort data: determinism, correctness, formats, sharding."""

from pathlib import Path

import pytest
import torch

from attnlab.data.synthetic import SyntheticBatches, SyntheticDataModule
from attnlab.data.vocab import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID


def _dm(**kwargs) -> SyntheticDataModule:
    dm = SyntheticDataModule(**kwargs)
    dm.setup()
    return dm


def _rows(batch):
    """(x, y) lists per example of a seq2seq batch, both without their EOS."""
    for src, tgt_in, tgt_out in zip(batch["src"], batch["tgt_in"], batch["tgt_out"], strict=True):
        x = src[src != PAD_ID].tolist()
        y = tgt_out[tgt_out != PAD_ID].tolist()
        assert x[-1] == EOS_ID and EOS_ID not in x[:-1]  # src = x + [EOS], as the text data's
        assert y[-1] == EOS_ID and tgt_in[0] == BOS_ID
        assert tgt_in[1 : len(y)].tolist() == y[:-1]  # tgt_in = [BOS] + y
        yield x[:-1], y[:-1]


@pytest.mark.parametrize(
    ("name", "fn"),
    [("copy", lambda x: x), ("reverse", lambda x: x[::-1]), ("sort", sorted),
     ("shift", lambda x: x[1:] + x[:1])],
)  # fmt: skip
def test_targets_are_the_task_of_the_source(name, fn):
    dm = _dm(name=name, batch_size=32)
    for x, y in _rows(dm.datasets["train"][0]):
        assert y == fn(x)
        assert all(NUM_SPECIAL <= t < NUM_SPECIAL + dm.n_symbols for t in x)


def test_same_seed_same_batches_other_seed_other_batches():
    a, b, c = _dm(seed=3), _dm(seed=3), _dm(seed=4)
    for split in ("train", "val", "test"):
        assert torch.equal(a.datasets[split][1]["src"], b.datasets[split][1]["src"])
        assert not torch.equal(a.datasets[split][1]["src"], c.datasets[split][1]["src"])
    assert not torch.equal(a.datasets["train"][0]["src"], a.datasets["train"][1]["src"])


def test_train_val_and_test_lengths_follow_their_ranges():
    """Validation (model selection) is in distribution unless val_len says otherwise; the test
    split follows eval_len; eval_lengths (scored one by one) do not bound max_seq_len."""
    dm = _dm(train_len=[2, 4], eval_len=[9, 11], eval_lengths=[40], batch_size=64)

    def lengths(split):
        src = dm.datasets[split][0]["src"]
        return ((src != PAD_ID) & (src != EOS_ID)).sum(1)

    assert lengths("train").min() >= 2 and lengths("train").max() <= 4
    assert lengths("val").min() >= 2 and lengths("val").max() <= 4  # val_len: train_len
    assert lengths("test").min() >= 9 and lengths("test").max() <= 11  # longer than training
    assert dm.max_seq_len == 13  # tgt_in [BOS] y of 11, and one decoding step past it
    dm = _dm(train_len=[2, 4], val_len=[5, 6], batch_size=64)
    assert lengths("val").min() >= 5 and lengths("val").max() <= 6


def test_eval_sets_have_the_configured_size():
    dm = _dm(batch_size=10, val_size=25, test_size=40)
    assert sum(b["src"].size(0) for b in dm.val_dataloader()) == 25
    assert sum(b["src"].size(0) for b in dm.test_dataloader()) == 40


def test_lm_format_packs_prompt_and_answer():
    dm = _dm(name="reverse", arch="decoder_only", batch_size=8)
    assert dm.task == "lm" and dm.vocab_size == NUM_SPECIAL + 16 + 1
    batch = dm.datasets["val"][0]
    assert set(batch) == {"tokens", "targets", "prompt_len"}
    for tokens, targets, p in zip(
        batch["tokens"], batch["targets"], batch["prompt_len"], strict=True
    ):
        p = int(p)
        assert tokens[0] == BOS_ID and tokens[p - 1] == dm.sep_id
        x = tokens[1 : p - 1].tolist()
        assert (targets[: p - 1] == PAD_ID).all()  # no loss on the prompt
        answer = targets[p - 1 :]
        answer = answer[answer != PAD_ID].tolist()
        assert answer == x[::-1] + [EOS_ID]
        # targets are the tokens shifted by one where they are defined
        n = len(x) * 2 + 1
        assert tokens[p:n].tolist() == targets[p - 1 : n - 1].tolist()


def _unpadded(batch, key):
    return [row[row != PAD_ID].tolist() for row in batch[key]]


def _sharded(world: int, **kwargs) -> list[SyntheticDataModule]:
    """One data module per rank of a `world`-rank run (what setup() does under DDP)."""
    dms = []
    for rank in range(world):
        dm = SyntheticDataModule(**kwargs)
        for split, size in dm.sizes.items():
            length = dm.train_len if split == "train" else dm.eval_len
            dm.datasets[split] = SyntheticBatches(dm, split, size, length, rank, world)
        dms.append(dm)
    return dms


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_ranks_split_each_global_batch(arch):
    """batch_size is global: at step i the ranks' slices together are the single-process
    batch i (so DDP trains on the same data as one process)."""
    kwargs = {"arch": arch, "batch_size": 8, "val_size": 20, "train_size": 64}
    full = _dm(**kwargs)
    ranks = _sharded(2, **kwargs)
    keys = ("src", "tgt_out") if arch == "encoder_decoder" else ("tokens", "targets")
    for split in ("train", "val"):
        whole = list(full.val_dataloader() if split == "val" else full.train_dataloader())
        parts = [
            list(dm.val_dataloader() if split == "val" else dm.train_dataloader()) for dm in ranks
        ]
        assert len(parts[0]) == len(parts[1]) == len(whole)
        for i, batch in enumerate(whole):
            for key in keys:
                joined = _unpadded(parts[0][i], key) + _unpadded(parts[1][i], key)
                assert joined == _unpadded(batch, key)
            # each slice is trimmed to its own longest example
            assert (parts[0][i][keys[0]] != PAD_ID).any(dim=0).all()
    sizes = [[b[keys[0]].size(0) for b in dm.val_dataloader()] for dm in ranks]
    assert sizes == [[4, 4, 2], [4, 4, 2]]  # the last val batch of 4 is split 2 + 2


def test_a_small_last_eval_batch_leaves_a_rank_one_batch_fewer():
    ranks = _sharded(4, batch_size=8, val_size=10)
    sizes = [[b["src"].size(0) for b in dm.val_dataloader()] for dm in ranks]
    assert sizes == [[2, 1], [2, 1], [2], [2]]
    assert sum(map(sum, sizes)) == 10


def test_training_batches_are_full():
    dm = _dm(batch_size=8, train_size=30)
    assert [b["src"].size(0) for b in dm.train_dataloader()] == [8, 8, 8]


def test_batch_size_must_divide_over_the_ranks():
    assert len(_sharded(2, batch_size=6)[1].datasets["train"]) > 0  # 6 = 2 x 3: fine
    with pytest.raises(
        ValueError, match=r"data\.batch_size=6 is not divisible by the world size 4"
    ):
        _sharded(4, batch_size=6)
    with pytest.raises(ValueError, match=r"data\.train_size=4 is not valid"):
        SyntheticDataModule(batch_size=8, train_size=4)


def test_tokenizer_decodes_symbols():
    dm = _dm()
    ids = [NUM_SPECIAL, NUM_SPECIAL + 2, NUM_SPECIAL + 1, EOS_ID, NUM_SPECIAL]
    assert dm.tokenizer.decode(ids) == "a c b"
    assert dm.tokenizer.encode("a c b") == ids[:3]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"name": "shuffle"}, "data.name"),
        ({"train_len": [5, 2]}, "data.train_len"),
        ({"eval_len": [0, 3]}, "data.eval_len"),
        ({"n_symbols": 1}, "data.n_symbols"),
        ({"batch_size": 0}, "data.batch_size"),
    ],
)
def test_bad_arguments_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        SyntheticDataModule(**kwargs)


def _memory_of_source_and_reverse(pos_encoding: str):
    """The encoder's memory (B, S, d_model) for a copy batch's sources x + [EOS] and for
    reverse(x) + [EOS] (both built by the data code), and the sources' lengths with EOS."""
    from attnlab.data.pairs import seq2seq_pairs
    from attnlab.data.synthetic import make_pairs
    from attnlab.model import Transformer, TransformerConfig

    torch.manual_seed(0)
    x, _, lengths = make_pairs("copy", 8, (5, 9), 16, torch.Generator().manual_seed(3))
    idx = (lengths[:, None] - 1 - torch.arange(x.size(1))[None, :]).clamp(min=0)
    reversed_x = x.gather(1, idx).masked_fill(x == PAD_ID, PAD_ID)
    cfg = TransformerConfig(
        vocab_size=NUM_SPECIAL + 16, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2,
        n_decoder_layers=1, pos_encoding=pos_encoding, dropout=0.0,
    )  # fmt: skip
    model = Transformer(cfg).eval()
    k = lengths.tolist()
    rows = [[r[:n] for r, n in zip(t.tolist(), k, strict=True)] for t in (x, reversed_x)]
    with torch.no_grad():
        a = model.encode(seq2seq_pairs(rows[0], rows[0])["src"])[0]
        b = model.encode(seq2seq_pairs(rows[1], rows[1])["src"])[0]
    return a, b, lengths + 1


def _same_set_of_vectors(a, b, n) -> bool:
    """Whether rows a[:n] and b[:n] are the same multiset of vectors (what cross-attention,
    which carries no positions, reads of the memory)."""
    dist = torch.cdist(a[:n], b[:n])
    return bool(dist.min(dim=1).values.max() < 1e-4 and dist.min(dim=0).values.max() < 1e-4)


def test_alibi_encoder_tells_a_source_from_its_reverse():
    """ALiBi's encoder bias -m|i-j| is symmetric: without an end marker, the memory of reverse(x)
    is the memory of x reversed, the same set of vectors for cross-attention, so copy could not
    be learned. The source's EOS breaks the symmetry (this failed before sources carried it)."""
    a, b, lengths = _memory_of_source_and_reverse("alibi")
    for i, n in enumerate(lengths.tolist()):
        assert not _same_set_of_vectors(a[i], b[i], n), f"row {i}: x and reverse(x) look alike"


def test_without_positions_the_encoder_cannot_tell_a_source_from_its_reverse():
    """The limit no end marker lifts: an encoder without positional encoding is permutation-
    equivariant, so x + [EOS] and reverse(x) + [EOS] give the same set of memory vectors and an
    encoder-decoder without positions cannot learn copy (docs/REPRODUCTION.md, section 1)."""
    a, b, lengths = _memory_of_source_and_reverse("none")
    for i, n in enumerate(lengths.tolist()):
        assert _same_set_of_vectors(a[i], b[i], n)


_DIGEST = """
import hashlib
from attnlab.data.synthetic import SyntheticDataModule
dm = SyntheticDataModule(name="copy", batch_size=8, seed=5)
dm.setup()
h = hashlib.sha256()
for batch in [*dm.length_batches(16, n_examples=20), dm.datasets["test"][1]]:
    h.update(batch["src"].numpy().tobytes())
print(hash("attnlab"), h.hexdigest())
"""


@pytest.mark.slow
def test_per_length_and_split_examples_are_the_same_in_every_process():
    """Two processes with different PYTHONHASHSEED (two runs, two DDP ranks) score the same
    per-length examples: their generators are seeded from integers only. This process is one
    of the two, a fresh one with another PYTHONHASHSEED the other (their str hashes differ)."""
    import os
    import subprocess
    import sys

    here = {}
    exec(_DIGEST, here)  # the same code here: its printed line is this process's
    ours = here["h"].hexdigest()
    seed = "1" if os.environ.get("PYTHONHASHSEED") == "12345" else "12345"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-c", _DIGEST], env=env, capture_output=True, text=True, check=True
    )
    their_hash, theirs = out.stdout.split()
    assert int(their_hash) != hash("attnlab")  # the two processes hash strings differently
    assert theirs == ours


def test_batch_seed_refuses_a_string():
    from attnlab.data.synthetic import batch_seed

    with pytest.raises(TypeError, match="integers only"):
        batch_seed(1, "length", 16)


def test_the_algorithms_are_the_modules_of_their_package_and_a_typo_lists_them():
    """attnlab.data.algorithms: one module per algorithm, found by file (no import); the data
    schema's choices are those modules, so a new algorithm needs no list edited (shift was
    added as its module, its conf/data file and these lines)."""
    import attnlab.data.algorithms as package
    from attnlab.data.algorithms import NAMES, target_of
    from attnlab.data.configs import SYNTHETIC_ALGORITHMS
    from attnlab.data.synthetic import make_pairs

    modules = {p.stem for p in Path(package.__file__).parent.glob("*.py") if p.stem != "__init__"}
    assert NAMES == SYNTHETIC_ALGORITHMS and set(NAMES) == modules  # a new one: its file only
    assert {"copy", "reverse", "sort", "shift"} <= set(NAMES)
    with pytest.raises(ValueError, match=r"^data.name='rot13' is not valid; expected one of: co"):
        make_pairs("rot13", 4, (1, 3), 16, torch.Generator().manual_seed(0))
    x = torch.tensor([[6, 4, 5, 0]])
    assert target_of("sort")(x, torch.tensor([3]), 16).tolist() == [[4, 5, 6, 0]]
    assert target_of("shift")(x, torch.tensor([3]), 16).tolist() == [[4, 5, 6, 0]]
    assert target_of("shift")(x, torch.tensor([1]), 16).tolist() == [[6, 0, 0, 0]]
