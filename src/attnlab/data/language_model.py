"""Language-model DataModules: decoder-only next-token prediction on any text file.

The text is cut into train / val / test at contiguous character fractions (`splits`),
tokenized with a SentencePiece model trained on the train part (char-level by default; "\\n"
and spaces kept exactly), and served as blocks of `block_size` tokens:
tokens = block[:-1], targets = block[1:] (docs/architecture.md). Training blocks start at a
random offset each epoch and come shuffled; val / test blocks are fixed and non-overlapping.
Epochs and distributed sharding work as in attnlab.data.translation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from itertools import chain
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from attnlab.data.batching import BlockBatchSampler
from attnlab.data.download import KNOWN_FILES, ensure_file
from attnlab.data.text import TokenizedDataModule, TokenStreamDataset, collate_lm, read_text
from attnlab.data.tokenizer import Tokenizer, TokenizerSettings, fingerprint, train_or_load

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")


class LMTextDataModule(TokenizedDataModule):
    """Decoder-only language modelling on a plain or gzip UTF-8 text file at `path`.

    batch_size: blocks per batch; default max_tokens // block_size.
    splits: (train, val, test) fractions of the text, contiguous, in that order.
    """

    task = "lm"

    def __init__(
        self,
        path: str | None = None,
        tokenizer_type: str = "char",
        vocab_size: int = 256,
        character_coverage: float = 1.0,
        tokenizer_path: str | None = None,
        block_size: int = 256,
        batch_size: int | None = None,
        max_tokens: int = 16384,
        splits: Sequence[float] = (0.9, 0.05, 0.05),
        seed: int = 0,
        num_workers: int = 0,
        cache_dir: str | None = None,
    ) -> None:
        settings = TokenizerSettings(
            tokenizer_type, vocab_size, character_coverage, preserve_whitespace=True
        )
        super().__init__(settings, tokenizer_path, seed, max_tokens, num_workers, cache_dir)
        splits = tuple(float(f) for f in splits)
        if len(splits) != 3 or min(splits) < 0 or abs(sum(splits) - 1) > 1e-6:
            raise ValueError(f"data.splits={list(splits)} must be 3 fractions summing to 1")
        self.path = path
        self.splits = splits
        self.block_size = block_size
        self.batch_size = batch_size or max(1, max_tokens // block_size)
        self.streams: dict[str, torch.Tensor] = {}
        self._texts: dict[str, str] | None = None

    def text_path(self) -> Path:
        if not self.path:
            raise ValueError("data.path must name a text file")
        return Path(self.path).expanduser()

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
            raise ValueError(f"split={split!r}; choose one of {', '.join(SPLITS)}")
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

    def _dataloader(self, split: str) -> DataLoader:
        num_replicas, rank = self._replicas()
        train = split == "train"
        sampler = BlockBatchSampler(
            len(self.stream(split)),
            self.block_size,
            self.batch_size,
            shuffle=train,
            seed=self.seed,
            num_replicas=num_replicas,
            rank=rank,
            epoch_fn=self._epoch_fn() if train else None,
        )
        dataset = TokenStreamDataset(self.stream(split), self.block_size)
        return self._loader(dataset, sampler, collate_lm)

    def train_dataloader(self) -> DataLoader:
        return self._dataloader("train")

    def val_dataloader(self) -> DataLoader:
        return self._dataloader("val")

    def test_dataloader(self) -> DataLoader:
        return self._dataloader("test")


class TinyShakespeareDataModule(LMTextDataModule):
    """Tiny Shakespeare (karpathy/char-rnn), 1.1 M characters, char-level by default.

    Uses <root>/input.txt, else <root>/input.txt.gz; if neither exists, downloads input.txt
    (sha256-checked; `download=False` raises instead). Default root:
    <cache_dir>/data/tinyshakespeare. The other keyword arguments are LMTextDataModule's.
    """

    def __init__(self, root: str | None = None, download: bool = True, **kwargs) -> None:
        kwargs.setdefault("tokenizer_type", "char")
        super().__init__(**kwargs)
        self.root = Path(root).expanduser() if root else self.cache_dir / "data" / "tinyshakespeare"
        self.download = download

    def text_path(self) -> Path:
        for name in ("input.txt", "input.txt.gz"):
            if (self.root / name).exists():
                return self.root / name
        return self.root / "input.txt"

    def _ensure_files(self) -> None:
        path = self.text_path()
        if path.exists():
            return
        if not self.download:
            raise FileNotFoundError(
                f"{path} (or input.txt.gz) is missing and data.download=false; place it there"
            )
        remote = KNOWN_FILES["tinyshakespeare/input.txt"]
        ensure_file(remote.url, path, remote.sha256)
