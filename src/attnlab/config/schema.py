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

    _target_: str | None = None
    divergence_check: str = "every_step"  # attnlab.training.gradients.DIVERGENCE_CHECKS


@dataclass
class LossConfig:
    """Label-smoothed cross-entropy (Sec. 5.4, eps_ls), padding ignored, plus an optional z-loss.
    `normalize`: divide the
    summed token losses by the target tokens of the global batch (tokens_global: all DDP ranks,
    so DDP computes the same gradient as one process) or of each rank's share (tokens: DDP then
    averages the ranks' means, which differs when ranks hold different numbers of tokens)."""

    label_smoothing: float = 0.1
    normalize: str = "tokens_global"  # attnlab.training.options.LOSS_NORMALIZATIONS
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
    project: str = "attnlab"
    entity: str | None = None
    offline: bool = False
    log_model: bool = False


@dataclass
class TensorBoardConfig:
    """lightning TensorBoardLogger: event files in <run_dir>/<subdir> (attnlab[tensorboard]), a
    partial of `_target_` completed with the run (attnlab.runs.loggers.build_loggers)."""

    _target_: str = "attnlab.runs.loggers.tensorboard_logger"
    _partial_: bool = True
    subdir: str = "tensorboard"


@dataclass
class LoggerConfig:
    """Loggers besides the CSV one (metrics.csv is always written); several at once with
    logger=[wandb,tensorboard]."""

    wandb: WandbConfig | None = None
    tensorboard: TensorBoardConfig | None = None


@dataclass
class PathsConfig:
    root: str = "outputs"
    multirun_root: str = "multirun"
    run_dir: str = "${hydra:runtime.output_dir}"


@dataclass
class CheckpointConfig:
    """Periodic checkpoints for resumption and averaging (the paper: every 10 minutes, the
    last 5 averaged). Written into <run_dir>/checkpoints, atomically."""

    every_n_steps: int | None = 500
    every_minutes: float | None = 10.0
    keep_last: int = 5


@dataclass
class TrainConfig:
    name: str = "default"
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    run_name: str | None = None
    seed: int = 1
    torch_threads: int | None = None  # torch.set_num_threads; None: torch's default
    # Greedy exact match on every evaluation; null: the data module's `exact_match` attribute
    # (True for the synthetic tasks; text has none: BLEU measures it).
    exact_match: bool | None = None
    model: ModelConfig = MISSING
    data: Any = MISSING
    # The optimizer and the schedule are classes named by `_target_` (conf/optim, conf/scheduler),
    # each checking its own arguments: attnlab.training.optimizer, attnlab.training.schedules.
    optim: Any = MISSING
    scheduler: Any = MISSING
    module: ModuleConfig = field(default_factory=ModuleConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    trainer: TrainerConfig = MISSING
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    callbacks: dict[str, Any] = field(default_factory=dict)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume: str = "auto"  # auto | never | a checkpoint path
    paths: PathsConfig = field(default_factory=PathsConfig)


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
