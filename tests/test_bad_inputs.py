"""A typo in a config or a broken data file costs seconds (issue 6): each case ends in one line
naming the key or the file, exit code 2, no traceback, and nothing written to a run directory."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

from attnlab.pipeline.preflight import preflight
from build_utils import dry_build
from cli_run_cache import parallel_text_run, single_runs

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def parallel(tmp: Path, **broken: Path) -> list[str]:
    """data=parallel_text with valid 3-line files for every split, some replaced by `broken`."""
    files = {}
    for split in ("train", "val", "test"):
        for side, lang in (("src", "en"), ("tgt", "de")):
            key = f"{split}_{side}"
            files[key] = broken.get(key) or write(tmp / f"{split}.{lang}", "a b\nc d\ne f\n")
    return ["data=parallel_text", *(f"data.{k}={v}" for k, v in files.items())]


def _saved(path: Path, obj) -> Path:
    import torch

    torch.save(obj, path)
    return path


def _checkpoint(path: Path, **model) -> Path:
    """A Lightning checkpoint of an attnlab model: the default run's model options, changed."""
    from attnlab.config.compose import compose_config
    from conftest import model_config

    cfg = compose_config(CONF_DIR, [f"model.{k}={v}" for k, v in model.items()])
    options = model_config(cfg.model, vocab_size=20, pad_id=0).to_dict()
    return _saved(
        path, {"state_dict": {}, "global_step": 5, "hyper_parameters": {"model": options}}
    )


# (id, overrides built from tmp_path, text the one line must contain)
CASES = [
    ("pos_encoding", lambda t: ["model.pos_encoding=foo"], "model.pos_encoding='foo'"),
    ("norm_position", lambda t: ["model.norm_position=middle"], "expected one of: pre, post"),
    ("norm_type", lambda t: ["model.norm_type=batchnorm"], "model.norm_type"),
    ("heads_divide", lambda t: ["model.n_heads=3"], "model.n_heads=3"),
    ("d_k", lambda t: ["model.d_k=0"], "model.d_k"),
    ("dropout", lambda t: ["model.dropout=-0.1"], "model.dropout=-0.1"),
    ("unknown_key", lambda t: ["model.fooo=1"], "model.fooo"),
    ("scheduler", lambda t: ["scheduler=nope"], "scheduler='nope' is not valid; expected one of"),
    ("warmup", lambda t: ["scheduler.warmup_steps=-1"], "scheduler.warmup_steps"),
    ("lr_type", lambda t: ["scheduler.peak_lr=abc"], "scheduler.peak_lr"),
    ("label_smoothing", lambda t: ["loss.label_smoothing=1.5"], "loss.label_smoothing"),
    ("data_group", lambda t: ["data=nope"], "data='nope'"),
    ("trainer_group", lambda t: ["trainer=nope"], "trainer='nope'"),
    ("max_steps", lambda t: ["trainer.max_steps=abc"], "trainer.max_steps"),
    ("batch_size", lambda t: ["data.batch_size=0"], "data.batch_size"),
    (
        "learned_too_short",
        lambda t: ["model.pos_encoding=learned", "model.max_len=4"],
        "model.max_len=4",
    ),
    ("resume_path", lambda t: [f"resume={t / 'nope.ckpt'}"], "resume="),
    (
        "resume_not_a_checkpoint",
        lambda t: [f"resume={write(t / 'notes.ckpt', 'hello')}"],
        "notes.ckpt cannot be read (",
    ),
    (
        "resume_pickled_code",
        lambda t: [f"resume={_saved(t / 'code.ckpt', {'f': print})}"],
        "code.ckpt cannot be read safely: it holds objects other than tensors",
    ),
    (
        "resume_not_lightning",
        lambda t: [f"resume={_saved(t / 'weights.ckpt', {'w': 1})}"],
        "is not a Lightning training checkpoint",
    ),
    (
        "resume_not_attnlab",
        lambda t: [f"resume={_saved(t / 'other.ckpt', {'state_dict': {}, 'global_step': 3})}"],
        "is not an attnlab checkpoint",
    ),
    (
        "resume_other_architecture",
        lambda t: [
            f"resume={_checkpoint(t / 'deep.ckpt', n_encoder_layers=6, n_decoder_layers=6)}"
        ],
        "is a checkpoint of another architecture: model.n_encoder_layers=6 there, 2 here; "
        "model.n_decoder_layers=6 there, 2 here",
    ),
    (
        "resume_unquoted_equals",
        lambda t: [f"resume={t / 'best-step=600.ckpt'}"],
        "quote a value that holds '='",
    ),
    ("keep_last", lambda t: ["checkpoint.keep_last=0"], "checkpoint.keep_last"),
    ("ckpt_steps", lambda t: ["checkpoint.every_n_steps=-5"], "checkpoint.every_n_steps"),
    ("missing_file", lambda t: parallel(t, train_src=t / "missing.en"), "missing.en"),
    ("empty_file", lambda t: parallel(t, val_tgt=write(t / "empty.de", "")), "empty.de"),
    (
        "line_counts",
        lambda t: parallel(t, train_tgt=write(t / "short.de", "x\ny\n")),
        "short.de",
    ),
    (
        "not_utf8",
        lambda t: parallel(t, test_src=write(t / "latin1.en", "caf\xe9\n".encode("latin-1"))),
        "latin1.en: not UTF-8",
    ),
    (
        "corrupt_gzip",
        lambda t: parallel(
            t, train_src=write(t / "bad.en.gz", gzip.compress(b"a b\nc d\ne f\n")[:-6])
        ),
        "bad.en.gz: not a valid gzip file",
    ),
    (
        "lm_missing_file",
        lambda t: ["model=lm_small", "data=lm_text", f"data.path={t / 'corpus.txt'}"],
        "corpus.txt",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, overrides, expected):
    argv = [*overrides(tmp_path), f"paths.root={tmp_path / 'out'}"]
    with pytest.raises(SystemExit) as info:
        preflight(argv, CONF_DIR)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert err.startswith("attnlab-train: error: ") and expected in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_broken_data_leaves_an_existing_run_untouched(tmp_path_factory, monkeypatch, capsys):
    """Same command, same run directory: after its data file breaks, the rerun stops at the
    preflight and writes nothing into the directory of the earlier run (nor anywhere else). The
    first run is attnlab-train's entry point in a fresh interpreter (cli_run_cache.single_runs:
    its second command line, cli_run_cache.parallel_text_run); the rerun is the same command
    through the same function, attnlab.cli.train.main, in this process."""
    from attnlab.cli import train as cli

    folder, ran = single_runs(tmp_path_factory)  # this test alone reads folder/parallel
    first = ran["runs"][1]
    assert first["code"] == 0, ran["out"][-2000:]
    (run_dir,) = (folder / "parallel" / "out" / "default").iterdir()
    assert (run_dir / "results.json").is_file()

    def files() -> dict:
        return {
            p: (p.stat().st_mtime_ns, p.read_bytes())
            for sub in ("parallel", "cache")
            for p in (folder / sub).rglob("*")
            if p.is_file()
        }

    src = folder / "parallel" / "train.en.gz"
    write(src, gzip.compress(b"a b c\n")[:-4])  # truncated gzip
    before = files()
    monkeypatch.setenv("ATTNLAB_CACHE", str(folder / "cache"))
    monkeypatch.setattr(sys, "argv", ["attnlab-train", *parallel_text_run(folder)])
    with pytest.raises(SystemExit) as again:
        cli.main()
    assert again.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(src) in err
    assert "Traceback" not in err
    assert files() == before


@pytest.mark.slow
def test_a_checkpoint_of_this_architecture_passes_the_resume_check(tmp_path):
    """The check names what differs; a checkpoint of the same model (other dropout and all)
    is not refused."""
    from attnlab.config.compose import compose_config

    ckpt = _checkpoint(tmp_path / "same.ckpt", dropout=0.3)
    dry_build(compose_config(CONF_DIR, [f"resume={ckpt}"]))
