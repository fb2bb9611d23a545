"""Length extrapolation: checkpoints are selected in distribution (data.val_len), each length of
data.eval_lengths is scored one by one into results.json's "extrapolation" (synthetic tasks for
both architectures, language models per context length), attnlab-eval gives the same numbers on
the same weights, and a length learned positions cannot represent is null with the reason."""

from __future__ import annotations

import json
import math

import pytest
from hydra.utils import instantiate

from attnlab.cli.eval import main as eval_main
from attnlab.config.plain import to_plain
from attnlab.data.vocab import PAD_ID
from attnlab.pipeline.train import train
from build_utils import dry_build
from conftest import DATA_DIR, wandb_offline_bytes


def _datamodule(cfg):
    return instantiate(to_plain(cfg.data))


@pytest.mark.slow
def test_length_extrapolation_selects_in_distribution_and_scores_each_length(compose):
    """Before: validation and test both used eval_len 13-24 (selection on the extrapolation
    range, one averaged number). Now validation is in distribution and the lengths are separate."""
    cfg = compose(["experiment=length_extrapolation"])
    dry_build(cfg)
    data = cfg.data
    assert list(data.val_len) == list(data.train_len) == [1, 12]
    assert {8, 12, 16, 24, 32, 48} <= set(data.eval_lengths)
    assert max(data.eval_lengths) >= 4 * data.train_len[1]
    dm = _datamodule(cfg)
    dm.setup()
    val_lengths = {int(n) - 1 for b in dm.val_dataloader() for n in b["src"].ne(PAD_ID).sum(1)}
    assert max(val_lengths) <= 12 and len(val_lengths) > 6  # the training range, spread over it
    assert cfg.callbacks.length_extrapolation._target_.endswith("LengthExtrapolation")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["small", "lm_small"])
def test_length_batches_are_exactly_that_long(compose, model):
    dm = _datamodule(compose([f"model={model}", "data=copy"]))
    for length in (3, 20):
        (batch,) = dm.length_batches(length, n_examples=16)
        if model == "small":
            assert batch["src"].ne(PAD_ID).sum(1).tolist() == [length + 1] * 16  # x [EOS]
        else:
            assert batch["prompt_len"].tolist() == [length + 2] * 16  # [BOS] x [SEP]
        again = dm.length_batches(length, n_examples=16)[0]
        assert all(batch[k].equal(again[k]) for k in batch)  # fixed examples


def _run(compose, tiny_run, tmp_path, *overrides):
    run_dir = tmp_path / "run"
    ovs = [*tiny_run, "data=copy", f"paths.run_dir={run_dir}", *overrides]
    ovs += ["data.eval_lengths=[3,6]", "callbacks.length_extrapolation.n_examples=32"]
    return train(compose(ovs), ovs), run_dir


@pytest.mark.slow
@pytest.mark.parametrize("model", ["small", "lm_small"])
def test_results_json_carries_the_curve_and_attnlab_eval_agrees(
    compose, tiny_run, tmp_path, capsys, monkeypatch, model
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    results, run_dir = _run(compose, tiny_run, tmp_path, f"model={model}", "logger=wandb")
    curve = results["extrapolation"]
    assert set(curve) == {"3", "6"}
    for entry in curve.values():
        assert set(entry) == {
            "greedy_exact_match", "greedy_token_acc", "teacher_forced_token_acc", "nll"
        }  # fmt: skip
        for name in ("greedy_exact_match", "greedy_token_acc", "teacher_forced_token_acc"):
            assert 0 <= entry[name] <= 1
        assert entry["greedy_exact_match"] <= entry["greedy_token_acc"] or entry[
            "greedy_token_acc"
        ] == pytest.approx(1.0)  # a whole answer right has every token right
        assert 0 < entry["nll"] < math.inf
    assert json.loads((run_dir / "results.json").read_text())["extrapolation"] == curve
    logged = wandb_offline_bytes(run_dir, b"extrapolation/greedy_exact_match_vs_length")
    assert b"extrapolation/table" in logged
    assert b"extrapolation/teacher_forced_token_acc_vs_length" in logged

    best = next((run_dir / "checkpoints").glob("best-step=*.ckpt"))  # the weights tested
    capsys.readouterr()
    eval_main([f"ckpt={best}", "eval.lengths=[6,3]", "eval.n_examples=32"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == [
        "length", "greedy_exact_match", "greedy_token_acc", "teacher_forced_token_acc", "nll",
        "note",
    ]  # fmt: skip
    record = json.loads((run_dir / "eval" / f"lengths-{best.stem}.json").read_text())
    for length in ("3", "6"):
        for metric, value in curve[length].items():
            assert record["extrapolation"][length][metric] == pytest.approx(value, rel=1e-5)


@pytest.mark.slow
def test_a_length_learned_positions_cannot_represent_is_null_with_the_reason(
    compose, tiny_run, tmp_path
):
    results, _ = _run(
        compose, tiny_run, tmp_path, "logger=none", "model.pos_encoding=learned", "model.max_len=7"
    )  # length 5 needs 7 positions (tgt_in [BOS] y and one decoding step past it), 6 needs 8
    assert results["status"] == "completed"
    assert results["extrapolation"]["3"]["greedy_exact_match"] is not None
    six = results["extrapolation"]["6"]
    assert six["greedy_exact_match"] is None and six["nll"] is None
    assert "learned positions: length 6 needs 8 positions, model.max_len=7" == six["reason"]


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.skipif(
    not (DATA_DIR / "tinyshakespeare").is_dir(), reason="../shared/data/tinyshakespeare absent"
)
@pytest.mark.parametrize("pos_encoding", ["rope", "learned"])
def test_language_model_perplexity_per_context_length(compose, tmp_path, pos_encoding):
    run_dir = tmp_path / "run"
    ovs = [
        "experiment=tinyshakespeare",
        f"data.root={DATA_DIR / 'tinyshakespeare'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.block_size=32",
        "data.batch_size=4",
        "data.eval_lengths=[16,32,64]",
        f"model.pos_encoding={pos_encoding}",
        "model.max_len=32",
        "model.d_model=32",
        "model.d_ff=64",
        "model.n_decoder_layers=1",
        "trainer.max_steps=3",
        "trainer.limit_val_batches=2",
        "trainer.limit_test_batches=2",
        "trainer.enable_progress_bar=false",
        "logger=none",
        f"paths.run_dir={run_dir}",
    ]
    curve = train(compose(ovs), ovs)["extrapolation"]
    for length in ("16", "32"):
        assert set(curve[length]) == {"perplexity", "nll", "teacher_forced_token_acc"}
        assert curve[length]["perplexity"] == pytest.approx(math.exp(curve[length]["nll"]))
        assert 1 < curve[length]["perplexity"] < 200
    if pos_encoding == "learned":
        assert curve["64"]["perplexity"] is None and "model.max_len=32" in curve["64"]["reason"]
    else:
        assert 1 < curve["64"]["perplexity"] < 200  # RoPE reads any length


@pytest.mark.slow
def test_eval_of_the_default_tasks_checkpoint_needs_no_lengths(compose, tiny_run, tmp_path, capsys):
    """README's `attnlab-eval ckpt=.../last.ckpt` on the default task's run (reverse, no
    data.eval_lengths) scores every length the run trained on, and names its file by the
    checkpoint; it used to stop with `eval.lengths=[...] is required`."""
    from attnlab.pipeline.train import train

    overrides = [*tiny_run, "logger=none", f"paths.run_dir={tmp_path / 'run'}"]
    train(compose(overrides), overrides)
    capsys.readouterr()
    eval_main([f"ckpt={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}", "eval.n_examples=8"])
    record = json.loads((tmp_path / "run" / "eval" / "lengths-last.json").read_text())
    assert record["lengths"] == [1, 2, 3, 4, 5]  # debug=tiny's data.train_len: [1, 5]
    assert set(record["extrapolation"]) == {"1", "2", "3", "4", "5"}
