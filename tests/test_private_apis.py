"""attnlab leans on a few private attributes of Lightning, Hydra, torch, W&B and sacreBLEU. Each
use stays only where it buys something (named in the comment at the use and below), and this
test fails the day a library release renames one, instead of the harness silently losing what
it bought. (attnlab.runs.startup's garbage-collector pause and attnlab.runs.wandb's stand-in
module are measured and tested in tests/test_startup.py.)"""

from __future__ import annotations

import inspect

import pytest


def _has(obj, name: str) -> bool:
    """`name` is an attribute of obj (a module or a class), or one its __init__ sets."""
    if hasattr(obj, name):
        return True
    source = inspect.getsource(obj.__init__) if inspect.isclass(obj) else ""
    return f"self.{name}:" in source or f"self.{name} =" in source


@pytest.mark.parametrize(
    ("where", "owner", "name", "buys"),
    [
        ("training/module.py", "lightning.pytorch.trainer.connectors.logger_connector"
         ".logger_connector._LoggerConnector", "should_update_logs",
         "train/ metrics computed only on the steps that log them (a step costs what a plain "
         "loop's does: docs/benchmark.md)"),
        ("training/callbacks.py", "lightning.pytorch.loops.training_epoch_loop"
         "._TrainingEpochLoop", "_batches_that_stepped",
         "a resumed run logs each row at the step an uninterrupted run gives it"),
        ("training/callbacks.py", "lightning.pytorch.loops.training_epoch_loop"
         "._TrainingEpochLoop", "_should_check_val_fx",
         "the periodic checkpoint of a step is written after that step's validation"),
        ("training/callbacks.py", "lightning.pytorch.loops.fit_loop._FitLoop", "_data_fetcher",
         "the periodic checkpoint of a step is written after that step's validation"),
        ("training/module.py", "lightning.pytorch.trainer.trainer.Trainer", "_logger_connector",
         "train/ metrics computed only on the steps that log them"),
        ("runs/wandb.py", "wandb.sdk.lib.wbauth", "read_netrc_auth",
         "a W&B key in ~/.netrc counts as logged in (else the run would go offline)"),
        ("training/summary.py", "lightning.pytorch.utilities.model_summary.model_summary",
         "_format_summary_table", "the model summary without a column of zero FLOPs"),
        ("runs/lightning_loggers.py", "lightning.fabric.loggers.csv_logs._ExperimentWriter",
         "_check_log_dir_exists", "a resumed run appends to metrics.csv (Lightning deletes it)"),
        ("config/compose.py", "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
         "split_arguments", "every job of a -m sweep checked before any starts"),
        ("config/file_cache.py", "hydra._internal.config_repository.ConfigRepository",
         "load_config", "each config file parsed once per process (a compose ~1/5 faster)"),
        ("config/file_cache.py", "hydra._internal.config_repository.ConfigRepository",
         "_find_object_source", "each config file parsed once per process"),
        ("config/file_cache.py", "hydra.plugins.config_source.ConfigSource",
         "_normalize_file_name", "each config file parsed once per process"),
        ("pipeline/preflight.py", "hydra._internal.utils", "get_args_parser",
         "the preflight reads the command line as Hydra will"),
        ("training/translation_quality.py", "sacrebleu.metrics.chrf.CHRF",
         "_extract_corpus_statistics", "chrF summed over DDP ranks, equal to corpus_chrf"),
        ("training/translation_quality.py", "sacrebleu.metrics.chrf.CHRF",
         "_compute_score_from_stats", "chrF summed over DDP ranks, equal to corpus_chrf"),
        ("runs/optuna_link.py", "optuna.trial._frozen.FrozenTrial", "_trial_id",
         "a searched trial's run reports to the trial its sweep worker asked (Trial(study, id))"),
        ("runs/lightning_loggers.py", "torch.utils.tensorboard.writer.SummaryWriter",
         "_get_file_writer", "TensorBoard's HParams tab gets the run's metrics at its end"),
        ("sweeps/study.py", "optuna.study.Study", "_storage",
         "a retried trial keeps the successive-halving rungs its first attempt passed"),
        ("sweeps/study.py", "optuna.trial.Trial", "_trial_id",
         "a retried trial keeps the successive-halving rungs its first attempt passed"),
        ("sweeps/study.py", "optuna.pruners._successive_halving", "_completed_rung_key",
         "the rung attribute's name (study.RUNG_PREFIX) is Optuna's"),
    ],
    ids=lambda v: v if isinstance(v, str) and "/" in v and v.endswith(".py") else None,
)  # fmt: skip
def test_the_private_attribute_attnlab_uses_is_still_there(where, owner, name, buys):
    import importlib

    if owner.startswith("optuna."):
        pytest.importorskip("optuna", reason="the [optuna] extra is not installed")
    module_name, _, attr = owner.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError):
        obj = importlib.import_module(owner)  # the owner is a module
    assert _has(obj, name), f"{owner}.{name} is gone: {where} relied on it for {buys}"


def test_hydras_job_return_keeps_the_jobs_exception_privately():
    """runs/multirun.py reads JobReturn._return_value: the public return_value re-raises the
    job's exception, and the multirun summary needs it as a value (its status)."""
    from hydra.core.utils import JobReturn, JobStatus

    job = JobReturn(status=JobStatus.FAILED, _return_value=ValueError("x"))
    assert isinstance(job._return_value, ValueError)
    with pytest.raises(ValueError):
        _ = job.return_value
