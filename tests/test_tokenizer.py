"""SentencePiece tokenizer: special ids, round trip, caching, run-dir copy."""

import gzip
from pathlib import Path

import pytest
import sentencepiece as spm

from attnlab.data import tokenizer as tok
from attnlab.data.tokenizer import Tokenizer, TokenizerSettings, train_or_load
from attnlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

DATA = Path(__file__).parents[2] / "shared" / "data"
MULTI30K = DATA / "multi30k"
pytestmark = [
    pytest.mark.data,
    pytest.mark.skipif(not (MULTI30K / "train.en.gz").exists(), reason=f"{MULTI30K} absent"),
]


def _lines(name: str, n: int = 3000) -> list[str]:
    with gzip.open(MULTI30K / name, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return _lines("train.en.gz") + _lines("train.de.gz")


def _train(corpus, cache_dir, **settings) -> Tokenizer:
    return train_or_load(lambda: corpus, "slice", TokenizerSettings(**settings), cache_dir)


def test_special_ids_and_vocab_size(corpus, tmp_path):
    t = _train(corpus, tmp_path, vocab_size=1000)
    assert (t.pad_id, t.unk_id, t.bos_id, t.eos_id) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    assert [t.sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert t.vocab_size == 1000
    ids = t.encode("Ein Hund läuft am Strand.")
    assert ids and min(ids) >= 4  # no special id inside ordinary text


def test_round_trip_and_decode_stops_at_eos(corpus, tmp_path):
    t = _train(corpus, tmp_path, vocab_size=1000)
    normal = [s for s in corpus[:300] + corpus[3000:3300] if " ".join(s.split()) == s]
    assert len(normal) > 500
    assert t.decode_batch(t.encode_batch(normal)) == normal
    s = "Two dogs play in the snow."
    ids = t.encode(s)
    assert len(ids) < len(s.split()) * 3  # subwords, not characters
    assert t.decode([BOS_ID, *ids, EOS_ID, *t.encode("junk after eos"), PAD_ID]) == s
    assert t.decode([*ids, PAD_ID, PAD_ID]) == s


def test_cache_reuses_model_without_retraining(corpus, tmp_path, monkeypatch, caplog):
    first = _train(corpus, tmp_path, vocab_size=800)
    calls = []

    def no_training(**kwargs):
        calls.append(kwargs)
        raise AssertionError("retrained a cached tokenizer")

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", no_training)
    with caplog.at_level("INFO", logger="attnlab.data.tokenizer"):
        again = train_or_load(
            lambda: pytest.fail("read the corpus for a cached tokenizer"),
            "slice",
            TokenizerSettings(vocab_size=800),
            tmp_path,
        )
    assert again.path == first.path and not calls
    assert f"reusing tokenizer {first.path}" in caplog.text
    # different settings or data are a different cache entry (and would need training)
    with pytest.raises(AssertionError, match="retrained"):
        _train(corpus, tmp_path, vocab_size=900)
    with pytest.raises(AssertionError, match="retrained"):
        train_or_load(lambda: corpus, "other data", TokenizerSettings(vocab_size=800), tmp_path)


def test_training_is_quiet(corpus, tmp_path, capfd):
    _train(corpus, tmp_path, vocab_size=700)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_save_to_run_dir_and_from_file(corpus, tmp_path):
    t = _train(corpus, tmp_path / "cache", vocab_size=1000)
    path = t.save_to(tmp_path / "run")
    assert path == tmp_path / "run" / "tokenizer.model"
    loaded = Tokenizer.from_file(path)
    s = "Eine Frau mit einem roten Hut."
    assert loaded.encode(s) == t.encode(s) and loaded.vocab_size == t.vocab_size


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["unigram", "char"])
def test_other_model_types(corpus, tmp_path, model_type):
    t = _train(corpus, tmp_path, model_type=model_type, vocab_size=1000)
    s = "A man in a blue shirt."
    assert t.decode(t.encode(s)) == s
    if model_type == "char":
        # one id per character, spaces included, plus the leading "▁" (dummy prefix)
        assert len(t.encode(s)) == len(s) + 1
        assert t.vocab_size < 1000  # vocab_size is only an upper bound for char


def test_preserve_whitespace_keeps_text_exact(corpus, tmp_path):
    t = _train(corpus, tmp_path, model_type="char", vocab_size=300, preserve_whitespace=True)
    s = "A  man,\n\n  a dog.\n"
    assert t.decode(t.encode(s)) == s
    assert t.encode("\n") == [t.sp.piece_to_id("\n")]


def test_bad_settings_and_foreign_model(corpus, tmp_path):
    with pytest.raises(
        ValueError, match="model_type='wordpiece' is not valid; expected one of: bpe, unigram"
    ):
        TokenizerSettings(model_type="wordpiece")
    with pytest.raises(ValueError, match="vocab_size=100000"):
        _train(corpus[:50], tmp_path, vocab_size=100000)
    # a model trained with SentencePiece's own default ids (unk=0, bos=1, eos=2) is refused
    prefix = tmp_path / "foreign"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus[:500]),
        model_prefix=str(prefix),
        vocab_size=200,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="special ids"):
        Tokenizer.from_file(f"{prefix}.model")


def test_default_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    assert tok.default_cache_dir() == tmp_path
