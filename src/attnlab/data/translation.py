"""Translation DataModules: any line-aligned parallel text, and Multi30K En-De.

Batches (docs/architecture.md, attnlab.data.pairs): src, tgt_in, tgt_out (B, *) long for an
encoder-decoder; for a decoder-only model (`arch`, wired to the model's) each pair as one sequence
[BOS] x [SEP] y [EOS]: tokens, targets (B, T), prompt_len (B,); both with src_text, tgt_text lists.
Training batches hold about `max_tokens` source + target tokens, padding included (Sec. 5.1,
attnlab.data.batching.TokenBatchSampler); a joint source+target SentencePiece model (BPE by
default) is trained on the training split and cached.

Epochs: the training sampler reads `trainer.current_epoch` whenever iteration starts, so the
order reshuffles every epoch whether or not the Trainer rebuilds the loader
(`reload_dataloaders_every_n_epochs`); see attnlab.data.batching. In multi-GPU runs set
`Trainer(use_distributed_sampler=False)`: the sampler shards batches over ranks itself
(num_replicas / rank taken from the trainer). `max_tokens` is the global budget of a step:
each of W ranks gets its own batches of about max_tokens // W tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from itertools import chain
from pathlib import Path

from torch.utils.data import DataLoader

from attnlab.data.batching import TokenBatchSampler, padding_fraction
from attnlab.data.configs import MULTI30K_LANGS, Multi30kDataConfig, ParallelTextDataConfig
from attnlab.data.download import fetch_known, sha256_file
from attnlab.data.files import DataFile, as_path
from attnlab.data.options import SPLITS, TASK_OF_ARCH, task_for_arch
from attnlab.data.pairs import pair_collate
from attnlab.data.text import ParallelTextDataset, TokenizedDataModule, read_lines
from attnlab.data.tokenizer import Tokenizer, fingerprint, train_or_load
from attnlab.problems import choice_problem, integer_problem, present

log = logging.getLogger(__name__)


class TranslationDataModule(TokenizedDataModule):
    """Parallel text from explicit files per split (plain or gzip, UTF-8, line-aligned).

    max_src_len / max_tgt_len: training pairs longer than this (in tokens, counting EOS / BOS)
    are dropped (count in `n_filtered`); evaluation pairs are truncated instead.
    eval_max_tokens: token budget of validation / test batches (default: max_tokens).
    pad_to_multiple: every batch's lengths rounded up to a multiple of it (fewer shapes for a
    compiled model; padding is masked, so the loss is the same; the budgets count real lengths).
    arch: the model's: "encoder_decoder" batches sentence pairs (task "seq2seq"), "decoder_only"
    one sequence per pair (task "lm"), whose separator `sep_id` is one id past the tokenizer's.
    """

    option = "parallel_text"
    config_class = ParallelTextDataConfig  # the options (attnlab.data.configs)

    def __init__(self, **options) -> None:
        super().__init__(**options)
        o = self.options
        self.files = {
            split: (getattr(o, f"{split}_src", None), getattr(o, f"{split}_tgt", None))
            for split in SPLITS
        }  # Multi30kDataModule: from its root instead
        self.eval_max_tokens = o.eval_max_tokens or o.max_tokens
        self.max_src_len, self.max_tgt_len = o.max_src_len, o.max_tgt_len
        self.pad_to_multiple = o.pad_to_multiple
        self.arch, self.task = o.arch, task_for_arch(o.arch)
        self.datasets: dict[str, ParallelTextDataset] = {}

    @staticmethod
    def own_problems(args: Mapping) -> list[str]:
        """arch: a model.arch; length limits: each >= 2 (a token plus EOS / BOS), and a
        longest pair must fit in a batch of max_tokens and of eval_max_tokens."""
        eval_max_tokens = args["eval_max_tokens"]
        problems = present(
            choice_problem("data.arch", args["arch"], tuple(TASK_OF_ARCH)),
            integer_problem("data.max_src_len", args["max_src_len"], 2),
            integer_problem("data.max_tgt_len", args["max_tgt_len"], 2),
            integer_problem("data.pad_to_multiple", args["pad_to_multiple"], 1),
            None
            if eval_max_tokens is None
            else integer_problem("data.eval_max_tokens", eval_max_tokens, 1),
        )
        if problems or integer_problem("max_tokens", args["max_tokens"], 1):
            return problems  # the budget rule needs valid integers
        longest = args["max_src_len"] + args["max_tgt_len"]
        for key in ("max_tokens", "eval_max_tokens"):
            budget = args[key]
            if budget is not None and budget < longest:
                problems.append(
                    f"data.{key}={budget} is less than max_src_len + max_tgt_len = {longest}; "
                    "a longest pair would not fit in a batch"
                )
        return problems

    @classmethod
    def expected_files(cls, args: Mapping) -> list[tuple[DataFile, ...]]:
        """(source, target) of the training split, and of val / test where either is set."""
        groups = []
        for split in SPLITS:
            if split != "train" and not (args[f"{split}_src"] or args[f"{split}_tgt"]):
                continue  # val / test are optional
            group = []
            for side, other in (("src", "tgt"), ("tgt", "src")):
                if split == "train":
                    required = "the training split needs a source and a target file"
                else:
                    required = f"data.{split}_{other} is set, and a split needs both files"
                path = as_path(args[f"{split}_{side}"])
                group.append(DataFile(f"data.{split}_{side}", path, required=required))
            groups.append(tuple(group))
        return groups

    def split_files(self, split: str) -> tuple[Path, Path]:
        """(source, target) paths of `split` in {train, val, test}."""
        if split not in SPLITS:
            raise ValueError(choice_problem("split", split, SPLITS))
        src, tgt = self.files[split]
        if not src or not tgt:
            raise ValueError(f"data.{split}_src and data.{split}_tgt must both be set")
        return as_path(src), as_path(tgt)

    def _train_tokenizer(self) -> Tokenizer:
        # Sorted by content hash so both translation directions share one cached tokenizer.
        files = sorted(self.split_files("train"), key=sha256_file)
        return train_or_load(
            lambda: chain.from_iterable(read_lines(f) for f in files),
            fingerprint(files, extra="parallel"),
            self.tokenizer_settings,
            self.cache_dir / "tokenizers",
        )

    def _dataset(self, split: str) -> ParallelTextDataset:
        if split not in self.datasets:
            src, tgt = self.split_files(split)
            self.datasets[split] = ParallelTextDataset.from_files(
                src,
                tgt,
                self.tokenizer,
                max_src_len=self.max_src_len,
                max_tgt_len=self.max_tgt_len,
                filter_long=split == "train",
                name=split,
            )
        return self.datasets[split]

    def setup(self, stage: str | None = None) -> None:
        splits = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}.get(
            stage or "", ("train", "val")
        )
        for split in splits:
            ds = self._dataset(split)
            if split == "train":
                log.info(
                    "train: %d pairs (%d filtered), %d batches of <= %d tokens, padding %.1f%%",
                    len(ds),
                    ds.n_filtered,
                    len(self._sampler("train")),
                    self.max_tokens,
                    100 * self.padding_fraction(),
                )

    @property
    def n_filtered(self) -> int:
        """Training pairs dropped as empty or longer than max_src_len / max_tgt_len."""
        return self._dataset("train").n_filtered

    def _sampler(self, split: str, sharded: bool = True) -> TokenBatchSampler:
        ds = self._dataset(split)
        num_replicas, rank = self._replicas() if sharded else (1, 0)
        train = split == "train"
        return TokenBatchSampler(
            ds.src_lens,
            ds.tgt_lens,
            max_tokens=self.max_tokens if train else self.eval_max_tokens,
            shuffle=train,
            seed=self.seed,
            num_replicas=num_replicas,
            rank=rank,
            epoch_fn=self._epoch_fn() if train else None,
        )

    def padding_fraction(self, split: str = "train") -> float:
        """Fraction of padding in all of `split`'s batches (one epoch, all ranks)."""
        ds = self._dataset(split)
        batches = self._sampler(split, sharded=False).batches(epoch=0)
        return padding_fraction(batches, ds.src_lens, ds.tgt_lens)

    @property
    def sep_id(self) -> int | None:
        """The decoder-only format's separator (None for an encoder-decoder's pairs)."""
        return self.tokenizer.vocab_size if self.task == "lm" else None

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary: the tokenizer's, and the separator where there is one."""
        return self.tokenizer.vocab_size + (self.sep_id is not None)

    @property
    def collate(self):
        """The collate of this module's batch format (attnlab.data.pairs)."""
        return pair_collate(self.arch, self.tokenizer.vocab_size, self.pad_to_multiple)

    def _dataloader(self, split: str) -> DataLoader:
        return self._loader(self._dataset(split), self._sampler(split), self.collate)

    def train_loader(self) -> DataLoader:
        return self._dataloader("train")

    def val_loader(self) -> DataLoader:
        return self._dataloader("val")

    def test_loader(self) -> DataLoader:
        return self._dataloader("test")


MULTI30K_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}


class Multi30kDataModule(TranslationDataModule):
    """Multi30K task 1 (Elliott et al., 2016): 29,000 / 1,014 / 1,000 image captions, En-De.

    Splits train / val / test_2016_flickr, in either direction (src_lang, tgt_lang in
    {en, de}). Files are read from `root` as <split>.<lang>.gz (or uncompressed <split>.<lang>);
    missing ones are downloaded from the dataset's GitHub repository and checked against their
    sha256 when `download` is true, or when it is None (the default) and `root` is unset: the
    default root, <cache_dir>/data/multi30k. A root the user names is read as it is.
    Options: attnlab.data.configs.Multi30kDataConfig.
    """

    option = "multi30k"
    config_class = Multi30kDataConfig
    dataset = ("multi30k", "Multi30K", "{train,val,test_2016_flickr}.{en,de}.gz")

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.src_lang, self.tgt_lang = self.options.src_lang, self.options.tgt_lang

    @classmethod
    def unknown_hint(cls, key: str) -> str | None:
        if key.endswith(("_src", "_tgt")) and key.split("_")[0] in SPLITS:
            return f"data.{key}: Multi30K reads its files from data.root; remove data.{key}"
        return None

    @staticmethod
    def own_problems(args: Mapping) -> list[str]:
        """Languages in {en, de} and different; files come from root, not data.<split>_src."""
        src_lang, tgt_lang = args["src_lang"], args["tgt_lang"]
        problems = present(
            choice_problem("data.src_lang", src_lang, MULTI30K_LANGS),
            choice_problem("data.tgt_lang", tgt_lang, MULTI30K_LANGS),
        )
        if src_lang == tgt_lang:
            problems.append(
                f"data.tgt_lang={tgt_lang!r} is data.src_lang too; translate between "
                f"{' and '.join(MULTI30K_LANGS)}"
            )
        return problems

    @staticmethod
    def split_file(root: Path, split: str, lang: str) -> Path:
        """<root>/<split name>.<lang> if present, else the .gz (the name it is downloaded as)."""
        name = f"{MULTI30K_SPLITS[split]}.{lang}"
        plain = root / name
        return plain if plain.exists() else root / f"{name}.gz"

    @classmethod
    def expected_files(cls, args: Mapping) -> list[tuple[DataFile, ...]]:
        """(source, target) of every split under root; missing ones are downloaded if allowed."""
        root = cls.dataset_root(args["root"], args["cache_dir"], "multi30k")
        langs = (args["src_lang"], args["tgt_lang"])
        fetch = cls.fetches(args["root"], args["download"])
        if any(lang not in MULTI30K_LANGS for lang in langs) or not (fetch or root.is_dir()):
            return []  # a missing root: one line from place_problems, not six missing files
        return [
            tuple(
                DataFile("data.root", cls.split_file(root, split, lang), download=fetch)
                for lang in langs
            )
            for split in SPLITS
        ]

    def split_files(self, split: str) -> tuple[Path, Path]:
        if split not in SPLITS:
            raise ValueError(choice_problem("split", split, SPLITS))
        return (
            self.split_file(self.root, split, self.src_lang),
            self.split_file(self.root, split, self.tgt_lang),
        )

    def _ensure_files(self) -> None:
        for split in SPLITS:
            for path in self.split_files(split):
                if path.exists():
                    continue
                if not self.download:
                    raise FileNotFoundError(
                        f"Multi30K file {path} is missing; place it there, or set "
                        "data.download=true to fetch it"
                    )
                fetch_known(f"multi30k/{path.name}", self.root)
