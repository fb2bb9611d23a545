"""The options of each DataModule, declared once: one dataclass per module, no torch imported.

Each DataModule reads its options from its dataclass (`config_class`; unknown keys are one-line
errors naming the valid ones), and attnlab-train's `data` config group is made from the same
dataclasses (attnlab.config.data_schema, through attnlab.config.structured: a `Literal` field
becomes a typed choice). So a new data option is one field here and the code that uses it.
The rules between values stay with the modules (their `own_problems`), which a text module's
`check` runs, with every file read, before the module is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, get_args

from attnlab.data.algorithms import NAMES as ALGORITHMS
from attnlab.data.options import TASK_OF_ARCH
from attnlab.data.vocab import NUM_SPECIAL

SyntheticAlgorithm = Literal[ALGORITHMS]  # the modules of attnlab.data.algorithms
ModelArch = Literal[tuple(TASK_OF_ARCH)]  # the model's arch, which picks the batch format
TokenizerType = Literal["bpe", "unigram", "char"]  # SentencePiece model types
Lang = Literal["en", "de"]  # Multi30K task 1

SYNTHETIC_ALGORITHMS = get_args(SyntheticAlgorithm)
TOKENIZER_TYPES = get_args(TokenizerType)
MULTI30K_LANGS = get_args(Lang)


@dataclass
class SyntheticDataConfig:
    """attnlab.data.synthetic.SyntheticDataModule; lengths are [min, max], inclusive: train_len
    (training), val_len (validation, which selects the checkpoint; null: train_len), eval_len (the
    test split); eval_lengths: lengths scored one by one at the end (length extrapolation).
    arch: the model's, which decides the batch format (seq2seq or lm)."""

    name: SyntheticAlgorithm = "reverse"  # the task: attnlab.data.algorithms (copy, reverse, ...)
    arch: ModelArch = "encoder_decoder"  # the model's (set by the harness): the batch format
    n_symbols: int = 16  # the alphabet's size, special tokens aside
    train_len: list[int] = field(default_factory=lambda: [1, 12])  # [min, max] training length
    eval_len: list[int] = field(default_factory=lambda: [1, 12])  # [min, max] of the test split
    val_len: list[int] | None = None  # [min, max] of validation; null: train_len
    eval_lengths: list[int] = field(default_factory=list)  # lengths scored one by one at the end
    batch_size: int = 64  # global, over all DDP ranks
    train_size: int = 1_000_000  # fresh examples per epoch
    val_size: int = 512
    test_size: int = 1024
    seed: int = 1
    num_workers: int = 0


@dataclass
class TextDataConfig:
    """attnlab.data.text.TokenizedDataModule: the SentencePiece model and the loaders."""

    tokenizer_type: TokenizerType = "bpe"  # SentencePiece model type: bpe, unigram or char
    vocab_size: int = 8000  # SentencePiece vocabulary (shared by source and target)
    character_coverage: float = 1.0  # SentencePiece's share of characters kept
    tokenizer_path: str | None = None  # a .model to use instead of training one
    max_tokens: int = 4096  # padded source + target tokens per batch, all ranks together
    seed: int = 0  # the shuffling order
    num_workers: int = 0
    cache_dir: str | None = None  # null: $ATTNLAB_CACHE or ~/.cache/attnlab


@dataclass
class TranslationConfig(TextDataConfig):
    """Length limits and the evaluation batches' budget of the translation modules; arch: the
    model's, which decides the batch format (sentence pairs, or one sequence per pair for a
    decoder-only model: attnlab.data.pairs)."""

    arch: ModelArch = "encoder_decoder"  # the model's (set by the harness): the batch format
    eval_max_tokens: int | None = None  # null: max_tokens
    max_src_len: int = 128  # longer training pairs are dropped (tokens)
    max_tgt_len: int = 128  # longer training pairs are dropped (tokens)
    # each batch's lengths padded up to a multiple of this (1: to its longest row): fewer
    # distinct shapes for a compiled model (static shapes, CUDA graphs); the loss is unchanged
    pad_to_multiple: int = 1


@dataclass
class ParallelTextDataConfig(TranslationConfig):
    """attnlab.data.translation.TranslationDataModule: explicit line-aligned files per split."""

    train_src: str | None = None  # line-aligned source file of the training split
    train_tgt: str | None = None  # its target file
    val_src: str | None = None  # validation source file
    val_tgt: str | None = None  # validation target file
    test_src: str | None = None  # test source file
    test_tgt: str | None = None  # test target file


@dataclass
class Multi30kDataConfig(TranslationConfig):
    """attnlab.data.translation.Multi30kDataModule: Multi30K task 1, En-De either way."""

    root: str | None = None  # null: <cache_dir>/data/multi30k (downloaded there if missing)
    src_lang: Lang = "en"  # en or de
    tgt_lang: Lang = "de"  # de or en
    # null: fetch missing files only into the default folder (root=null); a root you name is
    # read as it is unless download=true
    download: bool | None = None


@dataclass
class LanguageModelConfig(TextDataConfig):
    """Blocks of running text for the decoder-only modules."""

    tokenizer_type: TokenizerType = "char"
    vocab_size: int = 256  # for char: an upper bound
    block_size: int = 256  # tokens per training block (the context length)
    batch_size: int | None = None  # blocks per step; null: max_tokens // block_size
    max_tokens: int = 16384
    splits: list[float] = field(default_factory=lambda: [0.9, 0.05, 0.05])  # train, val, test
    eval_lengths: list[int] = field(default_factory=list)  # context lengths scored at the end


@dataclass
class LMTextDataConfig(LanguageModelConfig):
    """attnlab.data.language_model.LMTextDataModule: next-token prediction on one text file."""

    path: str | None = None  # the text file


@dataclass
class TinyShakespeareDataConfig(LanguageModelConfig):
    """attnlab.data.language_model.TinyShakespeareDataModule: <root>/input.txt(.gz)."""

    root: str | None = None  # null: <cache_dir>/data/tinyshakespeare (downloaded if missing)
    download: bool | None = None  # null: only into the default folder (see Multi30kDataConfig)


# conf/data's options: (ConfigStore name, the options, the DataModule they configure)
DATA_CONFIGS = {
    "synthetic_data_schema": (SyntheticDataConfig, "attnlab.data.synthetic.SyntheticDataModule"),
    "parallel_text_data_schema": (
        ParallelTextDataConfig,
        "attnlab.data.translation.TranslationDataModule",
    ),
    "multi30k_data_schema": (Multi30kDataConfig, "attnlab.data.translation.Multi30kDataModule"),
    "lm_text_data_schema": (LMTextDataConfig, "attnlab.data.language_model.LMTextDataModule"),
    "tinyshakespeare_data_schema": (
        TinyShakespeareDataConfig,
        "attnlab.data.language_model.TinyShakespeareDataModule",
    ),
}


def defaults_of(config_class: type) -> dict[str, Any]:
    """Every option of `config_class` with its default."""
    return {
        f.name: f.default_factory() if f.default is MISSING else f.default
        for f in fields(config_class)
    }


def unknown_problem(config_class: type, key: str, owner: str) -> str:
    """The line for a key `config_class` does not declare (`owner`: the DataModule's name); the
    valid ones listed the class's own first, then its bases'."""
    annotated = (k for c in config_class.__mro__ for k in vars(c).get("__annotations__", {}))
    return f"data.{key}: not an argument of {owner}; valid: {', '.join(dict.fromkeys(annotated))}"


def options_of(config_class: type, options: Mapping, owner: str):
    """`config_class(**options)`; an unknown key is a one-line ValueError naming the valid
    ones."""
    declared = {f.name for f in fields(config_class)}
    unknown = [key for key in options if key not in declared]
    if unknown:
        raise ValueError(unknown_problem(config_class, unknown[0], owner))
    return config_class(**options)


def planned_vocab_size(data: Mapping) -> int:
    """The vocabulary a data config will give, known before the data module is built: the
    synthetic algorithms' symbols, the special ids and, for a decoder-only model, the separator
    (attnlab.data.synthetic.SymbolTokenizer); otherwise the size asked of the tokenizer, which
    is trained later (or the smallest a model takes, where the config does not ask one)."""
    if "n_symbols" in data:
        return NUM_SPECIAL + int(data["n_symbols"]) + (data.get("arch") == "decoder_only")
    return int(data.get("vocab_size") or NUM_SPECIAL + 1)
