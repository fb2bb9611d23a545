"""Text datasets (parallel text, token streams), their collate functions, a DataModule base.

Batch formats follow docs/architecture.md:
  seq2seq: src (B, S) = x + [EOS]; tgt_in (B, T) = [BOS] + y; tgt_out (B, T) = y + [EOS];
           right-padded with PAD; src_text / tgt_text the raw lines (BLEU references).
  lm:      tokens (B, T) = block[:-1]; targets (B, T) = block[1:]; PAD where there is no target.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from attnlab.data.configs import TextDataConfig, defaults_of, unknown_problem
from attnlab.data.files import GZIP_MAGIC, DataFile, as_path, file_problems
from attnlab.data.pairs import padded
from attnlab.data.resumable import ResumableDataModule
from attnlab.data.tokenizer import (
    Tokenizer,
    TokenizerSettings,
    default_cache_dir,
    settings_problems,
)
from attnlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from attnlab.problems import integer_problem, present, raise_first

log = logging.getLogger(__name__)


def read_text(path: str | Path) -> str:
    """The whole UTF-8 text of a plain or gzip file (detected by its magic bytes)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"text file not found: {path}")
    with open(path, "rb") as f:
        gz = f.read(2) == GZIP_MAGIC
    opener = gzip.open if gz else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e})") from None


def read_lines(path: str | Path) -> list[str]:
    """Lines of a plain or gzip UTF-8 file, without line ends (split on "\\n" only)."""
    text = read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


class ParallelTextDataset(Dataset):
    """Sentence pairs as token ids, with their raw text kept for BLEU references.

    Lengths are counted as the model sees them: src_len = len(x) + 1 (EOS), tgt_len =
    len(y) + 1 (tgt_in with BOS, tgt_out with EOS). With `filter_long=True` (the training
    split) pairs longer than max_src_len / max_tgt_len, or with an empty side, are dropped and
    counted in `n_filtered`; otherwise (eval splits) over-long pairs are truncated to fit and
    counted in `n_truncated`, while their text stays whole.
    """

    def __init__(
        self,
        src_lines: Sequence[str],
        tgt_lines: Sequence[str],
        tokenizer: Tokenizer,
        max_src_len: int | None = None,
        max_tgt_len: int | None = None,
        filter_long: bool = True,
        name: str = "train",
    ) -> None:
        if len(src_lines) != len(tgt_lines):
            raise ValueError(
                f"{name}: {len(src_lines)} source lines but {len(tgt_lines)} target lines"
            )
        src_ids = tokenizer.encode_batch(src_lines)
        tgt_ids = tokenizer.encode_batch(tgt_lines)
        max_s = max_src_len - 1 if max_src_len else None
        max_t = max_tgt_len - 1 if max_tgt_len else None
        self.n_filtered = self.n_truncated = 0
        self.src: list[list[int]] = []  # x + [EOS]
        self.tgt: list[list[int]] = []  # y (BOS / EOS added by collate)
        self.src_text: list[str] = []
        self.tgt_text: list[str] = []
        for xs, ys, x, y in zip(src_ids, tgt_ids, src_lines, tgt_lines, strict=True):
            too_long = (max_s is not None and len(xs) > max_s) or (
                max_t is not None and len(ys) > max_t
            )
            if filter_long and (too_long or not xs or not ys):
                self.n_filtered += 1
                continue
            if too_long:
                self.n_truncated += 1
                xs, ys = xs[:max_s], ys[:max_t]
            self.src.append(xs + [EOS_ID])
            self.tgt.append(ys)
            self.src_text.append(x)
            self.tgt_text.append(y)
        self.src_lens = [len(s) for s in self.src]
        self.tgt_lens = [len(t) + 1 for t in self.tgt]
        if self.n_filtered:
            log.info(
                "%s: dropped %d of %d pairs (empty, or longer than max_src_len=%s / "
                "max_tgt_len=%s tokens)",
                name,
                self.n_filtered,
                len(src_lines),
                max_src_len,
                max_tgt_len,
            )
        if self.n_truncated:
            log.info("%s: truncated %d over-long pairs", name, self.n_truncated)

    @classmethod
    def from_files(
        cls, src_path: str | Path, tgt_path: str | Path, tokenizer: Tokenizer, **kwargs
    ) -> ParallelTextDataset:
        src, tgt = read_lines(src_path), read_lines(tgt_path)
        if len(src) != len(tgt):
            raise ValueError(
                f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                "parallel files must be line-aligned"
            )
        return cls(src, tgt, tokenizer, **kwargs)

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> dict:
        return {
            "src": self.src[i],
            "tgt": self.tgt[i],
            "src_text": self.src_text[i],
            "tgt_text": self.tgt_text[i],
        }


class TokenStreamDataset(Dataset):
    """A 1-D token stream; item i is the block stream[i : i + block_size + 1].

    Indices are stream positions (chosen by `BlockBatchSampler`), so len() is the stream length.
    """

    def __init__(self, ids: Sequence[int] | torch.Tensor, block_size: int) -> None:
        self.ids = torch.as_tensor(ids, dtype=torch.long)
        self.block_size = block_size

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.ids[i : i + self.block_size + 1]


def collate_lm(blocks: Sequence[torch.Tensor]) -> dict:
    """tokens = block[:-1], targets = block[1:], both (B, T), right-padded with PAD."""
    return {
        "tokens": padded([b[:-1] for b in blocks]),
        "targets": padded([b[1:] for b in blocks]),
    }


class TokenizedDataModule(ResumableDataModule):
    """What the text DataModules share: a cached SentencePiece tokenizer, ids, loaders.

    The tokenizer is trained (or found in the cache) on first use of `tokenizer` /
    `vocab_size`, so a harness may read `vocab_size` before `prepare_data` and `setup`.
    `tokenizer_path` skips training and uses that .model file (e.g. a run's tokenizer.model).

    Argument checks, shared with the data preflight (`check`, which the run's builder calls):
    each class states the rules for the arguments its own __init__ declares in the static
    `own_problems(args)`, and raises the first problem on construction; `arg_problems` runs
    the rules of the whole class hierarchy; `expected_files(args)` lists the files read.
    """

    task: str = ""
    option: str = ""  # its name among conf/data's options (data=<option>)
    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    config_class: type = TextDataConfig  # each module's options (attnlab.data.configs)
    preserve_whitespace = False  # tokenizer: keep text byte-exact (running text)
    # a named dataset read from data.root: (its folder under the cache, its name, its files)
    dataset: tuple[str, str, str] | None = None

    def __init__(self, **options) -> None:
        """`options`: the fields of the class's config_class, checked here: an unknown key or
        a bad value raises a one-line ValueError naming data.<key>."""
        args, problems = self.arguments(options)
        raise_first(problems + self.arg_problems(args))
        super().__init__()
        o = self.options = self.config_class(**args)
        self.tokenizer_settings = TokenizerSettings(
            o.tokenizer_type, o.vocab_size, o.character_coverage, self.preserve_whitespace
        )
        self.tokenizer_path = o.tokenizer_path
        self.seed = o.seed
        self.max_tokens = o.max_tokens
        self.num_workers = o.num_workers
        self.cache_dir = self.cache_root(o.cache_dir)
        self._tokenizer: Tokenizer | None = None
        if self.dataset is not None:  # a named dataset: its folder, and whether to fetch into it
            self.root = self.dataset_root(o.root, o.cache_dir, self.dataset[0])
            self.download = self.fetches(o.root, o.download)

    @staticmethod
    def own_problems(args: Mapping) -> list[str]:
        """Rules for the arguments every text DataModule takes (`args`: name -> value)."""
        keys = ("data.tokenizer_type", "data.vocab_size", "data.character_coverage")
        return settings_problems(
            args["tokenizer_type"], args["vocab_size"], args["character_coverage"], keys
        ) + present(
            integer_problem("data.max_tokens", args["max_tokens"], 1),
            integer_problem("data.num_workers", args["num_workers"], 0),
        )

    @classmethod
    def check(cls, data: Mapping) -> list[str]:
        """One line per problem with the data config `data` (as in conf/data/*.yaml, `_target_`
        and Hydra's other keys ignored); [] if fine. The class's own argument rules, then every
        file it will read, in full (attnlab.data.files), without training a tokenizer or
        downloading (a missing file that would be downloaded is not a problem)."""
        kwargs = {k: v for k, v in data.items() if not (k.startswith("_") and k.endswith("_"))}
        args, problems = cls.arguments(kwargs)
        problems += cls.arg_problems(args) + ([] if problems else cls.place_problems(args))
        groups = list(cls.expected_files(args))
        if tokenizer_path := as_path(args.get("tokenizer_path")):
            groups.append([DataFile("data.tokenizer_path", tokenizer_path, kind="sentencepiece")])
        return problems + file_problems(groups)

    @classmethod
    def arguments(cls, kwargs: Mapping) -> tuple[dict, list[str]]:
        """(every option of cls.config_class: `kwargs` over the defaults, one problem per
        unknown key)."""
        defaults = defaults_of(cls.config_class)
        problems = [
            cls.unknown_hint(k) or unknown_problem(cls.config_class, k, cls.__name__)
            for k in kwargs
            if k not in defaults
        ]
        known = {k: v for k, v in kwargs.items() if k in defaults}
        return {**defaults, **known}, problems

    @classmethod
    def unknown_hint(cls, key: str) -> str | None:
        """A better line than "not an argument" for a key a module rejects on purpose."""
        return None

    @classmethod
    def place_problems(cls, args: Mapping) -> list[str]:
        """Where the files come from (`check` only, not the constructor): for a named dataset, a
        data.root that does not exist and will not be fetched."""
        if cls.dataset is None:
            return []
        folder, shown, files = cls.dataset
        root = cls.dataset_root(args["root"], args["cache_dir"], folder)
        return present(
            cls.root_problem(root, cls.fetches(args["root"], args["download"]), shown, files)
        )

    @classmethod
    def arg_problems(cls, args: Mapping) -> list[str]:
        """Every class's `own_problems` for the complete arguments `args` (see `arguments`)."""
        problems = []
        for klass in reversed(cls.__mro__):
            if "own_problems" in vars(klass):
                problems += klass.own_problems(args)
        return problems

    @classmethod
    def expected_files(cls, args: Mapping) -> list[tuple[DataFile, ...]]:
        """The data files read for the complete arguments `args`, grouped: the files of one
        group must be line-aligned. (The tokenizer_path file is not listed.)"""
        raise NotImplementedError

    @staticmethod
    def cache_root(cache_dir: str | None) -> Path:
        """`cache_dir` expanded, or attnlab's default cache root."""
        return Path(str(cache_dir)).expanduser() if cache_dir else default_cache_dir()

    @staticmethod
    def dataset_root(root: str | None, cache_dir: str | None, name: str) -> Path:
        """A named dataset's folder: `root`, else <cache_dir>/data/<name>."""
        if root:
            return Path(str(root)).expanduser()
        return TokenizedDataModule.cache_root(cache_dir) / "data" / name

    @staticmethod
    def fetches(root: str | None, download: bool | None) -> bool:
        """Whether missing files are downloaded: `download` when set; by default (None) only
        into the default cache folder (root unset), never into a folder the user named, where a
        missing file is far more often a mistyped path than a wish to download."""
        return bool(download) if download is not None else not root

    @staticmethod
    def root_problem(root: Path, fetch: bool, dataset: str, files: str) -> str | None:
        """One line when a named dataset's folder does not exist and nothing will fetch it."""
        if fetch or root.is_dir():
            return None
        return (
            f"data.root: {root} does not exist; put {dataset}'s files there ({files}), or set "
            "data.download=true to fetch them into it (data.root=null: into the cache)"
        )

    # hooks for subclasses
    def _ensure_files(self) -> None:
        """Make sure the data files exist (download them if needed)."""

    def _train_tokenizer(self) -> Tokenizer:
        raise NotImplementedError

    def prepare_data(self) -> None:
        self._ensure_files()
        _ = self.tokenizer

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            if self.tokenizer_path:
                self._tokenizer = Tokenizer.from_file(Path(self.tokenizer_path).expanduser())
            else:
                self._ensure_files()
                self._tokenizer = self._train_tokenizer()
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def save_tokenizer(self, run_dir: str | Path) -> Path:
        """Copy the tokenizer's .model into the run directory as tokenizer.model."""
        return self.tokenizer.save_to(run_dir)

    def _replicas(self) -> tuple[int, int]:
        """(num_replicas, rank) from the attached trainer, else (1, 0)."""
        if self.trainer is None:
            return 1, 0
        return self.trainer.world_size, self.trainer.global_rank

    def _epoch_fn(self):
        """Reads the attached trainer's current epoch (None without a trainer)."""
        if self.trainer is None:
            return None
        return lambda: self.trainer.current_epoch

    def _loader(self, dataset: Dataset, batch_sampler, collate_fn) -> DataLoader:
        return DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            collate_fn=collate_fn,
            num_workers=self.num_workers,
        )
