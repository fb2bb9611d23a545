"""SentencePiece tokenizers with attnlab's special ids, trained once and cached.

The paper (Sec. 5.1) encodes WMT En-De with byte-pair encoding and a vocabulary shared by
source and target; `train_or_load` trains one such joint model (BPE by default; "unigram" and
"char" selectable) on the training split only.

Cache key: the sha256 of the training files' bytes (every byte, not a sample: hashing the
Multi30K training files takes milliseconds), plus every tokenizer setting and the
SentencePiece version. A later run with the same data and settings reuses the cached
`<key>.model` instead of retraining.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import sentencepiece as spm

from attnlab.data.configs import TOKENIZER_TYPES
from attnlab.data.download import sha256_file
from attnlab.data.vocab import BOS_ID, EOS_ID, NUM_SPECIAL, PAD_ID, UNK_ID
from attnlab.problems import choice_problem, integer_problem, present, raise_first

log = logging.getLogger(__name__)

MODEL_TYPES = TOKENIZER_TYPES
NEWLINE = "\n"
_MAX_TRAIN_SENTENCE_CHARS = 2000  # SentencePiece skips training sentences over 4192 bytes


def default_cache_dir() -> Path:
    """attnlab's cache root: $ATTNLAB_CACHE, else ~/.cache/attnlab."""
    return Path(os.environ.get("ATTNLAB_CACHE", "~/.cache/attnlab")).expanduser()


def settings_problems(
    model_type,
    vocab_size,
    character_coverage,
    keys: tuple[str, str, str] = ("model_type", "vocab_size", "character_coverage"),
) -> list[str]:
    """The rules for tokenizer settings; `keys` name the three values in the messages."""
    type_key, size_key, coverage_key = keys
    coverage_ok = isinstance(character_coverage, int | float) and 0 < character_coverage <= 1
    return present(
        choice_problem(type_key, model_type, MODEL_TYPES),
        integer_problem(size_key, vocab_size, NUM_SPECIAL + 1),  # ids 0-3 are the specials
        None if coverage_ok else f"{coverage_key}={character_coverage!r} must be in (0, 1]",
    )


@dataclass(frozen=True)
class TokenizerSettings:
    """How to train a SentencePiece model.

    preserve_whitespace: keep text byte-exact (identity normalization, no dummy prefix, spaces
    kept, "\\n" as a symbol of its own), for language modelling on running text. Off, text is
    NFKC-normalized and runs of spaces collapse, the usual setting for sentence-level MT.
    For model_type="char", vocab_size is an upper bound (the model has one id per character).
    """

    model_type: str = "bpe"
    vocab_size: int = 8000
    character_coverage: float = 1.0
    preserve_whitespace: bool = False
    input_sentence_size: int = 1_000_000

    def __post_init__(self) -> None:
        raise_first(settings_problems(self.model_type, self.vocab_size, self.character_coverage))


class Tokenizer:
    """A SentencePiece model whose special ids are PAD=0, UNK=1, BOS=2, EOS=3."""

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.path))
        ids = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(
                f"tokenizer {self.path} has special ids (pad, unk, bos, eos) = {ids}, "
                f"attnlab needs {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}"
            )

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        return cls(path)

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without BOS/EOS."""
        return self.sp.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (SentencePiece encodes a list in C++ threads)."""
        return self.sp.encode(list(texts))

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenized text of `ids`: stops at the first EOS, drops PAD and BOS, and ids past
        the vocabulary (a decoder-only model's separator, attnlab.data.pairs)."""
        kept = []
        for i in ids:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID) and i < self.vocab_size:
                kept.append(i)
        return self.sp.decode(kept)

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def save_to(self, run_dir: str | Path, name: str = "tokenizer.model") -> Path:
        """Copy the .model file into `run_dir` (so a checkpoint there can always be decoded)."""
        dest = Path(run_dir) / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.resolve() != self.path.resolve():
            shutil.copyfile(self.path, dest)
        return dest

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.path)!r}, vocab_size={self.vocab_size})"


def fingerprint(files: Sequence[str | Path], extra: str = "") -> str:
    """sha256 over the bytes of `files` (in order) and an `extra` string."""
    h = hashlib.sha256()
    for f in files:
        h.update(sha256_file(f).encode())
    h.update(extra.encode())
    return h.hexdigest()


def _trainer_args(settings: TokenizerSettings) -> dict:
    args = dict(
        model_type=settings.model_type,
        vocab_size=settings.vocab_size,
        character_coverage=settings.character_coverage,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        input_sentence_size=settings.input_sentence_size,
        shuffle_input_sentence=True,
        num_threads=min(os.cpu_count() or 1, 16),
        minloglevel=2,  # quiet: errors only
    )
    if settings.model_type == "char":
        args["hard_vocab_limit"] = False  # vocab_size is an upper bound on the character set
    if settings.preserve_whitespace:
        args.update(
            normalization_rule_name="identity",
            add_dummy_prefix=False,
            remove_extra_whitespaces=False,
            user_defined_symbols=[NEWLINE],
        )
    return args


def _chunked(sentences: Iterable[str]) -> Iterable[str]:
    for s in sentences:
        for i in range(0, max(len(s), 1), _MAX_TRAIN_SENTENCE_CHARS):
            yield s[i : i + _MAX_TRAIN_SENTENCE_CHARS]


def train_or_load(
    sentences: Callable[[], Iterable[str]],
    data_key: str,
    settings: TokenizerSettings,
    cache_dir: str | Path | None = None,
) -> Tokenizer:
    """The cached tokenizer for (data_key, settings), training it on `sentences()` if absent.

    `data_key` identifies the training text (use `fingerprint` of the files); `sentences` is
    called only when training is needed. Models are cached as <cache_dir>/<key>.model
    (default cache dir: ~/.cache/attnlab/tokenizers), written atomically.
    """
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir() / "tokenizers"
    cache_dir = cache_dir.expanduser()
    spec = json.dumps(
        {"data": data_key, **asdict(settings), "sentencepiece": spm.__version__}, sort_keys=True
    )
    key = hashlib.sha256(spec.encode()).hexdigest()[:20]
    path = cache_dir / f"{settings.model_type}{settings.vocab_size}-{key}.model"
    if path.exists():
        log.info("reusing tokenizer %s", path)
        return Tokenizer(path)

    cache_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".train-") as tmp:
        prefix = Path(tmp) / "spm"
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(_chunked(sentences())),
                model_prefix=str(prefix),
                **_trainer_args(settings),
            )
        except RuntimeError as e:
            raise ValueError(
                f"tokenizer training ({settings.model_type}, vocab_size={settings.vocab_size}) "
                f"failed: {str(e).strip()}"
            ) from None
        os.replace(prefix.with_suffix(".model"), path)
    path.with_suffix(".json").write_text(spec + "\n")
    log.info("trained tokenizer in %.1f s: %s", time.perf_counter() - start, path)
    return Tokenizer(path)
