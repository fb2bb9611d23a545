"""Translation end to end on slices of Multi30K: attnlab-train with data=parallel_text and
callbacks=translation logs BLEU and keeps its tokenizer; attnlab-eval scores its checkpoints
(one, averaged, a directory), in-process and as a command, and rejects bad input in one line."""

import gzip
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

import forked
from attnlab.cli.eval import main
from attnlab.config.compose import compose_config
from attnlab.data.text import read_lines
from attnlab.data.tokenizer import Tokenizer
from attnlab.pipeline.train import train

REPO = Path(__file__).resolve().parents[1]
MULTI30K = Path(__file__).parents[2] / "shared" / "data" / "multi30k"
pytestmark = [
    pytest.mark.data,
    pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"{MULTI30K} absent (shared test data)"),
]
N_TRAIN, N_EVAL = 300, 40
# short outputs (at most half the source + 8 tokens) keep beam search fast while the model is
# untrained (it repeats a piece until the limit)
MAX_LEN_A, MAX_LEN_B = 0.5, 8


def _slice(split: str, lang: str, n: int, dest: Path) -> Path:
    lines = read_lines(MULTI30K / f"{split}.{lang}.gz")[:n]
    dest.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return dest


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """A tiny encoder-decoder trained for 6 steps on 300 pairs (val / test: 40 pairs each)."""
    return _train(tmp_path_factory.mktemp("translation"), [])


def _train(root: Path, extra: list[str]) -> dict:
    files = {}
    for split, name, n in (("train", "train", N_TRAIN), ("val", "val", N_EVAL)):
        for side, lang in (("src", "en"), ("tgt", "de")):
            files[f"{split}_{side}"] = _slice(name, lang, n, root / f"{split}.{lang}")
    for side, lang in (("src", "en"), ("tgt", "de")):
        files[f"test_{side}"] = _slice("test_2016_flickr", lang, N_EVAL, root / f"test.{lang}")
    run_dir = root / "run"
    overrides = [
        "data=parallel_text",
        *(f"data.{key}={path}" for key, path in files.items()),
        "data.vocab_size=300",
        "data.max_tokens=600",
        f"data.cache_dir={root / 'cache'}",
        "model.d_model=32",
        "model.n_heads=2",
        "model.d_ff=64",
        "model.n_encoder_layers=1",
        "model.n_decoder_layers=1",
        "callbacks=translation",
        f"callbacks.translation_quality.max_len_a={MAX_LEN_A}",
        f"callbacks.translation_quality.max_len_b={MAX_LEN_B}",
        "callbacks.translation_quality.val_subset=10",
        "scheduler.warmup_steps=2",
        "trainer.max_steps=6",
        "trainer.val_check_interval=3",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "checkpoint.every_n_steps=3",
        "checkpoint.every_minutes=null",
        "logger=none",
        f"paths.run_dir={run_dir}",
        *extra,
    ]
    results = train(compose_config(REPO / "conf", overrides), overrides)
    return {"results": results, "run_dir": run_dir, "files": files, "root": root}


def _eval(argv: list[str], capsys) -> tuple[dict, list[str], str]:
    main(argv)
    out = capsys.readouterr().out
    json_path = Path(out.split("results: ")[1].splitlines()[0])
    results = json.loads(json_path.read_text())
    hyps = Path(results["hypotheses"]).read_text(encoding="utf-8").split("\n")
    assert hyps[-1] == ""  # one line per hypothesis, newline-terminated
    return results, hyps[:-1], out


@pytest.mark.slow
def test_translation_run_logs_bleu_and_keeps_its_tokenizer(run):
    results, run_dir = run["results"], run["run_dir"]
    assert results["status"] == "completed" and results["steps"] == 6
    metrics = results["metrics"]
    for key in ("val/bleu", "val/chrf", "val/bleu_best", "test/bleu", "test/chrf"):
        assert 0 <= metrics[key] <= 100, key
    assert metrics["test/chrf"] > 0  # something was decoded and scored
    assert metrics["val/bleu_best"] >= metrics["val/bleu"]
    assert not any("exact_match" in key for key in metrics)  # greedy exact match: synthetic only
    assert json.loads((run_dir / "results.json").read_text())["metrics"] == metrics
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"val/bleu", "test/bleu", "val/loss"} <= set(header)

    tokenizer = Tokenizer.from_file(run_dir / "tokenizer.model")
    assert tokenizer.vocab_size == 300
    line = read_lines(run["files"]["test_src"])[0]
    assert tokenizer.decode(tokenizer.encode(line)) == line


@pytest.mark.slow
def test_eval_reproduces_the_callback_and_writes_json_and_hypotheses(run, capsys, tmp_path):
    ckpts = run["run_dir"] / "checkpoints"
    best = next(ckpts.glob("best-step=*.ckpt"))  # what trainer.test scored
    results, hyps, out = _eval([f"ckpt={best}", f"out={tmp_path / 'test'}"], capsys)
    assert out.startswith("BLEU ") and "perplexity" in out and "40 sentences, beam 4" in out
    assert (tmp_path / "test.json").is_file() and (tmp_path / "test.hyp").is_file()
    assert results["n_sentences"] == len(hyps) == N_EVAL
    decode = results["decode"]  # the run's decoding settings
    assert (decode["max_len_a"], decode["max_len_b"]) == (MAX_LEN_A, MAX_LEN_B)
    assert results["source"] == str(run["files"]["test_src"].resolve())
    assert 1 < results["perplexity"] < 1000 and results["averaged"] is False
    train_metrics = run["results"]["metrics"]
    assert results["bleu"] == pytest.approx(train_metrics["test/bleu"], abs=0.01)
    assert results["chrf"] == pytest.approx(train_metrics["test/chrf"], abs=0.01)
    assert results["perplexity"] == pytest.approx(train_metrics["test/perplexity"], rel=1e-3)
    import sacrebleu  # chrF is sacreBLEU's chrF, chrF++ only under that name

    refs = read_lines(run["files"]["test_tgt"])
    assert results["chrf"] == round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)
    assert results["chrf++"] == round(sacrebleu.corpus_chrf(hyps, [refs], word_order=2).score, 2)
    assert results["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)


@pytest.mark.slow
def test_averaging_identical_checkpoints_changes_nothing(run, capsys, tmp_path):
    last = run["run_dir"] / "checkpoints" / "last.ckpt"
    copies_dir = run["run_dir"] / "copies"  # within the run: its tokenizer and config are found
    copies_dir.mkdir(exist_ok=True)
    copies = [shutil.copy(last, copies_dir / name) for name in ("a.ckpt", "b.ckpt")]
    one, hyps_one, _ = _eval([f"ckpt={last}", "split=val", f"out={tmp_path / 'one'}"], capsys)
    two, hyps_two, out = _eval(
        [f"ckpt=[{copies[0]},{copies[1]}]", "split=val", f"out={tmp_path / 'two'}"], capsys
    )
    assert "2 checkpoint(s)" in out and two["averaged"] is True
    assert hyps_two == hyps_one and len(hyps_one) == N_EVAL
    assert (two["bleu"], two["chrf"]) == (one["bleu"], one["chrf"])
    assert two["perplexity"] == pytest.approx(one["perplexity"], rel=1e-6)


@pytest.mark.slow
def test_a_checkpoints_directory_averages_its_periodic_checkpoints(run, capsys, tmp_path):
    ckpts = run["run_dir"] / "checkpoints"
    both, _, _ = _eval([f"ckpt={ckpts}", f"out={tmp_path / 'both'}"], capsys)
    assert [Path(p).name for p in both["checkpoints"]] == ["step=3.ckpt", "step=6.ckpt"]
    newest, _, _ = _eval([f"ckpt={ckpts}", "last=1", f"out={tmp_path / 'newest'}"], capsys)
    alone, _, _ = _eval([f"ckpt={ckpts / 'step=6.ckpt'}", f"out={tmp_path / 'alone'}"], capsys)
    assert newest["checkpoints"] == alone["checkpoints"]
    assert newest["perplexity"] == alone["perplexity"]
    # the mean of steps 3 and 6 is a different model from either
    assert both["perplexity"] != pytest.approx(alone["perplexity"], rel=1e-6)


@pytest.mark.slow
def test_eval_command_on_explicit_files(run, tmp_path):
    src = gzip.compress(run["files"]["val_src"].read_bytes())
    (tmp_path / "src.en.gz").write_bytes(src)  # gzip input is read too
    proc = forked.run(  # a process of its own (tests/forked.py)
        [
            sys.executable,
            "-m",
            "attnlab.cli.eval",
            f"ckpt={run['run_dir'] / 'checkpoints' / 'last.ckpt'}",
            f"src_file={tmp_path / 'src.en.gz'}",
            f"ref_file={run['files']['val_tgt']}",
            "decode.beam_size=1",
            f"out={tmp_path / 'greedy'}",
        ],
        timeout=120,
        # one thread, as this process (conftest): on a small shared CPU torch's threads spin
        env={**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "BLEU" in proc.stdout and "beam 1" in proc.stdout
    assert "decoding" in proc.stderr  # the progress bar
    results = json.loads((tmp_path / "greedy.json").read_text())
    hyps = (tmp_path / "greedy.hyp").read_text(encoding="utf-8").splitlines()
    assert results["n_sentences"] == len(hyps) == N_EVAL and results["decode"]["beam_size"] == 1


class NotWeights:
    """An object a weights-only load refuses (its unpickling would run this module's code)."""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ckpt=/nonexistent/x.ckpt"], "ckpt: file not found: /nonexistent/x.ckpt"),
        (["ckpt={last}", "src_file=a.en"], "src_file and ref_file go together"),
        (["split=val"], "ckpt=<checkpoint file, [list] or checkpoints directory> is required"),
        (["ckpt={last}", "beam=2"], "beam is not an option; expected one of: ckpt, last, split"),
        (
            ["ckpt={last}", "decode.beam=2"],
            "decode.beam is not an option (did you mean decode.beam_size?); expected one of: "
            "decode.beam_size, decode.length_penalty, decode.max_len_a, decode.max_len_b",
        ),
        (["ckpt={last}", "splt=val"], "splt is not an option (did you mean split?); expected"),
        (
            ["ckpt={last}", "split=dev"],
            "split='dev' is not valid; expected one of: train, val, test",
        ),
        (
            ["ckpt={last}", "decode.beam_size=0"],
            "decode.beam_size=0 is not valid; expected an integer >= 1",
        ),
        (["ckpt={bad}"], "ckpt: checkpoint {bad} cannot be read"),
        (["ckpt={text}"], "ckpt: checkpoint {text} cannot be read (IndexError"),
        (["ckpt={code}"], "ckpt: checkpoint {code} cannot be read safely: it holds objects other"),
    ],
)
def test_bad_input_exits_2_with_one_line(run, capsys, tmp_path, args, message):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    text = tmp_path / "notes.txt"
    text.write_text("a text file\nnot a checkpoint\n")
    code = tmp_path / "code.ckpt"  # a pickle whose loading would build arbitrary objects
    torch.save({"state_dict": NotWeights()}, code)
    names = {"last": run["run_dir"] / "checkpoints" / "last.ckpt", "bad": bad, "text": text}
    names["code"] = code
    with pytest.raises(SystemExit) as info:
        main([a.format(**names) for a in args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attnlab-eval: error: ")
    assert message.format(**names) in err
    assert "weights_only" not in err  # never torch's unsafe advice to retry without it


@pytest.mark.slow
def test_attention_command_on_a_sentence(run, tmp_path):
    """attnlab-attention on a translation checkpoint: the run's tokenizer, source + [EOS] as the
    encoder reads it, [BOS] + target as the decoder does."""
    import numpy as np

    from attnlab.cli.attention import main as attention_main

    ckpt = run["run_dir"] / "checkpoints" / "last.ckpt"
    source, target = "A man rides a bike.", "Ein Mann fährt Rad."
    assert attention_main([str(ckpt), source, "--target", target, "--out", str(tmp_path)]) == 0
    tokenizer = Tokenizer.from_file(run["run_dir"] / "tokenizer.model")
    s, t = len(tokenizer.encode(source)) + 1, len(tokenizer.encode(target)) + 1
    arrays = np.load(tmp_path / "attention.npz")
    assert arrays["encoder.layers.0.self_attn"].shape == (2, s, s)
    assert arrays["decoder.layers.0.cross_attn"].shape == (2, t, s)
    assert np.all(np.triu(arrays["decoder.layers.0.self_attn"], k=1) == 0.0)
    assert (tmp_path / "decoder.layers.0.cross_attn.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_two_evaluations_of_a_run_keep_two_sets_of_files(run, capsys):
    """Without out=, each evaluation is named by what it scored (split, checkpoint(s),
    decoding): the last checkpoint and the average of the periodic ones, beam and greedy, no
    longer overwrite one another's eval/<name>.json and .hyp."""
    ckpts = run["run_dir"] / "checkpoints"
    names = set()
    for argv in (
        [f"ckpt={ckpts / 'last.ckpt'}"],
        [f"ckpt={ckpts}"],  # the average of step=3 and step=6
        [f"ckpt={ckpts / 'last.ckpt'}", "decode.beam_size=1"],
    ):
        results, _, _ = _eval(argv, capsys)
        names.add(Path(results["json"]).name)
        assert Path(results["hypotheses"]).is_file()
    assert names == {
        "test-last-beam4_lp0.6.json",
        "test-avg2-step3-6-beam4_lp0.6.json",
        "test-last-greedy.json",
    }


@pytest.mark.slow
def test_a_decoder_only_model_translates_pairs_as_one_sequence(tmp_path, capsys):
    """Task and architecture are independent: model.arch=decoder_only on the same pairs reads
    [BOS] x [SEP] y [EOS] (attnlab.data.pairs), logs BLEU from beam search continuing the
    prompt, and attnlab-eval reproduces the run's test/bleu and test/perplexity."""
    lm = _train(tmp_path, ["model.arch=decoder_only"])
    metrics = lm["results"]["metrics"]
    assert lm["results"]["status"] == "completed" and metrics["test/chrf"] > 0
    ckpt = torch.load(lm["run_dir"] / "checkpoints" / "last.ckpt", weights_only=True)
    hparams = ckpt["hyper_parameters"]
    assert hparams["task"] == "lm" and hparams["model"]["arch"] == "decoder_only"
    assert hparams["model"]["vocab_size"] == 301  # the tokenizer's 300 and the separator
    best = next((lm["run_dir"] / "checkpoints").glob("best-step=*.ckpt"))
    results, hyps, _ = _eval([f"ckpt={best}", f"out={tmp_path / 'test'}"], capsys)
    assert results["n_sentences"] == len(hyps) == N_EVAL
    assert results["bleu"] == pytest.approx(metrics["test/bleu"], abs=0.01)
    assert results["chrf"] == pytest.approx(metrics["test/chrf"], abs=0.01)
    assert results["perplexity"] == pytest.approx(metrics["test/perplexity"], rel=1e-3)


@pytest.mark.slow
def test_an_interrupted_evaluation_exits_4_in_one_line_and_writes_nothing(run, capsys, tmp_path,
                                                                         monkeypatch):  # fmt: skip
    """Ctrl-C, or SIGTERM (raised as Ctrl-C), while attnlab-eval averages or decodes: exit 4,
    one line, no file; an earlier evaluation's files stand, and files are replaced whole."""
    import signal

    from attnlab.cli import eval as eval_cli
    from attnlab.runs.record import write_atomic

    def sigterm(cfg):
        os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler's preemption sends
        raise AssertionError("SIGTERM did not stop the evaluation")

    monkeypatch.setattr(eval_cli, "evaluate", sigterm)
    out = tmp_path / "eval" / "interrupted"
    with pytest.raises(SystemExit) as stopped:
        main([f"ckpt={run['run_dir'] / 'checkpoints' / 'last.ckpt'}", f"out={out}"])
    assert stopped.value.code == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted; nothing of this evaluation was written" in err[0]
    assert not (tmp_path / "eval").exists()
    assert signal.getsignal(signal.SIGTERM) is not sigterm  # the handler is put back
    earlier = tmp_path / "earlier.json"
    earlier.write_text("{}\n")
    write_atomic(earlier, '{"bleu": 1}\n')
    assert earlier.read_text() == '{"bleu": 1}\n' and not list(tmp_path.glob("*.tmp"))


@pytest.mark.slow
def test_a_studys_evaluate_block_runs_attnlab_eval_and_reads_the_primary_metric(run, capsys):
    """A study's `evaluate: {last: 2, beam_size: 2, length_penalty: 0.6}` on a completed
    stage-2 trial: attnlab-eval's averaged checkpoints and beam, written to
    <trial>/eval/<name>.json (compare's eval/<name>/<score>), the trial's metric read from it;
    a trial already evaluated is not evaluated again, one not completed never."""
    from types import SimpleNamespace

    from attnlab.analysis.runs import eval_metrics
    from attnlab.sweeps.evaluate import evaluate_trials, load_evaluate

    block = load_evaluate({"last": 2, "beam_size": 2, "length_penalty": 0.6}, "study.yaml")
    assert block.label == "test-avg2-beam2_lp0.6"
    calls = []

    def in_process(argv, log, env):  # attnlab-eval's main, as its own process would run it
        calls.append(argv)
        main(argv)
        return 0

    trial = SimpleNamespace(run_dir=run["run_dir"], label="arm-seed_1")
    done = SimpleNamespace(trial=trial, status="completed", metric=None)
    failed = SimpleNamespace(trial=SimpleNamespace(run_dir=None), status="failed", metric=None)
    metric = "eval/test-avg2-beam2_lp0.6/bleu"
    assert evaluate_trials(block, [done, failed], metric, parallel=1, call=in_process) == []
    written = json.loads((run["run_dir"] / "eval" / f"{block.label}.json").read_text())
    assert [Path(p).name for p in written["checkpoints"]] == ["step=3.ckpt", "step=6.ckpt"]
    assert written["decode"]["beam_size"] == 2 and done.metric == written["bleu"]
    assert eval_metrics(run["run_dir"])[metric] == written["bleu"]
    capsys.readouterr()
    done.metric = None
    assert evaluate_trials(block, [done], metric, parallel=1, call=in_process) == []
    assert len(calls) == 1 and done.metric == written["bleu"]  # read, not run again
