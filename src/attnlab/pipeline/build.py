"""The objects of one run, composed from its config: the datamodule, the LightningModule, the
loggers and the Trainer with its callbacks. Each is built once; attnlab.pipeline.train runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightning as L
from hydra.utils import get_class, instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from attnlab.config.plain import to_plain
from attnlab.config.schema import SYNTHETIC_SCHEMA, model_options
from attnlab.data.resumable import make_resumable
from attnlab.model.config import TransformerConfig
from attnlab.pipeline.console import PROG, say
from attnlab.runs import quiet
from attnlab.runs.loggers import build_loggers
from attnlab.training.callbacks import LoggingStep, Preemption, RNGState, periodic_checkpoints
from attnlab.training.environment import (
    apply_gpu_memory_share,
    cluster_plugins,
    warn_if_bf16_is_emulated,
)
from attnlab.training.module import TransformerModule
from attnlab.training.progress import progress_bar
from attnlab.training.short_runs import validation_interval, warmup_warning
from attnlab.training.summary import ParamsSummary


@dataclass
class Built:
    """The objects of one run."""

    datamodule: L.LightningDataModule
    module: TransformerModule
    trainer: L.Trainer
    loggers: list
    preemption: Preemption


def build(cfg: DictConfig, run_dir: Path, name: str) -> Built:
    L.seed_everything(cfg.seed, workers=True)
    datamodule = build_datamodule(cfg, run_dir)
    module = build_module(cfg, datamodule)
    loggers = build_loggers(cfg, run_dir, name)
    trainer, preemption = build_trainer(cfg, run_dir, loggers)
    return Built(datamodule, module, trainer, loggers, preemption)


def build_datamodule(cfg: DictConfig, run_dir: Path) -> L.LightningDataModule:
    """cfg.data instantiated (resumable mid-epoch: attnlab.data.resumable); its tokenizer
    saved into the run."""
    datamodule = make_resumable(instantiate(to_plain(cfg.data)))  # a module of one's own too
    if rank_zero_only.rank == 0 and hasattr(datamodule, "save_tokenizer"):
        datamodule.save_tokenizer(run_dir)  # <run_dir>/tokenizer.model decodes checkpoints
    return datamodule


def build_module(cfg: DictConfig, datamodule) -> TransformerModule:
    """cfg.module's `_target_` (null: TransformerModule) built for the data's task
    (attnlab.tasks), with the model sized to the data's vocabulary, the data's special ids and
    the optim, scheduler and loss groups."""
    model_config = TransformerConfig.from_options(
        model_options(cfg.model), vocab_size=datamodule.vocab_size, pad_id=datamodule.pad_id,
        prefix="model.",
    )  # fmt: skip
    target = cfg.module.get("_target_")
    module_class = get_class(target) if target else TransformerModule
    return module_class(  # plain Python arguments: checkpoints load with weights_only
        model=model_config.to_dict(),
        optim=to_plain(cfg.optim),
        scheduler=to_plain(cfg.scheduler),
        label_smoothing=cfg.loss.label_smoothing,
        z_loss=cfg.loss.z_loss,
        loss_normalize=to_plain(cfg.loss)["normalize"],
        bos_id=datamodule.bos_id,
        eos_id=datamodule.eos_id,
        max_steps=cfg.trainer.max_steps,
        exact_match=exact_match_enabled(cfg),
        compile=bool(cfg.model.get("compile", False)),
        task=datamodule.task,
    )


def exact_match_enabled(cfg: DictConfig) -> bool:
    """cfg.exact_match, where null means: for synthetic data only. (Greedy-decoding every
    evaluation sentence is the measure for the synthetic tasks; for text it is slow and near 0.)"""
    if cfg.get("exact_match") is not None:
        return bool(cfg.exact_match)
    return OmegaConf.get_type(cfg.data) is SYNTHETIC_SCHEMA


def build_trainer(cfg: DictConfig, run_dir: Path, loggers: list) -> tuple[L.Trainer, Preemption]:
    """lightning.Trainer from cfg.trainer, with the configured callbacks, periodic
    checkpoints, preemption handling and RNG state in checkpoints."""
    callbacks = [instantiate(c) for c in to_plain(cfg.callbacks).values() if c]
    ckpt_dir = run_dir / "checkpoints"
    callbacks += periodic_checkpoints(ckpt_dir, **to_plain(cfg.checkpoint))
    preemption = Preemption(ckpt_dir)
    callbacks += [preemption, RNGState(), LoggingStep()]
    callbacks += progress_bar(cfg.trainer.enable_progress_bar)
    kwargs = to_plain(cfg.trainer)
    if kwargs.get("enable_model_summary", True):
        callbacks.append(ParamsSummary())  # Lightning's, without a FLOPs column of zeros
    quiet.install()  # Lightning's GPU/TPU census and litlogger tip (attnlab.runs.quiet)
    interval, why = validation_interval(
        kwargs.get("val_check_interval"), kwargs.get("max_steps"),
        kwargs.get("accumulate_grad_batches", 1),
    )  # fmt: skip
    kwargs["val_check_interval"] = interval
    for line in (why, warmup_warning(to_plain(cfg.scheduler), kwargs.get("max_steps"))):
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
