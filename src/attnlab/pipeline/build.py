"""The objects of one run, built from its config as plain Python (attnlab.config.run): the
datamodule, the LightningModule, the loggers and the Trainer with its callbacks. Each is built
once; attnlab.pipeline.train runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightning as L
from hydra.utils import get_class, instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only

from attnlab.config.schema import HARNESS_MODEL_KEYS
from attnlab.data.resumable import make_resumable
from attnlab.model import Transformer, TransformerConfig
from attnlab.pipeline.console import PROG, say
from attnlab.runs import quiet
from attnlab.runs.loggers import build_loggers
from attnlab.tasks import task_named
from attnlab.training.callbacks import LoggingStep, Preemption, RNGState, periodic_checkpoints
from attnlab.training.environment import (
    apply_gpu_memory_share,
    cluster_plugins,
    warn_if_bf16_is_emulated,
)
from attnlab.training.module import TransformerModule
from attnlab.training.progress import progress_bar
from attnlab.training.pruning import sweep_pruning
from attnlab.training.short_runs import validation_interval, warmup_warning
from attnlab.training.summary import ParamsSummary


@dataclass
class Built:
    """The objects of one run."""

    datamodule: L.LightningDataModule
    module: L.LightningModule
    trainer: L.Trainer
    loggers: list
    preemption: Preemption


def build(cfg: dict, run_dir: Path, name: str) -> Built:
    """`cfg`: the run's config as plain Python (attnlab.config.run.run_config)."""
    L.seed_everything(cfg["seed"], workers=True)
    datamodule = build_datamodule(cfg["data"], run_dir)
    module = build_module(cfg, datamodule)
    loggers = build_loggers(cfg, run_dir, name)
    trainer, preemption = build_trainer(cfg, run_dir, loggers)
    return Built(datamodule, module, trainer, loggers, preemption)


def build_datamodule(data: dict, run_dir: Path | None) -> L.LightningDataModule:
    """The data group (plain) instantiated (resumable mid-epoch: attnlab.data.resumable); its
    tokenizer saved into the run."""
    datamodule = make_resumable(instantiate(data))  # a module of one's own too
    if rank_zero_only.rank == 0 and hasattr(datamodule, "save_tokenizer"):
        datamodule.save_tokenizer(run_dir)  # <run_dir>/tokenizer.model decodes checkpoints
    return datamodule


def build_module(cfg: dict, datamodule) -> L.LightningModule:
    """cfg.module's `_target_` (null: TransformerModule), given the built model (sized to the
    data's vocabulary, with its pad id), the data's task (attnlab.tasks), the optimizer and
    schedule partials (`_partial_` whether the config says so or not), the loss group's values
    and the data's special ids. Any LightningModule whose constructor takes these keywords will
    do (docs/training.md says what the run reads of it); TransformerModule stores them as plain
    values, so its checkpoints reload with weights_only."""
    options = {k: v for k, v in cfg["model"].items() if k not in HARNESS_MODEL_KEYS}
    model_config = TransformerConfig.from_options(
        options, vocab_size=datamodule.vocab_size, pad_id=datamodule.pad_id, prefix="model."
    )
    target = cfg["module"].get("_target_")
    module_class = get_class(target) if target else TransformerModule
    return module_class(
        model=Transformer(model_config),
        task=task_named(datamodule.task) if getattr(datamodule, "task", None) else None,
        optim=instantiate(cfg["optim"], _partial_=True, _convert_="all"),
        scheduler=instantiate(cfg["scheduler"], _partial_=True, _convert_="all"),
        label_smoothing=cfg["loss"]["label_smoothing"],
        z_loss=cfg["loss"]["z_loss"],
        loss_normalize=cfg["loss"]["normalize"],
        bos_id=datamodule.bos_id,
        eos_id=datamodule.eos_id,
        max_steps=cfg["trainer"]["max_steps"],
        exact_match=exact_match_enabled(cfg, datamodule),
        compile=bool(cfg["model"].get("compile", False)),
    )


def exact_match_enabled(cfg: dict, datamodule) -> bool:
    """cfg["exact_match"], where null means the data module's (class's) `exact_match` default:
    True for the synthetic tasks, where greedy-decoding every evaluation sequence is the
    measure; False (or absent) for text, where it is slow and near 0."""
    if cfg.get("exact_match") is not None:
        return bool(cfg["exact_match"])
    return getattr(datamodule, "exact_match", False) is True


def build_trainer(cfg: dict, run_dir: Path, loggers: list) -> tuple[L.Trainer, Preemption]:
    """lightning.Trainer from cfg["trainer"], with the configured callbacks, periodic
    checkpoints, preemption handling and RNG state in checkpoints."""
    callbacks = [instantiate(c) for c in cfg["callbacks"].values() if c]
    ckpt_dir = run_dir / "checkpoints"
    callbacks += periodic_checkpoints(ckpt_dir, **cfg["checkpoint"])
    preemption = Preemption(ckpt_dir)
    callbacks += [preemption, RNGState(), LoggingStep()]
    callbacks += sweep_pruning()  # a trial of a searched sweep (attnlab.sweeps.search)
    kwargs = dict(cfg["trainer"])
    callbacks += progress_bar(kwargs.get("enable_progress_bar", True))
    if kwargs.get("enable_model_summary", True):
        callbacks.append(ParamsSummary())  # Lightning's, without a FLOPs column of zeros
    quiet.install()  # Lightning's GPU/TPU census and litlogger tip (attnlab.runs.quiet)
    interval, why = validation_interval(
        kwargs.get("val_check_interval"), kwargs.get("max_steps"),
        kwargs.get("accumulate_grad_batches", 1),
    )  # fmt: skip
    kwargs["val_check_interval"] = interval
    for line in (why, warmup_warning(cfg["scheduler"], kwargs.get("max_steps"))):
        if line:
            say(line)
    trainer = L.Trainer(
        **kwargs,
        logger=loggers,
        callbacks=callbacks,
        # checkpoints come from a ModelCheckpoint in `callbacks` only (callbacks=none: none)
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        default_root_dir=str(run_dir),
        use_distributed_sampler=False,  # the data modules shard by rank themselves
        plugins=cluster_plugins(),
    )
    if trainer.fast_dev_run:
        trainer.loggers = loggers  # Lightning mutes loggers here; metrics.csv is always written
    if rank_zero_only.rank == 0:
        warn_if_bf16_is_emulated(trainer, PROG)
    apply_gpu_memory_share()  # attnlab-sweep --trials-per-gpu K: 1/K of each GPU's memory
    return trainer, preemption
