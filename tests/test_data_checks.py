"""Data preflight (a text DataModule's `check`, over attnlab.data.files, which every build of a
run asks first): one line per broken file or bad argument, key first."""

import gzip
import re
import time
from pathlib import Path

import pytest

from attnlab.data.files import DataFileError, count_lines
from attnlab.data.language_model import LMTextDataModule, TinyShakespeareDataModule
from attnlab.data.text import read_lines
from attnlab.data.translation import Multi30kDataModule, TranslationDataModule


def check_data_config(cfg: dict) -> list[str]:
    """The data part of the preflight: the `_target_` class's own check of the config."""
    from hydra.utils import get_object

    cls = get_object(cfg["_target_"])
    return cls.check(cfg) if hasattr(cls, "check") else []


DATA = Path(__file__).parents[2] / "shared" / "data"
MULTI30K = DATA / "multi30k"
SHAKESPEARE = DATA / "tinyshakespeare"

TRANSLATION = "attnlab.data.translation.TranslationDataModule"
MULTI30K_T = "attnlab.data.translation.Multi30kDataModule"
LM = "attnlab.data.language_model.LMTextDataModule"
SHAKESPEARE_T = "attnlab.data.language_model.TinyShakespeareDataModule"
TEXT = "".join(f"sentence number {i}, with a few words\n" for i in range(300)).encode()
MULTI30K_NAMES = [
    f"{s}.{lang}.gz" for s in ("train", "val", "test_2016_flickr") for lang in "en de".split()
]


def write(path: Path, data: bytes, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def translation_cfg(d: Path, **kwargs) -> dict:
    """A valid config: plain train files, gzip val files, 300 lines each."""
    files = {
        "train_src": write(d / "train.en", TEXT),
        "train_tgt": write(d / "train.de", TEXT),
        "val_src": write(d / "val.en.gz", TEXT, gz=True),
        "val_tgt": write(d / "val.de.gz", TEXT, gz=True),
    }
    return {"_target_": TRANSLATION, **{k: str(v) for k, v in files.items()}, **kwargs}


def multi30k_root(d: Path) -> Path:
    for name in MULTI30K_NAMES:
        write(d / "m30k" / name, TEXT, gz=True)
    return d / "m30k"


def lm_cfg(d: Path, **kwargs) -> dict:
    return {"_target_": LM, "path": str(write(d / "corpus.txt.gz", TEXT, gz=True)), **kwargs}


def _gz_with(d: Path, name: str, edit) -> Path:
    data = edit(gzip.compress(TEXT, mtime=0))
    return write(d / name, data)


def _flip(data: bytes, start: int, n: int = 4) -> bytes:
    return data[:start] + bytes(b ^ 0xFF for b in data[start : start + n]) + data[start + n :]


# Each case: (tmp_path) -> (config, key, offending file or None, expected message fragment)
def missing_lm_file(d):
    return lm_cfg(d, path=str(d / "nowhere.txt")), "data.path", d / "nowhere.txt", ": missing"


def empty_plain_file(d):
    p = write(d / "empty.txt", b"")
    return lm_cfg(d, path=str(p)), "data.path", p, ": file is empty"


def empty_gzip_file(d):
    p = write(d / "empty.txt.gz", b"", gz=True)
    return lm_cfg(d, path=str(p)), "data.path", p, ": file is empty (the gzip stream holds no text)"


def line_count_mismatch(d):
    cfg = translation_cfg(d)
    p = write(d / "train.de", TEXT[: TEXT.index(b"\n") + 1] + TEXT)  # one extra line
    return cfg, "data.train_tgt", p, "301 lines but data.train_src"


def gzip_line_count_mismatch(d):
    cfg = translation_cfg(d)
    p = write(d / "val.de.gz", TEXT.rsplit(b"\n", 2)[0] + b"\n", gz=True)  # one line fewer
    return cfg, "data.val_tgt", p, "299 lines but data.val_src"


def invalid_utf8_plain(d):
    p = write(d / "val.en", b"first line\nsecond \xff line\n")
    cfg = translation_cfg(d, val_src=str(p))
    return cfg, "data.val_src", p, "not UTF-8 (invalid byte 0xff at offset 18, line 2)"


def invalid_utf8_in_gzip(d):
    p = write(d / "train.en.gz", b"ok\n" * 10 + b"caf\xe9\n", gz=True)  # Latin-1, not UTF-8
    return (
        lm_cfg(d, path=str(p)),
        "data.path",
        p,
        "not UTF-8 (invalid byte 0xe9 at offset 33 of the decompressed text, line 11)",
    )


def utf8_cut_at_the_end(d):
    p = write(d / "cut.txt", "naïve\nnaï".encode()[:-1])  # a 2-byte character cut in half
    return lm_cfg(d, path=str(p)), "data.path", p, "invalid byte 0xc3 at offset 9, line 2"


def corrupt_gzip_data(d):
    cfg = translation_cfg(d)
    p = _gz_with(d, "val.de.gz", lambda gz: _flip(gz, len(gz) // 2))
    return cfg, "data.val_tgt", p, "not a valid gzip file ("


def corrupt_gzip_crc(d):
    cfg = lm_cfg(d)
    p = _gz_with(d, "corpus.txt.gz", lambda gz: _flip(gz, len(gz) - 8))
    return cfg, "data.path", p, "not a valid gzip file (CRC check failed"


def corrupt_gzip_header(d):
    cfg = lm_cfg(d)
    p = _gz_with(d, "corpus.txt.gz", lambda gz: gz[:2] + b"\x07" + gz[3:])  # compression method
    return cfg, "data.path", p, "not a valid gzip file (Unknown compression method)"


def truncated_gzip(d):
    cfg = translation_cfg(d)
    p = _gz_with(d, "val.en.gz", lambda gz: gz[: len(gz) * 2 // 3])
    return cfg, "data.val_src", p, "not a valid gzip file (truncated: Compressed file ended"


def directory_instead_of_file(d):
    cfg = translation_cfg(d)
    (d / "train.en").unlink()
    (d / "train.en").mkdir()
    return cfg, "data.train_src", d / "train.en", "is a directory; expected a UTF-8 text file"


def multi30k_missing_no_download(d):
    root = multi30k_root(d)
    (root / "val.de.gz").unlink()
    cfg = {"_target_": MULTI30K_T, "root": str(root), "download": False}
    return cfg, "data.root", root / "val.de.gz", ": missing; place it there, or set data.downl"


def multi30k_named_root_missing_file(d):
    """A root the user names is never downloaded into unless data.download=true."""
    root = multi30k_root(d)
    (root / "val.de.gz").unlink()
    cfg = {"_target_": MULTI30K_T, "root": str(root)}
    return cfg, "data.root", root / "val.de.gz", ": missing; place it there, or set data.downl"


def multi30k_mistyped_root(d):
    """A root that does not exist is one line (not one per file), and nothing is created."""
    cfg = {"_target_": MULTI30K_T, "root": str(d / "mulit30k")}
    return cfg, "data.root", None, f"{d / 'mulit30k'} does not exist; put Multi30K's files there"


def multi30k_broken_file(d):
    root = multi30k_root(d)
    p = write(root / "test_2016_flickr.de.gz", b"a\n", gz=True)
    return {"_target_": MULTI30K_T, "root": str(root)}, "data.root", p, "1 line but data.root"


def shakespeare_missing_no_download(d):
    cfg = {"_target_": SHAKESPEARE_T, "root": str(d / "none"), "download": False}
    return cfg, "data.root", None, "does not exist; put Tiny Shakespeare's files there"


def half_a_test_pair(d):
    cfg = translation_cfg(d, test_src=str(d / "train.en"))
    return cfg, "data.test_tgt", None, "not set; data.test_src is set"


def no_training_files(d):
    cfg = translation_cfg(d)
    del cfg["train_tgt"]
    return cfg, "data.train_tgt", None, "not set; the training split needs"


def tokenizer_path_not_a_model(d):
    p = write(d / "tok.model", b"not a sentencepiece model")
    return lm_cfg(d, tokenizer_path=str(p)), "data.tokenizer_path", p, "not a SentencePiece model"


def same_languages(d):
    cfg = {"_target_": MULTI30K_T, "root": str(multi30k_root(d)), "src_lang": "de"}
    return cfg, "data.tgt_lang", None, "data.tgt_lang='de' is data.src_lang too"


def unknown_language(d):
    cfg = {"_target_": MULTI30K_T, "root": str(multi30k_root(d)), "src_lang": "fr"}
    return cfg, "data.src_lang", None, "data.src_lang='fr' is not valid; expected one of: en, de"


def bad_tokenizer_type(d):
    cfg = translation_cfg(d, tokenizer_type="wordpiece")
    return (
        cfg,
        "data.tokenizer_type",
        None,
        "'wordpiece' is not valid; expected one of: bpe, unigram, char",
    )


def vocab_too_small(d):
    return (
        lm_cfg(d, vocab_size=4),
        "data.vocab_size",
        None,
        "data.vocab_size=4 is not valid; expected an integer >= 5",
    )


def zero_block_size(d):
    return (
        lm_cfg(d, block_size=0),
        "data.block_size",
        None,
        "data.block_size=0 is not valid; expected an integer >= 1",
    )


def zero_max_tokens(d):
    return (
        lm_cfg(d, max_tokens=0),
        "data.max_tokens",
        None,
        "data.max_tokens=0 is not valid; expected an integer",
    )


def pair_over_budget(d):
    cfg = translation_cfg(d, max_tokens=100, max_src_len=64, max_tgt_len=64)
    return (
        cfg,
        "data.max_tokens",
        None,
        "data.max_tokens=100 is less than max_src_len + max_tgt_len",
    )


def splits_not_summing_to_one(d):
    cfg = lm_cfg(d, splits=[0.5, 0.1, 0.1])
    return cfg, "data.splits", None, "data.splits=[0.5, 0.1, 0.1] must be 3 fractions"


def unknown_key(d):
    cfg = lm_cfg(d, blok_size=64)
    return cfg, "data.blok_size", None, "not an argument of LMTextDataModule; valid: path,"


def path_given_to_shakespeare(d):
    cfg = {"_target_": SHAKESPEARE_T, "root": str(d / "none"), "path": str(d / "x.txt")}
    return cfg, "data.path", None, "Tiny Shakespeare reads <data.root>/input.txt; remove data.path"


BROKEN = [
    missing_lm_file,
    empty_plain_file,
    empty_gzip_file,
    line_count_mismatch,
    gzip_line_count_mismatch,
    invalid_utf8_plain,
    invalid_utf8_in_gzip,
    utf8_cut_at_the_end,
    corrupt_gzip_data,
    corrupt_gzip_crc,
    corrupt_gzip_header,
    truncated_gzip,
    directory_instead_of_file,
    multi30k_missing_no_download,
    multi30k_named_root_missing_file,
    multi30k_mistyped_root,
    multi30k_broken_file,
    shakespeare_missing_no_download,
    half_a_test_pair,
    no_training_files,
    tokenizer_path_not_a_model,
    same_languages,
    unknown_language,
    bad_tokenizer_type,
    vocab_too_small,
    zero_block_size,
    zero_max_tokens,
    pair_over_budget,
    splits_not_summing_to_one,
    unknown_key,
    path_given_to_shakespeare,
]


@pytest.mark.parametrize("case", BROKEN, ids=lambda f: f.__name__)
def test_one_line_per_problem_naming_key_and_file(case, tmp_path):
    cfg, key, path, fragment = case(tmp_path)
    problems = check_data_config(cfg)
    assert len(problems) == 1, problems
    (line,) = problems
    assert "\n" not in line
    assert re.match(rf"{re.escape(key)}[:=]", line), line
    if path is not None:
        assert line.startswith(f"{key}: {path}: "), line
    assert fragment in line, line


# Argument rules are shared: the constructor raises the very line the preflight prints.
CONSTRUCTOR_RULES = [
    same_languages,
    unknown_language,
    bad_tokenizer_type,
    vocab_too_small,
    zero_block_size,
    zero_max_tokens,
    pair_over_budget,
    splits_not_summing_to_one,
    path_given_to_shakespeare,
]
CLASSES = {
    TRANSLATION: TranslationDataModule,
    MULTI30K_T: Multi30kDataModule,
    LM: LMTextDataModule,
    SHAKESPEARE_T: TinyShakespeareDataModule,
}


@pytest.mark.parametrize("case", CONSTRUCTOR_RULES, ids=lambda f: f.__name__)
def test_constructor_raises_the_same_line(case, tmp_path):
    cfg, _, _, _ = case(tmp_path)
    (line,) = check_data_config(cfg)
    cls = CLASSES[cfg.pop("_target_")]
    with pytest.raises(ValueError, match=f"^{re.escape(line)}$"):
        cls(**cfg, cache_dir=str(tmp_path / "cache"))


def test_problems_are_all_reported(tmp_path):
    cfg = translation_cfg(tmp_path, tokenizer_type="x", val_src=str(tmp_path / "gone.en"))
    write(tmp_path / "train.de", b"\xff\n")
    problems = check_data_config(cfg)
    assert [p.split(":")[0].split("=")[0] for p in problems] == [
        "data.tokenizer_type",
        "data.train_tgt",
        "data.val_src",
    ]


@pytest.mark.parametrize(
    "make_cfg",
    [
        translation_cfg,
        lambda d: translation_cfg(d, test_src=str(d / "val.en.gz"), test_tgt=str(d / "val.de.gz")),
        lambda d: {"_target_": MULTI30K_T, "root": str(multi30k_root(d)), "download": False},
        # missing but downloadable (data.download=true): prepare_data will fetch it
        lambda d: {
            "_target_": MULTI30K_T,
            "root": str(d / "new"),
            "src_lang": "de",
            "tgt_lang": "en",
            "download": True,
        },
        lambda d: {"_target_": SHAKESPEARE_T, "root": None, "cache_dir": str(d), "block_size": 8},
        lambda d: lm_cfg(d, tokenizer_type="bpe", vocab_size=500, splits=[0.8, 0.2, 0.0]),
        lambda d: {"_target_": "attnlab.data.synthetic.SyntheticDataModule", "name": "copy"},
    ],
    ids=[
        "translation",
        "translation_test",
        "multi30k",
        "m30k_download",
        "shakespeare_download",
        "lm",
        "synthetic",
    ],
)
def test_valid_configs_pass(make_cfg, tmp_path):
    assert check_data_config(make_cfg(tmp_path)) == []


@pytest.mark.parametrize(
    "data",
    [b"a", b"a\n", b"a\nb", b"a\r\nb\r\n", b"\n\n", b"x\n\ny", "é\nü\n".encode()],
)
@pytest.mark.parametrize("gz", [False, True])
def test_count_lines_agrees_with_read_lines(data, gz, tmp_path):
    p = write(tmp_path / "f", data, gz=gz)
    assert count_lines(p) == len(read_lines(p))


def test_count_lines_reads_multi_member_gzip_and_chunk_boundaries(tmp_path, monkeypatch):
    p = write(tmp_path / "m.gz", gzip.compress(b"a\nb\n") + gzip.compress(b"c"))
    assert count_lines(p) == len(read_lines(p)) == 3
    # a multi-byte character split across chunks is valid; an invalid byte's offset is global
    monkeypatch.setattr("attnlab.data.files._CHUNK", 3)
    p = write(tmp_path / "u.txt", "aé\nüb\n".encode() + b"\xff")
    with pytest.raises(DataFileError, match=r"invalid byte 0xff at offset 8, line 3"):
        count_lines(p)
    write(p, "aé\nüb\n".encode())
    assert count_lines(p) == 2


@pytest.mark.data
@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"{MULTI30K} absent")
def test_real_multi30k_and_shakespeare_pass_quickly():
    start = time.perf_counter()
    assert (
        check_data_config({"_target_": MULTI30K_T, "root": str(MULTI30K), "download": False}) == []
    )
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"{elapsed:.2f} s"
    if SHAKESPEARE.is_dir():
        cfg = {"_target_": SHAKESPEARE_T, "root": str(SHAKESPEARE), "download": False}
        assert check_data_config(cfg) == []


def test_tokenizer_path_is_loaded_and_its_special_ids_checked(tmp_path):
    import sentencepiece as spm

    from attnlab.data.tokenizer import TokenizerSettings, train_or_load

    lines = TEXT.decode().splitlines()
    ours = train_or_load(lambda: lines, "t", TokenizerSettings("char", 100), tmp_path / "tok")
    assert check_data_config(lm_cfg(tmp_path, tokenizer_path=str(ours.path))) == []
    # SentencePiece's default ids (unk=0, bos=1, eos=2, no pad) are not attnlab's
    prefix = tmp_path / "default"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), model_type="char", minloglevel=2
    )
    model = prefix.with_suffix(".model")
    (line,) = check_data_config(lm_cfg(tmp_path, tokenizer_path=str(model)))
    assert line.startswith(f"data.tokenizer_path: {model}: tokenizer has special ids"), line
