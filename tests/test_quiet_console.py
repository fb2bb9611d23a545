"""A run's console shows attnlab's lines, the progress bar and real warnings; its train.log holds
the run's log. Known-harmless lines are silenced at their source (attnlab.runs.quiet)."""

from __future__ import annotations

import logging

import pytest

from attnlab.runs import quiet
from cli_run_cache import single_runs

NOISE = (
    "GPU available",  # Lightning's accelerator census
    "TPU available",
    "litlogger",  # Lightning's advertisement
    "anonymous setting",  # W&B on Lightning's anonymous=None
    "multiple `ModelCheckpoint`",  # .test(ckpt_path="best") with periodic checkpoints
    "FLOPs",  # Lightning's summary column of zeros
    "Total Flops",
    "`weights_only` was not set",
    "model summary callbacks",
)


def test_the_filter_drops_only_the_known_harmless_lines():
    quiet.install()
    quiet.install()  # idempotent
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    assert logger.filters.count(quiet._FILTER) == 1
    make = logging.LogRecord
    gpu = make("x", logging.INFO, __file__, 1, "GPU available: False, used: False", None, None)
    real = make("x", logging.INFO, __file__, 1, "`Trainer.fit` stopped: `max_steps=6`", None, None)
    assert not quiet._FILTER.filter(gpu)
    assert quiet._FILTER.filter(real)


def test_the_resume_time_checkpoint_folder_warning_is_silenced_and_others_are_not():
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.install()
        warnings.warn("Checkpoint directory /r/checkpoints exists and is not empty.", stacklevel=1)
        warnings.warn("a real warning", stacklevel=1)
    assert [str(w.message) for w in caught] == ["a real warning"]


@pytest.mark.slow
def test_a_run_prints_no_known_noise_and_its_train_log_holds_its_log(tmp_path_factory):
    """A tiny run of 6 steps with its model summary, W&B offline and Python's default warnings
    shown (cli_run_cache.single_runs: `name=quiet`, the first command line of its interpreter;
    what the interpreter printed when it exited is checked too)."""
    folder, ran = single_runs(tmp_path_factory)
    run = ran["runs"][0]
    out = run["stdout"] + run["stderr"] + ran["exit_out"]
    assert ran["returncode"] == 0 and run["code"] == 0, ran["out"][-3000:]
    for noise in NOISE:
        assert noise not in out, f"{noise!r} on the console:\n{out}"
    assert "Trainable params" in out  # the summary itself stays
    assert "attnlab-train: completed:" in out
    (log,) = folder.glob("quiet/*/train.log")
    text = log.read_text()
    assert "[attnlab_train][INFO] - completed:" in text
    assert "Trainable params" in text and "`Trainer.fit` stopped" in text
