"""The config schema: dataclasses registered in Hydra's ConfigStore, one per config group.

conf/train.yaml starts its defaults list with `train_schema`, so every composed config is typed:
OmegaConf rejects `model.n_heads=two` or `model.n_head=2` while composing. The model and data
groups are made from the classes that declare their options (attnlab.model.config
.TransformerConfig, attnlab.data.configs) by attnlab.config.structured (`Literal` choices ->
str); the harness's own groups are declared here. The optimizer and the schedule are typed by
their own classes (a `_target_` each). None of these imports torch, so `attnlab-train --help`
answers without loading it.

Every value rule, a choice (`model.pos_encoding=foo`) or one between fields (d_model divisible
by n_heads), is its constructor's own, asked when the run is built (attnlab.pipeline.build; the
preflight builds it dry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from attnlab.config.data_schema import DATA_SCHEMAS
from attnlab.config.resolvers import register as register_resolvers
from attnlab.config.structured import structured
from attnlab.config.trainer_schema import TrainerConfig
from attnlab.model.config import TransformerConfig

# The synthetic data's schema (the type of a composed cfg.data of data=copy, reverse, ...).
SYNTHETIC_SCHEMA = DATA_SCHEMAS["synthetic_data_schema"]

# The `model` group: TransformerConfig's fields (its only declaration, attnlab.model.config)
# minus vocab_size and pad_id, which come from the data, plus the harness's own switches
# HARNESS_MODEL_KEYS: the preset's name, and torch.compile of the model inside the
# LightningModule (checkpoints keep their plain keys) with its mode (torch.compile's `mode`:
# attnlab.training.options.COMPILE_MODES; reduce-overhead adds CUDA graphs on a GPU).
HARNESS_MODEL_KEYS = ("name", "compile", "compile_mode")
ModelConfig = structured(
    TransformerConfig,
    "ModelConfig",
    drop=("vocab_size", "pad_id"),
    head=(("name", str, "transformer_base"),),
    tail=(("compile", bool, False), ("compile_mode", str, "default")),
    doc="TransformerConfig minus vocab_size and pad_id (from the data), plus the harness "
    "switches HARNESS_MODEL_KEYS.",
)


@dataclass
class ModuleConfig:
    """The LightningModule (attnlab.pipeline.build.build_module): `_target_` null is
    attnlab.training.module.TransformerModule, built for the data's task (attnlab.tasks);
    module._target_=pkg.MyModule trains your own: a subclass of it, or any LightningModule
    taking the same keywords (the built model, the task, the optim and scheduler partials).
    divergence_check: how the step learns that its gradients are no longer finite
    (attnlab.training.gradients): every_step reads the norm back each step; logging_steps
    skips such an update on the device and reads the flag on the logging steps only."""

    _target_: str | None = None  # a LightningModule of your own; null: TransformerModule
    divergence_check: str = "every_step"  # every_step or logging_steps: when a bad step is seen


@dataclass
class LossConfig:
    """Label-smoothed cross-entropy (Sec. 5.4, eps_ls), padding ignored, plus an optional z-loss.
    `normalize`: divide the
    summed token losses by the target tokens of the global batch (tokens_global: all DDP ranks,
    so DDP computes the same gradient as one process) or of each rank's share (tokens: DDP then
    averages the ranks' means, which differs when ranks hold different numbers of tokens)."""

    label_smoothing: float = 0.1  # eps_ls (Sec. 5.4); 0: plain cross-entropy
    normalize: str = "tokens_global"  # tokens_global (all ranks' target tokens) or tokens
    # z-loss (Chowdhery et al., 2022, PaLM: 1e-4): + z_loss * mean (log Z)^2 over the target
    # tokens, log Z the output's log-partition; 0: off. Never part of the nll metrics.
    z_loss: float = 0.0
    # The output projection applied inside the loss, over chunks of rows, so the (tokens x
    # vocabulary) logits are never stored whole (losses.fused_output_nll): the same loss and
    # gradients within float tolerance, less memory. Off until a GPU shows it pays; not with
    # z_loss.
    fused_output: bool = False


@dataclass
class WandbConfig:
    """lightning WandbLogger, a partial of `_target_` completed with the run (its directory,
    name, W&B group and tags; attnlab.runs.loggers.build_loggers). offline=true never tries to
    upload; without an API key or network the run goes offline by itself."""

    _target_: str = "attnlab.runs.loggers.wandb_logger"
    _partial_: bool = True
    project: str = "attnlab"  # W&B project
    entity: str | None = None  # W&B team or user; null: the account's default
    offline: bool = False  # never try to upload (wandb sync later)
    log_model: bool = False  # upload checkpoints as W&B artifacts


@dataclass
class TensorBoardConfig:
    """lightning TensorBoardLogger: event files in <run_dir>/<subdir> (attnlab[tensorboard]), a
    partial of `_target_` completed with the run (attnlab.runs.loggers.build_loggers)."""

    _target_: str = "attnlab.runs.loggers.tensorboard_logger"
    _partial_: bool = True
    subdir: str = "tensorboard"  # event files' folder inside the run folder


@dataclass
class LoggerConfig:
    """Loggers besides the CSV one (metrics.csv is always written); several at once with
    logger=[wandb,tensorboard]."""

    wandb: WandbConfig | None = None  # Weights & Biases (logger=wandb); null: off
    tensorboard: TensorBoardConfig | None = None  # TensorBoard (logger=tensorboard); null: off


@dataclass
class PathsConfig:
    root: str = "outputs"  # where single runs' folders go
    multirun_root: str = "multirun"  # where -m sweeps' folders go
    run_dir: str = "${hydra:runtime.output_dir}"  # this run's folder (Hydra's output dir)


@dataclass
class CheckpointConfig:
    """Periodic checkpoints for resumption and averaging (the paper: every 10 minutes, the
    last 5 averaged). Written into <run_dir>/checkpoints, atomically."""

    every_n_steps: int | None = 500  # a checkpoint every N optimizer steps; null: never by steps
    every_minutes: float | None = 10.0  # and every M minutes of wall time; null: never by time
    keep_last: int = 5  # periodic checkpoints kept (averaging reads the last ones)


@dataclass
class TrainConfig:
    name: str = "default"  # the experiment's name (outputs/<name>/..., the W&B job type)
    group: str | None = None  # W&B group; a multirun's jobs share one (null: the name)
    tags: list[str] = field(default_factory=list)  # W&B tags
    run_name: str | None = None  # the run folder's name; null: from the overrides
    seed: int = 1  # seeds the weights, the data order and dropout
    torch_threads: int | None = None  # torch.set_num_threads; None: torch's default
    # Greedy exact match on every evaluation; null: the data module's `exact_match` attribute
    # (True for the synthetic tasks; text has none: BLEU measures it).
    exact_match: bool | None = None
    model: ModelConfig = MISSING  # the model group (conf/model): attnlab.model.config
    data: Any = MISSING  # the data group (conf/data): attnlab.data.configs
    # The optimizer and the schedule are classes named by `_target_` (conf/optim, conf/scheduler),
    # each checking its own arguments: attnlab.training.optimizer, attnlab.training.schedules.
    optim: Any = MISSING  # the optimizer (conf/optim): its class and arguments
    scheduler: Any = MISSING  # the learning-rate schedule (conf/scheduler): class and arguments
    module: ModuleConfig = field(default_factory=ModuleConfig)  # the LightningModule
    loss: LossConfig = field(default_factory=LossConfig)  # the training loss
    trainer: TrainerConfig = MISSING  # lightning.Trainer's arguments (conf/trainer)
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # loggers besides metrics.csv
    callbacks: dict[str, Any] = field(default_factory=dict)  # conf/callbacks: name -> callback
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)  # periodic saves
    resume: str = "auto"  # auto | never | a checkpoint path
    paths: PathsConfig = field(default_factory=PathsConfig)  # where runs are written


def register_configs() -> None:
    """Store `train_schema`, the base of conf/train.yaml (it types every group but `data`), and
    each data module's schema, named by its conf/data files (`/synthetic_data_schema@_here_`,
    attnlab.config.data_schema.DATA_SCHEMAS)."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    for name, schema in DATA_SCHEMAS.items():  # attnlab.config.data_schema
        cs.store(name=name, node=schema)
    register_resolvers()  # ${attnlab_accumulation:...} and friends in presets


register_configs()
