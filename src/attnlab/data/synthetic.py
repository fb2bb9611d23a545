"""Synthetic sequence algorithms (attnlab.data.algorithms: copy, reverse, sort, ...), generated
from the seed: no files.

Every batch is a pure function of (seed, split, batch index), so runs are reproducible.
Training draws fresh examples for every batch; validation and test are fixed sets with their own
length ranges: `val_len` (default: `train_len`), in distribution, selects the checkpoint;
`eval_len` is the test split's. Length extrapolation is measured one length at a time:
`eval_lengths` lists lengths whose examples (`length_batches`, all exactly that long) are scored
at the end of training (attnlab.training.extrapolation) and by `attnlab-eval eval.lengths=[...]`.

`batch_size` is the global batch. Under DDP with W ranks every rank generates global batch i and
keeps its slice r (batch_size / W examples, trimmed to their own longest length), so the ranks
together train on exactly the batches of a single-process run; a batch_size that W does not
divide is an error. Training batches are always full (train_size is rounded down to a multiple
of batch_size); the last validation / test batch may be smaller and is split as evenly as it
goes, so a rank may get one batch fewer there.

Batches follow docs/architecture.md, built by attnlab.data.pairs. For an encoder-decoder (task
"seq2seq"):
    src = x + [EOS], tgt_in = [BOS] + y, tgt_out = y + [EOS]
The source ends in EOS as the text data's sources do: without an end marker an encoder whose only
position signal is symmetric (ALiBi's -m|i-j|) or absent cannot tell x from reverse(x), and copy
would be capped near chance whatever the encoding could do.
For a decoder-only model (task "lm") the pair becomes one sequence [BOS] x [SEP] y [EOS]; the
loss is only on y + [EOS] (targets elsewhere are PAD) and `prompt_len` = |x| + 2 marks where
generation starts.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

from attnlab.data.algorithms import target_of
from attnlab.data.batching import per_rank_batch_size
from attnlab.data.configs import SYNTHETIC_ALGORITHMS, SyntheticDataConfig, options_of
from attnlab.data.options import TASK_OF_ARCH, task_for_arch
from attnlab.data.pairs import lm_pairs, seq2seq_pairs
from attnlab.data.resumable import ResumableDataModule
from attnlab.data.vocab import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID
from attnlab.problems import choice_problem, integer_problem, not_valid, present, raise_first

_SPLITS = {"train": 0, "val": 1, "test": 2}
_LENGTH_STREAM = 3  # length_batches' examples: a stream of their own


def batch_seed(*ints: int) -> int:
    """The generator seed of one batch, from integers only. A tuple of ints hashes the same in
    every process (str and bytes hashes change with PYTHONHASHSEED, so a string in the tuple
    would give every process, every DDP rank, other examples)."""
    if not all(isinstance(i, int) for i in ints):
        raise TypeError(f"batch_seed takes integers only, got {ints!r}")
    return hash(ints) & (2**63 - 1)


_SPECIAL_NAMES = {PAD_ID: "<pad>", BOS_ID: "<s>", EOS_ID: "</s>"}


def _lengths_problem(key: str, value) -> str | None:
    """Unless `value` is a list of integers >= 1 (possibly empty)."""
    try:
        items = [] if isinstance(value, str) else list(value)
    except TypeError:
        return not_valid(key, value, "a list of lengths (integers >= 1)")
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in items):
        return None
    return not_valid(key, items, "a list of lengths (integers >= 1)")


def _length_range_problem(key: str, value) -> str | None:
    """Unless `value` is [min, max] with 1 <= min <= max."""
    try:
        pair = [] if isinstance(value, str) else list(value)
    except TypeError:
        pair = []
    if len(pair) == 2 and all(isinstance(v, int) for v in pair) and 1 <= pair[0] <= pair[1]:
        return None
    return not_valid(key, pair or value, "[min, max] with 1 <= min <= max")


class SymbolTokenizer:
    """Symbols NUM_SPECIAL.. NUM_SPECIAL + n_symbols - 1 shown as a, b, c, ... (or s0, s1, ...
    beyond 26); `sep_id`, when given, is shown as '|'. Tokens are space-separated."""

    def __init__(self, n_symbols: int, sep_id: int | None = None) -> None:
        self.n_symbols = n_symbols
        self.sep_id = sep_id
        self.vocab_size = NUM_SPECIAL + n_symbols + (sep_id is not None)

    def _piece(self, i: int) -> str:
        k = i - NUM_SPECIAL
        return chr(ord("a") + k) if self.n_symbols <= 26 else f"s{k}"

    def decode(self, ids) -> str:
        """Symbols and '|' joined by spaces; specials dropped, stops at the first EOS."""
        pieces = []
        for i in (int(t) for t in ids):
            if i == EOS_ID:
                break
            if i == self.sep_id:
                pieces.append("|")
            elif NUM_SPECIAL <= i < NUM_SPECIAL + self.n_symbols:
                pieces.append(self._piece(i))
        return " ".join(pieces)

    def encode(self, text: str) -> list[int]:
        table = {self._piece(NUM_SPECIAL + k): NUM_SPECIAL + k for k in range(self.n_symbols)}
        if self.sep_id is not None:
            table["|"] = self.sep_id
        try:
            return [table[p] for p in text.split()]
        except KeyError as err:
            raise ValueError(f"unknown symbol {err.args[0]!r}; known: {' '.join(table)}") from None


def make_pairs(
    algorithm: str, n: int, length: tuple[int, int], n_symbols: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n random inputs x with |x| uniform in [length[0], length[1]] and their targets y.

    Returns x (n, L) and y (n, L), right-padded with PAD, and the lengths (n,); |y| = |x|.
    """
    answer = target_of(algorithm)  # ValueError naming data.name and the choices, before drawing
    lo, hi = length
    lengths = torch.randint(lo, hi + 1, (n,), generator=generator)
    width = int(lengths.max())
    x = torch.randint(NUM_SPECIAL, NUM_SPECIAL + n_symbols, (n, width), generator=generator)
    x = x.masked_fill(torch.arange(width)[None, :] >= lengths[:, None], PAD_ID)
    y = answer(x, lengths, n_symbols)
    return x, y, lengths


class SyntheticBatches(Dataset):
    """A map-style dataset whose items are whole batches: item i is this rank's slice of global
    batch i, which is generated from its own seed (seed, split, i).

    Training ("train") has train_size // batch_size full global batches; evaluation has
    ceil(n_examples / batch_size), the last one possibly partial.
    """

    def __init__(
        self,
        dm: SyntheticDataModule,
        split: str,
        n_examples: int,
        length,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.dm, self.split, self.length = dm, split, tuple(length)
        self.n_examples = n_examples
        self.rank, self.world_size = rank, world_size
        per_rank_batch_size(dm.batch_size, world_size)  # the global batch must divide
        if split == "train":
            self.n_global = n_examples // dm.batch_size
        else:
            self.n_global = -(-n_examples // dm.batch_size)
            if n_examples < world_size:
                raise ValueError(
                    f"data.{split}_size={n_examples} is smaller than the world size "
                    f"{world_size}: every rank needs at least one example"
                )

    def _global_size(self, g: int) -> int:
        return min(self.dm.batch_size, self.n_examples - g * self.dm.batch_size)

    def _rows(self, g: int) -> range:
        """This rank's rows of global batch g: an even split (sizes differ by at most one)."""
        size, world = self._global_size(g), self.world_size
        start = self.rank * (size // world) + min(self.rank, size % world)
        stop = start + size // world + (self.rank < size % world)
        return range(start, stop)

    def __len__(self) -> int:
        if self.n_global and not self._rows(self.n_global - 1):
            return self.n_global - 1  # a last eval batch too small to reach this rank
        return self.n_global

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(i)
        generator = torch.Generator().manual_seed(batch_seed(self.dm.seed, _SPLITS[self.split], i))
        return self.dm.make_batch(self._global_size(i), self.length, generator, self._rows(i))


def positions_needed(task: str, length: int) -> int:
    """Positions a model reads for inputs of `length` symbols, greedy decoding included:
    seq2seq: src x [EOS] (length + 1), tgt_in [BOS] y (length + 1), one more step to emit
    EOS; lm: [BOS] x [SEP] y (2 * length + 2)."""
    return 2 * length + 2 if task == "lm" else length + 2


def max_positions(o: SyntheticDataConfig) -> int:
    """Positions of the longest sequence of the training, validation and test splits (the
    eval_lengths may go beyond what a model represents)."""
    longest = max(o.train_len[1], (o.val_len or o.train_len)[1], o.eval_len[1])
    return positions_needed(task_for_arch(o.arch), longest)


class SyntheticDataModule(ResumableDataModule):
    """copy / reverse / sort over `n_symbols` symbols (ids NUM_SPECIAL upward).

    `arch` (the model's) picks the batch format: "encoder_decoder" -> task "seq2seq",
    "decoder_only" -> task "lm" (with one extra separator symbol in the vocabulary).
    `batch_size` is the global batch (over all DDP ranks); `train_size` is the number of
    (fresh) training examples per epoch, rounded down to whole batches.
    """

    config_class = SyntheticDataConfig  # the options (attnlab.data.configs)
    # exact_match=null means this: every evaluation sequence greedy-decoded, since one right
    # answer per input makes exact match the task's measure (attnlab.pipeline.build)
    exact_match = True

    def __init__(self, **options) -> None:
        """`options`: SyntheticDataConfig's fields (attnlab.data.configs), checked here."""
        super().__init__()
        o = self.options = options_of(self.config_class, options, type(self).__name__)
        raise_first(self.own_problems(o))
        self.name, self.arch, self.n_symbols = o.name, o.arch, o.n_symbols
        self.train_len, self.eval_len = tuple(o.train_len), tuple(o.eval_len)
        self.val_len = self.train_len if o.val_len is None else tuple(o.val_len)
        self.eval_lengths = [int(n) for n in o.eval_lengths]
        self.batch_size, self.seed, self.num_workers = o.batch_size, o.seed, o.num_workers
        self.sizes = {"train": o.train_size, "val": o.val_size, "test": o.test_size}
        self.task = task_for_arch(o.arch)
        self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID
        self.sep_id = NUM_SPECIAL + o.n_symbols if self.task == "lm" else None
        self.tokenizer = SymbolTokenizer(o.n_symbols, self.sep_id)
        self.vocab_size = self.tokenizer.vocab_size
        self.max_seq_len = max_positions(o)
        self.datasets: dict[str, SyntheticBatches] = {}

    @staticmethod
    def own_problems(o: SyntheticDataConfig) -> list[str]:
        """One line per bad option, each naming its data.<key>."""
        val_len = o.train_len if o.val_len is None else o.val_len
        problems = present(
            choice_problem("data.name", o.name, SYNTHETIC_ALGORITHMS),
            choice_problem("data.arch", o.arch, tuple(TASK_OF_ARCH)),
            _length_range_problem("data.train_len", o.train_len),
            _length_range_problem("data.eval_len", o.eval_len),
            _length_range_problem("data.val_len", val_len),
            _lengths_problem("data.eval_lengths", o.eval_lengths),
            integer_problem("data.n_symbols", o.n_symbols, 2),
            integer_problem("data.batch_size", o.batch_size, 1),
            integer_problem("data.train_size", o.train_size, 1),
            integer_problem("data.val_size", o.val_size, 1),
            integer_problem("data.test_size", o.test_size, 1),
            integer_problem("data.num_workers", o.num_workers, 0),
        )
        if not problems and o.train_size < o.batch_size:
            problems.append(
                f"data.train_size={o.train_size} is not valid; expected at least one batch "
                f"(data.batch_size={o.batch_size})"
            )
        return problems

    def make_batch(
        self, n: int, length, generator: torch.Generator, rows: range | None = None
    ) -> dict:
        """A batch of n examples drawn with `generator`; with `rows`, only those examples
        (one rank's slice), trimmed to the longest of them."""
        x, y, lengths = make_pairs(self.name, n, length, self.n_symbols, generator)
        if rows is not None:
            keep = slice(rows.start, rows.stop)
            lengths = lengths[keep]
            width = int(lengths.max())
            x, y = x[keep, :width], y[keep, :width]
        xs = [row[:k] for row, k in zip(x.tolist(), lengths.tolist(), strict=True)]
        ys = [row[:k] for row, k in zip(y.tolist(), lengths.tolist(), strict=True)]
        if self.task == "seq2seq":
            return seq2seq_pairs(xs, ys)
        return lm_pairs(xs, ys, self.sep_id)

    def positions_needed(self, length: int) -> int:
        """Positions a model reads for inputs of `length` symbols (positions_needed below)."""
        return positions_needed(self.task, length)

    def length_batches(self, length: int, n_examples: int) -> list[dict]:
        """n_examples fixed examples whose inputs are all exactly `length` symbols long, in
        batches of batch_size (one process); the same for every run with this seed."""
        batches = []
        for i, start in enumerate(range(0, n_examples, self.batch_size)):
            generator = torch.Generator().manual_seed(
                batch_seed(self.seed, _LENGTH_STREAM, length, i)
            )
            n = min(self.batch_size, n_examples - start)
            batches.append(self.make_batch(n, (length, length), generator))
        return batches

    def setup(self, stage: str | None = None) -> None:
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        ranges = {"train": self.train_len, "val": self.val_len, "test": self.eval_len}
        for split in _SPLITS:
            length = ranges[split]
            self.datasets[split] = SyntheticBatches(
                self, split, self.sizes[split], length, rank=rank, world_size=world
            )

    def _loader(self, split: str) -> DataLoader:
        if not self.datasets:
            self.setup()
        return DataLoader(
            self.datasets[split],
            batch_size=None,  # items are already batches
            shuffle=False,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_loader(self) -> DataLoader:
        return self._loader("train")

    def val_loader(self) -> DataLoader:
        return self._loader("val")

    def test_loader(self) -> DataLoader:
        return self._loader("test")
