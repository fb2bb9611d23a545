"""Config schema of the text data options: conf/data/{multi30k,parallel_text,lm_text,
tinyshakespeare}.yaml, registered in Hydra's ConfigStore by attnlab.config.schema.register_configs.

Each dataclass holds exactly the constructor arguments of its DataModule (plus `_target_`), with
the same defaults, so composing checks types (`data.max_tokens=lots` fails) and unknown keys
(`data.train_src=...` under multi30k fails), and `instantiate(cfg.data)` builds the module.
Rules between values (lengths vs. budgets, languages, files) are the DataModules' own and run
in the preflight through attnlab.config.data_check.check_data_config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from attnlab.data.options import MULTI30K_LANGS, TOKENIZER_TYPES

TokenizerType = Enum("TokenizerType", {v: v for v in TOKENIZER_TYPES}, type=str)
Lang = Enum("Lang", {v: v for v in MULTI30K_LANGS}, type=str)


@dataclass
class _TextDataConfig:
    """attnlab.data.text.TokenizedDataModule: the SentencePiece model and the loaders."""

    tokenizer_type: TokenizerType = TokenizerType.bpe
    vocab_size: int = 8000
    character_coverage: float = 1.0
    tokenizer_path: str | None = None  # a .model to use instead of training one
    max_tokens: int = 4096
    seed: int = "${seed}"  # the shuffling order follows the run's seed
    num_workers: int = 0
    cache_dir: str | None = None  # null: $ATTNLAB_CACHE or ~/.cache/attnlab


@dataclass
class _TranslationOptions(_TextDataConfig):
    eval_max_tokens: int | None = None  # null: max_tokens
    max_src_len: int = 128
    max_tgt_len: int = 128


@dataclass
class ParallelTextDataConfig(_TranslationOptions):
    """attnlab.data.translation.TranslationDataModule: explicit line-aligned files per split."""

    _target_: str = "attnlab.data.translation.TranslationDataModule"
    train_src: str | None = None
    train_tgt: str | None = None
    val_src: str | None = None
    val_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None


@dataclass
class Multi30kDataConfig(_TranslationOptions):
    """attnlab.data.translation.Multi30kDataModule: Multi30K task 1, En-De either way."""

    _target_: str = "attnlab.data.translation.Multi30kDataModule"
    root: str | None = None  # null: <cache_dir>/data/multi30k (downloaded there if missing)
    src_lang: Lang = Lang.en
    tgt_lang: Lang = Lang.de
    # null: fetch missing files only into the default folder (root=null); a root you name is
    # read as it is unless download=true
    download: bool | None = None


@dataclass
class _LMOptions(_TextDataConfig):
    tokenizer_type: TokenizerType = TokenizerType.char
    vocab_size: int = 256  # for char: an upper bound
    block_size: int = 256
    batch_size: int | None = None  # blocks per step; null: max_tokens // block_size
    max_tokens: int = 16384
    splits: list[float] = field(default_factory=lambda: [0.9, 0.05, 0.05])
    eval_lengths: list[int] = field(default_factory=list)  # context lengths scored at the end


@dataclass
class LMTextDataConfig(_LMOptions):
    """attnlab.data.language_model.LMTextDataModule: next-token prediction on one text file."""

    _target_: str = "attnlab.data.language_model.LMTextDataModule"
    path: str | None = None


@dataclass
class TinyShakespeareDataConfig(_LMOptions):
    """attnlab.data.language_model.TinyShakespeareDataModule: <root>/input.txt(.gz)."""

    _target_: str = "attnlab.data.language_model.TinyShakespeareDataModule"
    root: str | None = None  # null: <cache_dir>/data/tinyshakespeare (downloaded if missing)
    download: bool | None = None  # null: only into the default folder (see Multi30kDataConfig)


# ConfigStore name -> schema; conf/data/<option>.yaml names `/<name>@_here_` in its defaults.
TEXT_DATA_SCHEMAS = {
    "parallel_text_data_schema": ParallelTextDataConfig,
    "multi30k_data_schema": Multi30kDataConfig,
    "lm_text_data_schema": LMTextDataConfig,
    "tinyshakespeare_data_schema": TinyShakespeareDataConfig,
}
