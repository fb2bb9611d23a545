"""Text datasets and DataModules on slices of ../shared/data; the network is never used."""

import gzip
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import lightning as L
import pytest
import torch

from attnlab.data.batching import BlockBatchSampler
from attnlab.data.download import KNOWN_FILES, DownloadError, RemoteFile, sha256_file
from attnlab.data.language_model import LMTextDataModule, TinyShakespeareDataModule
from attnlab.data.pairs import collate_pairs
from attnlab.data.text import ParallelTextDataset, read_lines
from attnlab.data.translation import Multi30kDataModule, TranslationDataModule
from attnlab.data.vocab import BOS_ID, EOS_ID, PAD_ID

DATA = Path(__file__).parents[2] / "shared" / "data"
MULTI30K = DATA / "multi30k"
SHAKESPEARE = DATA / "tinyshakespeare"
pytestmark = [
    pytest.mark.data,
    pytest.mark.skipif(not MULTI30K.is_dir() or not SHAKESPEARE.is_dir(), reason=f"{DATA} absent"),
]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Only file:// URLs can be opened."""
    real_urlopen = urllib.request.urlopen

    def local_only(url, *args, **kwargs):
        if str(url).startswith("file:"):
            return real_urlopen(url, *args, **kwargs)
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(urllib.request, "urlopen", local_only)


def _slice(src: Path, dest: Path, n: int, compress: bool) -> Path:
    lines = read_lines(src)[:n]
    text = "".join(line + "\n" for line in lines)
    if compress:
        with gzip.open(dest, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        dest.write_text(text, encoding="utf-8")
    return dest


@pytest.fixture
def small_files(tmp_path) -> dict:
    """Plain train files and gzip val files: 1500 / 200 Multi30K pairs."""
    d = tmp_path / "data"
    d.mkdir()
    files = {}
    for split, n, gz in (("train", 1500, False), ("val", 200, True)):
        for side, lang in (("src", "en"), ("tgt", "de")):
            name = f"{split}.{lang}" + (".gz" if gz else "")
            files[f"{split}_{side}"] = str(_slice(MULTI30K / f"{split}.{lang}.gz", d / name, n, gz))
    return files


def small_dm(small_files, tmp_path, **kwargs) -> TranslationDataModule:
    kwargs = {"vocab_size": 600, "max_tokens": 600, "cache_dir": str(tmp_path / "cache")} | kwargs
    return TranslationDataModule(**small_files, **kwargs)


def test_read_lines_plain_gzip_crlf(tmp_path):
    gz = read_lines(MULTI30K / "val.en.gz")
    assert len(gz) == 1014 and gz[0] and not any("\n" in s for s in gz)
    plain = tmp_path / "val.en"
    plain.write_bytes(b"a b\r\nc\n\nd")
    assert read_lines(plain) == ["a b", "c", "", "d"]
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        read_lines(tmp_path / "nowhere.txt")


def test_parallel_dataset_filters_train_and_truncates_eval(small_files, tmp_path):
    tok = small_dm(small_files, tmp_path).tokenizer
    src, tgt = read_lines(small_files["train_src"]), read_lines(small_files["train_tgt"])
    src_len = [len(ids) + 1 for ids in tok.encode_batch(src)]
    tgt_len = [len(ids) + 1 for ids in tok.encode_batch(tgt)]
    too_long = sum(s > 16 or t > 18 for s, t in zip(src_len, tgt_len, strict=True))
    assert 0 < too_long < len(src)
    train = ParallelTextDataset(src, tgt, tok, max_src_len=16, max_tgt_len=18)
    assert train.n_filtered == too_long and len(train) == len(src) - too_long
    assert max(train.src_lens) <= 16 and max(train.tgt_lens) <= 18
    val = ParallelTextDataset(src, tgt, tok, 16, 18, filter_long=False, name="val")
    assert len(val) == len(src) and val.n_truncated == too_long
    assert max(val.src_lens) <= 16 and val.tgt_text == tgt  # references stay whole
    with pytest.raises(ValueError, match="1500 source lines but 3 target lines"):
        ParallelTextDataset(src, tgt[:3], tok)


PAIRS = [
    {"src": [5, 6, EOS_ID], "tgt": [7, 8, 9], "src_text": "a", "tgt_text": "b"},
    {"src": [5, EOS_ID], "tgt": [7], "src_text": "c", "tgt_text": "d"},
]


def test_collate_adds_bos_eos_and_pads():
    batch = collate_pairs(PAIRS)
    assert batch["src"].tolist() == [[5, 6, EOS_ID], [5, EOS_ID, PAD_ID]]
    assert batch["tgt_in"].tolist() == [[BOS_ID, 7, 8, 9], [BOS_ID, 7, PAD_ID, PAD_ID]]
    assert batch["tgt_out"].tolist() == [[7, 8, 9, EOS_ID], [7, EOS_ID, PAD_ID, PAD_ID]]
    assert batch["src_text"] == ["a", "c"] and batch["tgt_text"] == ["b", "d"]


def test_collate_for_a_decoder_only_model_joins_each_pair_with_a_separator():
    sep, P = 99, PAD_ID
    batch = collate_pairs(PAIRS, sep_id=sep)
    assert batch["tokens"].tolist() == [[BOS_ID, 5, 6, sep, 7, 8, 9], [BOS_ID, 5, sep, 7, P, P, P]]
    # the loss is on y + EOS only: PAD over the prompt, whose last token (SEP) predicts y's first
    assert batch["targets"].tolist() == [[P, P, P, 7, 8, 9, EOS_ID], [P, P, 7, EOS_ID, P, P, P]]
    assert batch["prompt_len"].tolist() == [4, 3]
    assert batch["src_text"] == ["a", "c"] and batch["tgt_text"] == ["b", "d"]


@pytest.mark.slow
def test_translation_datamodule_batches(small_files, tmp_path):
    dm = small_dm(small_files, tmp_path)
    dm.prepare_data()
    dm.setup("fit")
    assert (dm.task, dm.vocab_size, dm.pad_id, dm.bos_id, dm.eos_id) == ("seq2seq", 600, 0, 2, 3)
    assert 0 < dm.padding_fraction() < 0.15
    seen = []
    for batch in dm.train_dataloader():
        src, tgt_in, tgt_out = batch["src"], batch["tgt_in"], batch["tgt_out"]
        assert src.dtype == tgt_in.dtype == tgt_out.dtype == torch.long
        assert src.numel() + tgt_in.numel() <= 600 and tgt_in.shape == tgt_out.shape
        assert len(batch["src_text"]) == len(batch["tgt_text"]) == src.shape[0]
        assert (tgt_in[:, 0] == BOS_ID).all()
        # tgt_out is tgt_in shifted left by one, ending with EOS
        y = (tgt_out[:, :-1] != PAD_ID) & (tgt_out[:, :-1] != EOS_ID)
        assert (tgt_in[:, 1:][y] == tgt_out[:, :-1][y]).all()
        last = (tgt_out != PAD_ID).sum(1) - 1
        assert (tgt_out[torch.arange(len(last)), last] == EOS_ID).all()
        assert (src[torch.arange(len(src)), (src != PAD_ID).sum(1) - 1] == EOS_ID).all()
        seen += batch["src_text"]
    assert sorted(seen) == sorted(dm.datasets["train"].src_text)  # each pair once
    val = next(iter(dm.val_dataloader()))
    assert dm.tokenizer.decode(val["tgt_out"][0].tolist()) == val["tgt_text"][0]


@pytest.mark.slow
def test_translation_datamodule_for_a_decoder_only_model(small_files, tmp_path):
    dm = small_dm(small_files, tmp_path, arch="decoder_only")
    dm.setup("fit")
    assert (dm.task, dm.sep_id, dm.vocab_size) == ("lm", 600, 601)  # the separator's own id
    batch = next(iter(dm.val_dataloader()))
    tokens, targets, prompt_len = batch["tokens"], batch["targets"], batch["prompt_len"]
    assert tokens.shape == targets.shape and len(batch["tgt_text"]) == tokens.size(0)
    for i in range(tokens.size(0)):
        p = int(prompt_len[i])
        assert tokens[i, 0] == BOS_ID and tokens[i, p - 1] == dm.sep_id
        assert dm.tokenizer.decode(tokens[i, 1 : p - 1].tolist()) == batch["src_text"][i]
        assert (targets[i, : p - 1] == PAD_ID).all()
        assert dm.tokenizer.decode(targets[i, p - 1 :].tolist()) == batch["tgt_text"][i]
    with pytest.raises(ValueError, match="data.arch='encoder_only' is not valid"):
        small_dm(small_files, tmp_path, arch="encoder_only")


def test_translation_datamodule_rejects_bad_config(small_files, tmp_path):
    with pytest.raises(ValueError, match="data.max_tokens=100 is less than max_src_len"):
        small_dm(small_files, tmp_path, max_tokens=100, max_src_len=64, max_tgt_len=64)
    dm = small_dm(small_files, tmp_path)
    with pytest.raises(ValueError, match="data.test_src and data.test_tgt must both be set"):
        dm.setup("test")


class _Recorder(L.LightningModule):
    """Records the first source sentence of every training epoch."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.first = []

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.first.append(batch["src_text"][0])
        return (self.w - 1) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no")
@pytest.mark.parametrize("reload", [0, 1])
def test_lightning_reshuffles_each_epoch(small_files, tmp_path, reload):
    dm = small_dm(small_files, tmp_path)
    module = _Recorder()
    trainer = L.Trainer(
        max_epochs=3,
        limit_train_batches=2,
        limit_val_batches=0,
        reload_dataloaders_every_n_epochs=reload,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=dm)
    expected = []
    for epoch in range(3):
        sampler = dm._sampler("train")
        expected.append(dm.datasets["train"].src_text[sampler.batches(epoch)[0][0]])
    assert module.first == expected and len(set(expected)) == 3


@pytest.mark.slow
def test_multi30k_from_shared_root_without_network(tmp_path):
    kwargs = {
        "root": str(MULTI30K),
        "vocab_size": 2000,
        "max_tokens": 2048,
        "cache_dir": str(tmp_path),
    }
    dm = Multi30kDataModule(**kwargs)  # en -> de
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    assert len(dm.datasets["train"]) + dm.n_filtered == 29000
    assert len(dm.datasets["val"]) == 1014 and len(dm.datasets["test"]) == 1000
    batch = next(iter(dm.test_dataloader()))
    assert set(batch) == {"src", "tgt_in", "tgt_out", "src_text", "tgt_text"}
    B = batch["src"].shape[0]
    assert batch["tgt_in"].shape == batch["tgt_out"].shape and batch["tgt_in"].shape[0] == B
    assert set(batch["src_text"]) <= set(read_lines(MULTI30K / "test_2016_flickr.en.gz"))
    assert set(batch["tgt_text"]) <= set(read_lines(MULTI30K / "test_2016_flickr.de.gz"))
    dm.save_tokenizer(tmp_path / "run")
    assert (tmp_path / "run" / "tokenizer.model").is_file()

    # de -> en: same joint tokenizer from the cache, swapped sides
    reverse = Multi30kDataModule(src_lang="de", tgt_lang="en", **kwargs)
    assert reverse.tokenizer.path == dm.tokenizer.path
    reverse.setup("test")
    assert reverse.datasets["test"].src_text == dm.datasets["test"].tgt_text
    assert len(list((tmp_path / "tokenizers").glob("*.model"))) == 1


def test_multi30k_missing_files(tmp_path):
    dm = Multi30kDataModule(root=str(tmp_path / "m30k"), cache_dir=str(tmp_path), download=True)
    with pytest.raises(DownloadError, match=r"train\.en\.gz is missing .*raw/train\.en\.gz"):
        dm.prepare_data()
    dm = Multi30kDataModule(root=str(tmp_path / "m30k"), cache_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"m30k/train\.en\.gz is missing"):
        dm.prepare_data()  # a root the user names: never downloaded into by default
    dm = Multi30kDataModule(root=str(tmp_path / "m30k"), download=False, cache_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"m30k/train\.en\.gz is missing"):
        dm.prepare_data()
    with pytest.raises(
        ValueError, match="data.src_lang='fr' is not valid; expected one of: en, de"
    ):
        Multi30kDataModule(src_lang="fr")
    with pytest.raises(ValueError, match="data.train_src: Multi30K reads its files from data.root"):
        Multi30kDataModule(train_src="train.en")


@pytest.mark.slow
def test_lm_blocks_are_shifted_by_one(tmp_path):
    dm = TinyShakespeareDataModule(
        root=str(SHAKESPEARE), block_size=64, batch_size=8, cache_dir=str(tmp_path)
    )
    dm.prepare_data()
    dm.setup("fit")
    assert dm.task == "lm" and 60 < dm.vocab_size < 80  # 65 characters + specials + "\n"
    batch = next(iter(dm.train_dataloader()))
    tokens, targets = batch["tokens"], batch["targets"]
    assert tokens.shape == targets.shape == (8, 64)
    assert (tokens[:, 1:] == targets[:, :-1]).all()
    text = dm.tokenizer.decode(tokens[0].tolist())
    assert len(text) == 64 and text in dm.split_texts()["train"]
    # eval: fixed blocks, every val token but the first is a target once, PAD after the end
    val = list(dm.val_dataloader())
    n_targets = sum(int((b["targets"] != PAD_ID).sum()) for b in val)
    assert n_targets == len(dm.stream("val")) - 1
    assert (val[-1]["targets"][-1, -1] == PAD_ID).item() or n_targets % 64 == 0
    assert torch.equal(next(iter(dm.val_dataloader()))["tokens"], val[0]["tokens"])


def test_lm_text_file_bpe_and_splits(tmp_path):
    path = _slice(SHAKESPEARE / "input.txt.gz", tmp_path / "play.txt", 4000, compress=False)
    text = path.read_text(encoding="utf-8")
    dm = LMTextDataModule(
        path=str(path),
        tokenizer_type="bpe",
        vocab_size=500,
        block_size=32,
        max_tokens=256,
        splits=[0.8, 0.1, 0.1],
        cache_dir=str(tmp_path),
    )
    assert dm.batch_size == 8
    parts = dm.split_texts()
    assert parts["train"] + parts["val"] + parts["test"] == text
    assert len(parts["train"]) == int(0.8 * len(text))
    assert dm.tokenizer.decode(dm.stream("test").tolist()) == parts["test"]
    assert len(dm.stream("train")) < 0.6 * len(parts["train"])  # subwords, not characters
    with pytest.raises(ValueError, match=r"data.splits=\[0.5, 0.1, 0.1\]"):
        LMTextDataModule(path=str(path), splits=[0.5, 0.1, 0.1])


def test_lm_default_batch_fits_any_world_size_but_a_given_one_must_divide(tmp_path):
    path = _slice(SHAKESPEARE / "input.txt.gz", tmp_path / "play.txt", 400, compress=False)
    common = dict(path=str(path), block_size=16, max_tokens=80, cache_dir=str(tmp_path))
    default = LMTextDataModule(**common)  # max_tokens // block_size = 5 blocks per step
    assert [default.global_batch_size(w) for w in (1, 2, 3, 4, 8)] == [5, 4, 3, 4, 8]
    given = LMTextDataModule(batch_size=5, **common)
    assert given.global_batch_size(2) == 5  # as given: the sampler rejects it, naming the key
    with pytest.raises(ValueError, match=r"data.batch_size=5 is not divisible by the world size 2"):
        BlockBatchSampler(1000, 16, given.global_batch_size(2), num_replicas=2, rank=0)


def test_tinyshakespeare_finds_plain_or_gzip_and_downloads_when_missing(tmp_path, monkeypatch):
    gz_root = tmp_path / "gz"
    gz_root.mkdir()
    shutil.copy(SHAKESPEARE / "input.txt.gz", gz_root / "input.txt.gz")
    assert TinyShakespeareDataModule(root=str(gz_root)).text_path().name == "input.txt.gz"
    # missing: downloads input.txt (from a local "upstream" here) and checks its sha256
    upstream = _slice(SHAKESPEARE / "input.txt.gz", tmp_path / "upstream.txt", 2000, False)
    monkeypatch.setitem(
        KNOWN_FILES,
        "tinyshakespeare/input.txt",
        RemoteFile(upstream.as_uri(), sha256_file(upstream)),
    )
    dm = TinyShakespeareDataModule(
        root=str(tmp_path / "new"), cache_dir=str(tmp_path), block_size=16, download=True
    )
    dm.prepare_data()
    assert (tmp_path / "new" / "input.txt").read_bytes() == upstream.read_bytes()
    default = TinyShakespeareDataModule(cache_dir=str(tmp_path / "cache"), block_size=16)
    default.prepare_data()  # data.root=null: the default folder is fetched into
    assert default.text_path() == tmp_path / "cache" / "data" / "tinyshakespeare" / "input.txt"
    assert default.text_path().read_bytes() == upstream.read_bytes()
    missing = TinyShakespeareDataModule(root=str(tmp_path / "none"), download=False)
    with pytest.raises(FileNotFoundError, match=r"none/input.txt \(or input.txt.gz\) is missing"):
        missing.prepare_data()


def test_multi30k_offline_without_its_files_is_one_line_before_training(tmp_path, monkeypatch,
                                                                         compose):  # fmt: skip
    """experiment=multi30k_cpu on a fresh machine without network: the build refuses in one line
    that names the missing file, where to place it and data.root (it was a traceback)."""
    from attnlab.pipeline.build import ConfigRefused, build

    def offline(url, timeout=None):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    cfg = compose(["experiment=multi30k_cpu"])
    cfg.paths.run_dir = str(tmp_path / "run")  # as attnlab-train's Hydra run sets it
    with pytest.raises(ConfigRefused) as refused:
        build(cfg, tmp_path / "run")
    [line] = refused.value.problems
    assert "multi30k/train.en.gz is missing and could not be downloaded" in line
    assert "without network access, place the file at" in line and "data.root" in line
