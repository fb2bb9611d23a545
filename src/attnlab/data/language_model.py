"""Language-model DataModules: decoder-only next-token prediction on any text file.

The text is cut into train / val / test at contiguous character fractions (`splits`),
tokenized with a SentencePiece model trained on the train part (char-level by default; "\\n"
and spaces kept exactly), and served as blocks of `block_size` tokens:
tokens = block[:-1], targets = block[1:] (docs/architecture.md). Training blocks start at a
random offset each epoch and come shuffled; val / test blocks are fixed and non-overlapping.
`eval_lengths` lists context lengths at which the test text is scored after training
(`context_batches`: non-overlapping blocks of that length, every token predicted once), for
perplexity against context length (attnlab.training.extrapolation).
Epochs and distributed sharding work as in attnlab.data.translation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from itertools import chain
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from attnlab.data.batching import BlockBatchSampler
from attnlab.data.configs import LMTextDataConfig, TinyShakespeareDataConfig
from attnlab.data.download import KNOWN_FILES, ensure_file
from attnlab.data.files import DataFile, as_path
from attnlab.data.options import SPLITS
from attnlab.data.text import TokenizedDataModule, TokenStreamDataset, collate_lm, read_text
from attnlab.data.tokenizer import Tokenizer, fingerprint, train_or_load
from attnlab.problems import choice_problem, integer_problem, present

log = logging.getLogger(__name__)


def _splits_problem(splits) -> str | None:
    try:
        fractions = [float(f) for f in splits]
    except (TypeError, ValueError):
        fractions = []
    if len(fractions) == 3 and min(fractions) >= 0 and abs(sum(fractions) - 1) <= 1e-6:
        return None
    shown = list(splits) if isinstance(splits, list | tuple) else splits
    return f"data.splits={shown!r} must be 3 fractions (train, val, test) >= 0 summing to 1"


class LMTextDataModule(TokenizedDataModule):
    """Decoder-only language modelling on a plain or gzip UTF-8 text file at `path`.

    batch_size: blocks per step, global (W DDP ranks take batch_size / W each, so W must
        divide it); unset: max_tokens // block_size, rounded down to a multiple of W (at
        least W), so that the default works on any number of ranks.
    splits: (train, val, test) fractions of the text, contiguous, in that order.
    eval_lengths: context lengths (tokens) to score the test text at after training.
    """

    task = "lm"
    option = "lm_text"

    config_class = LMTextDataConfig  # the options (attnlab.data.configs)
    preserve_whitespace = True  # running text: the tokenizer keeps it byte-exact

    def __init__(self, **options) -> None:
        super().__init__(**options)
        o = self.options
        self.path = getattr(o, "path", None)  # TinyShakespeareDataModule: from its root
        self.splits = tuple(float(f) for f in o.splits)
        self.block_size = o.block_size
        self.eval_lengths = [int(n) for n in o.eval_lengths]
        self.batch_size = o.batch_size or max(1, o.max_tokens // o.block_size)
        self._batch_size_given = o.batch_size is not None
        self.streams: dict[str, torch.Tensor] = {}
        self._texts: dict[str, str] | None = None

    @staticmethod
    def own_problems(args: Mapping) -> list[str]:
        """block_size >= 1, batch_size unset or >= 1, splits: 3 fractions >= 0 summing to 1,
        eval_lengths: integers >= 1."""
        batch_size = args["batch_size"]
        return present(
            integer_problem("data.block_size", args["block_size"], 1),
            None if batch_size is None else integer_problem("data.batch_size", batch_size, 1),
            _splits_problem(args["splits"]),
            *(integer_problem("data.eval_lengths", n, 1) for n in args.get("eval_lengths", ())),
        )

    @classmethod
    def expected_files(cls, args: Mapping) -> list[tuple[DataFile, ...]]:
        """The text file at data.path."""
        required = "name a UTF-8 text file, plain or gzip"
        return [(DataFile("data.path", as_path(args["path"]), required=required),)]

    def text_path(self) -> Path:
        if not self.path:
            raise ValueError("data.path must name a text file")
        return as_path(self.path)

    def split_texts(self) -> dict[str, str]:
        """The raw text of each split (contiguous character ranges)."""
        if self._texts is None:
            self._ensure_files()
            text = read_text(self.text_path())
            a = int(len(text) * self.splits[0])
            b = int(len(text) * (self.splits[0] + self.splits[1]))
            self._texts = {"train": text[:a], "val": text[a:b], "test": text[b:]}
        return self._texts

    def _train_tokenizer(self) -> Tokenizer:
        return train_or_load(
            lambda: self.split_texts()["train"].splitlines(keepends=True),
            fingerprint([self.text_path()], extra=f"lm:{self.splits}"),
            self.tokenizer_settings,
            self.cache_dir / "tokenizers",
        )

    def stream(self, split: str) -> torch.Tensor:
        """The token ids of `split` as one 1-D long tensor."""
        if split not in SPLITS:
            raise ValueError(choice_problem("split", split, SPLITS))
        if split not in self.streams:
            lines = self.split_texts()[split].splitlines(keepends=True)
            ids = list(chain.from_iterable(self.tokenizer.encode_batch(lines)))
            self.streams[split] = torch.tensor(ids, dtype=torch.long)
        return self.streams[split]

    def setup(self, stage: str | None = None) -> None:
        splits = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}.get(
            stage or "", ("train", "val")
        )
        for split in splits:
            log.info("%s: %d tokens", split, len(self.stream(split)))

    def positions_needed(self, length: int) -> int:
        """Positions a model reads at context length `length`."""
        return length

    def context_batches(self, length: int, split: str = "test") -> list[dict]:
        """The text of `split` as non-overlapping blocks of `length` input tokens (each token
        predicted once, with the context since its block's start), about max_tokens per batch."""
        stream = self.stream(split)
        dataset = TokenStreamDataset(stream, length)
        starts = list(range(0, len(stream) - length, length))
        per_batch = max(1, self.max_tokens // length)
        return [
            collate_lm([dataset[i] for i in starts[b : b + per_batch]])
            for b in range(0, len(starts), per_batch)
        ]

    def global_batch_size(self, num_replicas: int) -> int:
        """Blocks per step over all ranks: data.batch_size as given (the sampler checks that
        the ranks divide it), or the default rounded down to a multiple of num_replicas."""
        if self._batch_size_given:
            return self.batch_size
        return max(num_replicas, self.batch_size // num_replicas * num_replicas)

    def _dataloader(self, split: str) -> DataLoader:
        num_replicas, rank = self._replicas()
        train = split == "train"
        sampler = BlockBatchSampler(
            len(self.stream(split)),
            self.block_size,
            self.global_batch_size(num_replicas),
            shuffle=train,
            seed=self.seed,
            num_replicas=num_replicas,
            rank=rank,
            epoch_fn=self._epoch_fn() if train else None,
        )
        dataset = TokenStreamDataset(self.stream(split), self.block_size)
        return self._loader(dataset, sampler, collate_lm)

    def train_loader(self) -> DataLoader:
        return self._dataloader("train")

    def val_loader(self) -> DataLoader:
        return self._dataloader("val")

    def test_loader(self) -> DataLoader:
        return self._dataloader("test")


class TinyShakespeareDataModule(LMTextDataModule):
    """Tiny Shakespeare (karpathy/char-rnn), 1.1 M characters, char-level by default.

    Uses <root>/input.txt, else <root>/input.txt.gz; if neither exists, downloads input.txt
    (sha256-checked) when `download` is true, or when it is None (the default) and `root` is
    unset: the default root, <cache_dir>/data/tinyshakespeare. A root the user names is read as
    it is. Options: attnlab.data.configs.TinyShakespeareDataConfig.
    """

    option = "tinyshakespeare"
    config_class = TinyShakespeareDataConfig
    dataset = ("tinyshakespeare", "Tiny Shakespeare", "input.txt")

    @classmethod
    def unknown_hint(cls, key: str) -> str | None:
        if key == "path":
            return "data.path: Tiny Shakespeare reads <data.root>/input.txt; remove data.path"
        return None

    @staticmethod
    def root_text_file(root: Path) -> Path:
        """<root>/input.txt, else <root>/input.txt.gz, else input.txt (the download's name)."""
        for name in ("input.txt", "input.txt.gz"):
            if (root / name).exists():
                return root / name
        return root / "input.txt"

    @classmethod
    def expected_files(cls, args: Mapping) -> list[tuple[DataFile, ...]]:
        """<root>/input.txt (or .gz); a missing one is downloaded if allowed."""
        root = cls.dataset_root(args["root"], args["cache_dir"], "tinyshakespeare")
        fetch = cls.fetches(args["root"], args["download"])
        if not (fetch or root.is_dir()):
            return []  # reported by own_problems
        return [(DataFile("data.root", cls.root_text_file(root), download=fetch),)]

    def text_path(self) -> Path:
        return self.root_text_file(self.root)

    def _ensure_files(self) -> None:
        path = self.text_path()
        if path.exists():
            return
        if not self.download:
            raise FileNotFoundError(
                f"{path} (or input.txt.gz) is missing; place it there, or set data.download=true "
                "to fetch it"
            )
        remote = KNOWN_FILES["tinyshakespeare/input.txt"]
        ensure_file(remote.url, path, remote.sha256)
