"""One training run of a composed config: resume or start, build, fit, test, record.

`train(cfg, overrides)` is a sequence of named steps, each below; attnlab-train
(attnlab.cli.train) calls it once per job, and the tests call it in-process. The run directory
and results.json are described in docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import warnings
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from attnlab.config.plain import plain_config
from attnlab.pipeline.build import Built, attach, build
from attnlab.runs.checkpoints import find_resume_checkpoint, has_step, link_same_steps
from attnlab.runs.console import say
from attnlab.runs.dotted import flatten
from attnlab.runs.guard import RunState, deferred_interrupts, run_guard
from attnlab.runs.identity import RunConfigChanged, config_drift
from attnlab.runs.record import RunRecord, ablation_config, run_name
from attnlab.runs.startup import resume_collector
from attnlab.runs.status import Status
from attnlab.runs.wandb import finish_wandb, wandb_id
from attnlab.training.compat import as_today

# Lightning 2.6 on torch 2.13 warns on every run about its own use of a torch internal.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")


def train(cfg: DictConfig, overrides: list[str] | None = None) -> dict:
    """Fit, test and record one run of the composed config `cfg`; return results.json's content.

    `overrides` are the command-line overrides (for the run name and the record). The run is
    built first (attnlab.pipeline.build: building is the check), so a refused config raises
    ConfigRefused with nothing written; on a later exception the record says "failed" (or
    "interrupted") and the exception propagates.
    """
    overrides = list(overrides or [])
    plain = plain_config(cfg)
    run_dir = Path(plain["paths"]["run_dir"])
    previous = RunRecord.read(run_dir)
    if _already_completed(cfg, plain, run_dir, previous):
        return previous
    with _torch_threads(plain["torch_threads"]):
        built = build(plain, run_dir)
        ckpt_path = _resume_checkpoint(plain, run_dir, previous)
        state = _start_record(cfg, run_dir, overrides, previous, ckpt_path)
        with run_guard(state):
            attach(built, plain, run_dir, run_name_of(plain, overrides))
            state.loggers, state.trainer = built.loggers, built.trainer
            if rank_zero_only.rank == 0 and hasattr(built.datamodule, "save_tokenizer"):
                built.datamodule.save_tokenizer(run_dir)  # tokenizer.model decodes checkpoints
            _log_config(plain, built, state)
            resume_collector()  # if attnlab-train paused it: the start-up's objects frozen first
            try:
                built.trainer.fit(
                    built.module,
                    datamodule=built.datamodule,
                    ckpt_path=str(ckpt_path) if ckpt_path else None,
                    weights_only=True,
                )
            except SystemExit:
                # A second Ctrl-C: Lightning stops at once and calls exit(1); the run is
                # interrupted all the same (exit 4, with its closing line), not failed.
                if not built.trainer.interrupted:
                    raise
            status = _final_status(built)
            # a resumed attempt keeps what the earlier ones logged, updated by its own values
            metrics = {**_carried(previous, ckpt_path), **_scalars(built.trainer.callback_metrics)}
            if status in (Status.COMPLETED, Status.PRUNED):
                _one_file_per_step(built.trainer, run_dir / "checkpoints")
            if status in (Status.COMPLETED, Status.DEBUG):
                status = _test_into(built, metrics, status)
            return _finish(state, built, status, metrics)


# --- resumption ------------------------------------------------------------------------------


def _already_completed(cfg: DictConfig, plain: dict, run_dir: Path, previous: dict | None) -> bool:
    """resume=auto and the run directory holds this config, completed: nothing to train."""
    if str(plain.get("resume", "auto")) != "auto" or previous is None:
        return False
    refuse_changed_config(run_dir, cfg, plain)
    if previous.get("status") != Status.COMPLETED:
        return False
    say(
        f"already completed: {run_dir / 'results.json'}; nothing ran, so no logger or callback "
        "of this command (logger=tensorboard, say) wrote anything: resume=never trains it again "
        "in a new directory"
    )
    return True


def _resume_checkpoint(plain: dict, run_dir: Path, previous: dict | None) -> Path | None:
    """resume=auto: the run's newest checkpoint that loads; resume=<path>: that file."""
    resume = str(plain.get("resume", "auto"))
    path = None
    if resume == "auto" and previous is not None:
        path = find_resume_checkpoint(run_dir, say=say)
    elif resume not in ("auto", "never"):
        path = Path(resume)  # checked by the build (attnlab.pipeline.build)
    if path is not None:
        say(f"resuming from {path}")
    return path


def refuse_changed_config(run_dir: Path, cfg: DictConfig, plain: dict, shown: int = 3) -> None:
    """RunConfigChanged (nothing written) when `run_dir`'s config.yaml differs from `cfg` (as
    `plain`) in a key that defines the run: a preset or a default edited since the run was made.
    `cfg` tells which values are its schema's defaults."""
    stored_path = run_dir / "config.yaml"
    if not stored_path.is_file():
        return
    stored = as_today(OmegaConf.to_container(OmegaConf.load(stored_path)))  # an older run's
    drift = config_drift(stored, plain, lambda key, value: _is_default(cfg, key, value))
    if drift:
        more = f" and {len(drift) - shown} more" if len(drift) > shown else ""
        raise RunConfigChanged(
            f"{run_dir} was trained with a different config ({'; '.join(drift[:shown])}{more}), "
            "probably an edited preset or default; add resume=never to train this config in a "
            "new directory"
        )


def _is_default(cfg: DictConfig, key: str, value) -> bool:
    """Is `value` the schema's default for the dotted `key` of `cfg` (a field of a structured
    config node, e.g. model.qk_norm -> TransformerConfig's qk_norm)?"""
    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    schema = OmegaConf.get_type(node) if OmegaConf.is_dict(node) else None
    if not dataclasses.is_dataclass(schema):
        return False
    field = {f.name: f for f in dataclasses.fields(schema)}.get(name)
    if field is None:
        return False
    if field.default_factory is not dataclasses.MISSING:  # e.g. model.pos: {} (no options)
        return field.default_factory() == value
    if field.default is dataclasses.MISSING:
        return False
    return getattr(field.default, "value", field.default) == value


def _start_record(
    cfg: DictConfig, run_dir: Path, overrides: list[str], previous: dict | None, ckpt_path
) -> RunState:
    """Write config.yaml and a "running" results.json (rank zero); the guard's state."""
    is_rank_zero = rank_zero_only.rank == 0
    if is_rank_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    record = RunRecord(
        run_dir,
        name=cfg.name,
        seed=cfg.seed,
        overrides=overrides,
        config=ablation_config(cfg, overrides),
    )
    if is_rank_zero:
        record.write(Status.RUNNING)
    prior = previous.get("wall_time_s", 0.0) if ckpt_path and previous else 0.0
    return RunState(record, is_rank_zero=is_rank_zero, prior_wall_time=prior)


def run_name_of(plain: dict, overrides: list[str]) -> str:
    """run_name, else one derived from the overrides (pe=rope-norm=pre-s=1)."""
    return plain.get("run_name") or run_name(overrides, default=plain["name"])


@contextmanager
def _torch_threads(n: int | None):
    """torch.set_num_threads(n) for the block (n None: leave torch's default)."""
    before = torch.get_num_threads()
    try:
        if n:
            torch.set_num_threads(n)
        yield
    finally:
        torch.set_num_threads(before)


# --- building --------------------------------------------------------------------------------


def _log_config(plain: dict, built: Built, state: RunState) -> None:
    """The whole config (dotted keys) and the parameter count to every logger, with
    scheduler.peak_lr the peak the schedule really takes (noam's formula's where it is null);
    the W&B run id and that peak into the record."""
    flat_config = flatten(plain)
    flat_config["model.num_parameters"] = sum(p.numel() for p in built.module.parameters())
    peak_lr = built.module.peak_lr() if hasattr(built.module, "peak_lr") else None
    flat_config["scheduler.peak_lr"] = peak_lr
    for logger in built.loggers:
        logger.log_hyperparams(flat_config)
    if state.is_rank_zero:
        state.record.write(wandb_run_id=wandb_id(built.loggers), peak_lr=peak_lr)


# --- ending ----------------------------------------------------------------------------------


def _final_status(built: Built) -> str:
    if built.trainer.interrupted or built.preemption.interrupted:
        return Status.INTERRUPTED
    if getattr(built.module, "diverged", False):  # (a module of one's own may not say)
        return Status.DIVERGED
    if any(getattr(c, "pruned", False) for c in built.trainer.callbacks):
        return Status.PRUNED  # a search's pruner (training/pruning.py), a study's stall rule
    return Status.DEBUG if built.trainer.fast_dev_run else Status.COMPLETED


def _one_file_per_step(trainer: L.Trainer, ckpt_dir: Path) -> None:
    """The final state in a file of its own if no checkpoint holds it; then same-step copies
    become links and last.ckpt a link to the final step's file (runs/checkpoints.py)."""
    if not trainer.checkpoint_callbacks or not ckpt_dir.is_dir():
        return
    if not has_step(ckpt_dir, trainer.global_step):
        trainer.save_checkpoint(ckpt_dir / f"step={trainer.global_step}.ckpt")
    if trainer.is_global_zero:
        link_same_steps(ckpt_dir)


def _carried(previous: dict | None, ckpt_path) -> dict[str, float]:
    """The metrics an earlier attempt of this run recorded, where this attempt resumes it: a
    value this attempt does not log again (a run interrupted in its test pass resumes at its
    last step and validates nothing) stays as that attempt left it."""
    if not ckpt_path or not previous:
        return {}
    return dict(previous.get("metrics") or {})


def _test_into(built: Built, metrics: dict[str, float], status: str) -> str:
    """The test pass's metrics into `metrics`; "interrupted" if Ctrl-C stops it (Lightning
    then calls exit(1)): the training's metrics are recorded all the same, and the
    same command tests again from the last checkpoint."""
    try:
        metrics.update(_test(built))
    except SystemExit:
        if not built.trainer.interrupted:
            raise
        return Status.INTERRUPTED
    return status


def _test(built: Built) -> dict[str, float]:
    """Test the best checkpoint (the last weights without one); {} without a test split."""
    if not _has_test_split(built.datamodule):
        say("the data has no test split (data.test_src / test_tgt); not testing")
        return {}
    checkpoint = built.trainer.checkpoint_callback
    # The path, not "best": with the periodic ModelCheckpoints beside the selecting one, "best"
    # makes Lightning warn that it picks the first callback's (which is the selecting one).
    best = checkpoint.best_model_path if checkpoint is not None else None
    best = best or None
    built.trainer.test(
        built.module, datamodule=built.datamodule, ckpt_path=best, weights_only=False
    )
    return _scalars(built.trainer.callback_metrics)


def _has_test_split(datamodule) -> bool:
    """False for parallel text configured without test files (they are optional)."""
    try:
        getattr(datamodule, "split_files", lambda split: None)("test")
    except ValueError:
        return False
    return True


def _finish(state: RunState, built: Built, status: str, metrics: dict[str, float]) -> dict:
    """results.json with the final status and metrics; W&B summary; one line of output. A
    Ctrl-C or SIGTERM while the record is gathered is deferred: the record is written whole,
    every metric in it, as "interrupted" (the same command then finishes the run)."""
    with deferred_interrupts() as caught:
        results = {"metrics": metrics, "steps": built.trainer.global_step}
        for callback in built.trainer.callbacks:  # e.g. "extrapolation" (extrapolation.py)
            results.update(getattr(callback, "results_record", dict)())
        results["wall_time_s"] = state.wall_time()
        if getattr(built.module, "nll_init", None) is not None:
            results["nll_init"] = float(built.module.nll_init)
        if status == Status.DIVERGED:
            results["diverged_step"] = built.module.diverged_step
        if caught and status in (Status.COMPLETED, Status.PRUNED, Status.DEBUG):
            status = Status.INTERRUPTED
        if state.is_rank_zero:
            results = state.record.write(status, **results)
            finish_wandb(built.loggers, results)
            for logger in built.loggers:  # TensorBoard's HParams tab: the headline metrics
                if hasattr(logger, "record_hparams"):
                    logger.record_hparams(
                        {k: v for k, v in metrics.items() if k.startswith(HPARAMS)},
                        _hparams_keys(state.record.data.get("config") or {}),
                    )
    if state.is_rank_zero:
        say(f"{status}: {_summary(metrics)}; results in {state.record.path}")
        if status == Status.INTERRUPTED:
            say(
                f"stopped at step {built.trainer.global_step}; the same command resumes it from "
                "its newest checkpoint (resume=auto)"
            )
    return results


HPARAMS = ("val/", "test/")  # the metrics TensorBoard's HParams tab compares runs by
# Keys of the record's config that place or name a run or choose its logger: not compared there.
NOT_HPARAMS = ("paths", "logger", "hydra", "name", "group", "tags", "run_name", "trainer.enable_")


def _hparams_keys(config: dict) -> dict:
    """The HParams tab's keys: the ablation keys and the keys the command set (results.json's
    "config"), without those that place or name the run."""
    return {k: v for k, v in config.items() if not k.startswith(NOT_HPARAMS)}


def _scalars(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def _summary(metrics: dict[str, float]) -> str:
    keys = ("test/bleu", "test/exact_match", "test/loss", "test/perplexity", "val/nll_best")
    return ", ".join(f"{k}={metrics[k]:.4g}" for k in keys if k in metrics) or "no metrics"
