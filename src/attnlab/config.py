"""The config schema: dataclasses registered in Hydra's ConfigStore, one per config group.

conf/train.yaml starts its defaults list with `train_schema`, so every composed config is typed:
OmegaConf rejects `model.n_heads=two` or `model.pos_encoding=foo` (listing the valid choices)
while composing. Choice fields are `str` Enums built from the tuples in attnlab.model.config and
attnlab.training.schedules; `to_plain` turns them back into plain strings.

Cross-field checks (d_model divisible by n_heads, dropout in [0, 1), ...) live in
TransformerConfig.validate and run from `validate_config`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from attnlab.data.batching import per_rank_batch_size
from attnlab.data.checks import check_data_config
from attnlab.data.synthetic import SYNTHETIC_TASKS, SyntheticDataModule
from attnlab.data.vocab import NUM_SPECIAL
from attnlab.data_schema import TEXT_DATA_SCHEMAS
from attnlab.dotted import flatten  # noqa: F401 (re-exported)
from attnlab.model.config import (
    ACTIVATIONS,
    ARCHS,
    INITS,
    NORM_POSITIONS,
    NORM_TYPES,
    POS_ENCODINGS,
    TransformerConfig,
)
from attnlab.training.module import LOSS_NORMALIZATIONS
from attnlab.training.schedules import SCHEDULERS


def _choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    return Enum(name, {v: v for v in values}, type=str)


Arch = _choices("Arch", ARCHS)
NormPosition = _choices("NormPosition", NORM_POSITIONS)
NormType = _choices("NormType", NORM_TYPES)
PosEncoding = _choices("PosEncoding", POS_ENCODINGS)
Init = _choices("Init", INITS)
Activation = _choices("Activation", ACTIVATIONS)
Scheduler = _choices("Scheduler", SCHEDULERS)
Optimizer = _choices("Optimizer", ("adam", "adamw"))
SyntheticTask = _choices("SyntheticTask", SYNTHETIC_TASKS)
LossNormalize = _choices("LossNormalize", LOSS_NORMALIZATIONS)

# The keys an ablation varies: always recorded in results.json (with any overridden key).
ABLATION_KEYS = (
    "model.n_heads",
    "model.d_k",
    "model.norm_position",
    "model.pos_encoding",
    "scheduler.name",
    "scheduler.warmup_steps",
    "seed",
)

_TC = TransformerConfig  # schema defaults are the paper's base model, as in TransformerConfig


@dataclass
class ModelConfig:
    """TransformerConfig minus vocab_size and pad_id, which come from the data."""

    name: str = "transformer_base"
    arch: Arch = Arch(_TC.arch)
    d_model: int = _TC.d_model
    n_heads: int = _TC.n_heads
    d_k: int | None = _TC.d_k
    d_ff: int = _TC.d_ff
    n_encoder_layers: int = _TC.n_encoder_layers
    n_decoder_layers: int = _TC.n_decoder_layers
    dropout: float = _TC.dropout
    attn_dropout: float = _TC.attn_dropout
    norm_position: NormPosition = NormPosition(_TC.norm_position)
    norm_type: NormType = NormType(_TC.norm_type)
    pos_encoding: PosEncoding = PosEncoding(_TC.pos_encoding)
    max_len: int | None = _TC.max_len
    share_embeddings: bool = _TC.share_embeddings
    init: Init = Init(_TC.init)
    activation: Activation = Activation(_TC.activation)


@dataclass
class SyntheticDataConfig:
    """attnlab.data.synthetic.SyntheticDataModule; lengths are [min, max], inclusive."""

    _target_: str = "attnlab.data.synthetic.SyntheticDataModule"
    name: SyntheticTask = SyntheticTask.reverse
    arch: Arch = "${model.arch}"  # the model decides the batch format (seq2seq or lm)
    n_symbols: int = 16
    train_len: list[int] = field(default_factory=lambda: [1, 12])
    eval_len: list[int] = field(default_factory=lambda: [1, 12])
    batch_size: int = 64
    train_size: int = 1_000_000
    val_size: int = 512
    test_size: int = 1024
    seed: int = "${seed}"
    num_workers: int = 0


@dataclass
class OptimConfig:
    """Adam with the paper's betas and eps (Sec. 5.3). `lr` is the peak learning rate of the
    inverse_sqrt, cosine and constant schedules; noam derives its own from d_model."""

    name: Optimizer = Optimizer.adam
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-9
    weight_decay: float = 0.0


@dataclass
class SchedulerConfig:
    """attnlab.training.schedules; stepped every optimizer step. max_steps (cosine) defaults to
    trainer.max_steps; scale multiplies noam's formula."""

    name: Scheduler = Scheduler.noam
    warmup_steps: int = 4000
    scale: float = 1.0
    min_lr: float = 0.0
    max_steps: int | None = None


@dataclass
class LossConfig:
    """Label-smoothed cross-entropy (Sec. 5.4, eps_ls), padding ignored. `normalize`: divide the
    summed token losses by the target tokens of the global batch (tokens_global: all DDP ranks,
    so DDP computes the same gradient as one process) or of each rank's share (tokens: DDP then
    averages the ranks' means, which differs when ranks hold different numbers of tokens)."""

    label_smoothing: float = 0.1
    normalize: LossNormalize = LossNormalize.tokens_global


@dataclass
class TrainerConfig:
    """Keyword arguments of lightning.Trainer (see its docs for each)."""

    accelerator: str = "cpu"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    max_steps: int = -1
    max_epochs: int | None = None
    max_time: Any = None  # "DD:HH:MM:SS": stop training after this much wall time
    val_check_interval: Any = None  # int: every N training batches, float: fraction of an epoch
    check_val_every_n_epoch: int | None = 1
    log_every_n_steps: int = 50
    gradient_clip_val: float | None = None
    accumulate_grad_batches: int = 1
    deterministic: Any = False
    enable_progress_bar: bool = True
    enable_model_summary: bool = True
    limit_train_batches: Any = None
    limit_val_batches: Any = None
    limit_test_batches: Any = None
    num_sanity_val_steps: int = 2


@dataclass
class WandbConfig:
    """lightning WandbLogger. offline=true never tries to upload; without an API key or network
    the run goes offline by itself."""

    project: str = "attnlab"
    entity: str | None = None
    offline: bool = False
    log_model: bool = False


@dataclass
class LoggerConfig:
    """Loggers besides the CSV one (metrics.csv is always written)."""

    wandb: WandbConfig | None = None


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
    # Greedy exact match on every evaluation; null: for synthetic data only (for text, BLEU).
    exact_match: bool | None = None
    model: ModelConfig = MISSING
    data: Any = MISSING
    optim: OptimConfig = MISSING
    scheduler: SchedulerConfig = MISSING
    loss: LossConfig = field(default_factory=LossConfig)
    trainer: TrainerConfig = MISSING
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    callbacks: dict[str, Any] = field(default_factory=dict)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    resume: str = "auto"  # auto | never | a checkpoint path
    paths: PathsConfig = field(default_factory=PathsConfig)


def register_configs() -> None:
    """Store `train_schema`, the base of conf/train.yaml (it types every group but `data`), and
    `synthetic_data_schema`, named by the synthetic data files (`/synthetic_data_schema@_here_`);
    other data modules may register their own."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="synthetic_data_schema", node=SyntheticDataConfig)
    for name, schema in TEXT_DATA_SCHEMAS.items():  # attnlab.data_schema
        cs.store(name=name, node=schema)


register_configs()


def to_plain(node) -> Any:
    """A composed config node as plain Python (dicts, lists, str instead of Enums), resolved."""
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)


def transformer_config(model: DictConfig | dict, vocab_size: int, pad_id: int) -> TransformerConfig:
    """Build (and so validate) the TransformerConfig for cfg.model; errors name `model.<key>`."""
    kwargs = dict(model) if isinstance(model, dict) else to_plain(model)
    kwargs.pop("name", None)
    known = TransformerConfig.__dataclass_fields__
    unknown = [k for k in kwargs if k not in known or k in ("vocab_size", "pad_id")]
    if unknown:
        raise ValueError(
            f"model.{unknown[0]} is not a model option; expected one of: "
            + ", ".join(k for k in known if k not in ("vocab_size", "pad_id"))
        )
    try:
        return TransformerConfig(**kwargs, vocab_size=vocab_size, pad_id=pad_id)
    except ValueError as err:
        raise ValueError(_prefix_fields(str(err), "model.")) from None


def _prefix_fields(message: str, prefix: str) -> str:
    """'n_heads=3 ...' -> 'model.n_heads=3 ...' for every TransformerConfig field named."""
    names = "|".join(sorted(TransformerConfig.__dataclass_fields__, key=len, reverse=True))
    return re.sub(rf"(?<![\w.])({names})(?==)", rf"{prefix}\1", message)


def _vocab_size_hint(data: DictConfig) -> int:
    """The vocabulary size the data will have, where the config tells it (synthetic data);
    otherwise a stand-in that only needs to exceed the special ids."""
    if OmegaConf.get_type(data) is SyntheticDataConfig:
        return NUM_SPECIAL + int(data.n_symbols) + (data.arch == Arch.decoder_only)
    return int(data.get("vocab_size") or NUM_SPECIAL + 1)


class DataConfigError(ValueError):
    """Problems with the data config or its files (attnlab.data.checks), one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def exact_match_enabled(cfg: DictConfig) -> bool:
    """cfg.exact_match, where null means: for synthetic data only. (Greedy-decoding every
    evaluation sentence is the measure for the synthetic tasks; for text it is slow and near 0.)"""
    if cfg.get("exact_match") is not None:
        return bool(cfg.exact_match)
    return OmegaConf.get_type(cfg.data) is SyntheticDataConfig


def validate_config(cfg: DictConfig) -> None:
    """Checks that need more than one field, before anything is built. Raises ValueError with a
    one-line message naming the key. (Types and choices were checked when composing.)"""
    model = transformer_config(cfg.model, vocab_size=_vocab_size_hint(cfg.data), pad_id=0)
    scheduler = to_plain(cfg.scheduler)
    if scheduler["name"] not in SCHEDULERS:
        raise ValueError(
            f"scheduler.name={scheduler['name']!r} is not valid; "
            f"expected one of: {', '.join(SCHEDULERS)}"
        )
    if scheduler["warmup_steps"] < 0:
        raise ValueError(
            f"scheduler.warmup_steps={scheduler['warmup_steps']} is not valid; "
            "expected an integer >= 0"
        )
    _validate_run_control(cfg)
    _validate_task(cfg, model.arch)
    _validate_world_size(cfg)
    if not 0.0 <= cfg.loss.label_smoothing < 1.0:
        raise ValueError(
            f"loss.label_smoothing={cfg.loss.label_smoothing} is not valid; "
            "expected a number in [0, 1)"
        )
    if OmegaConf.get_type(cfg.data) is SyntheticDataConfig:
        kwargs = to_plain(cfg.data)
        kwargs.pop("_target_")
        data = SyntheticDataModule(**kwargs)  # its constructor checks lengths and sizes
        if model.pos_encoding == "learned" and model.max_len < data.max_seq_len:
            raise ValueError(
                f"model.max_len={model.max_len} is shorter than the longest sequence of the data "
                f"({data.max_seq_len}); learned positions need model.max_len >= "
                f"{data.max_seq_len}"
            )
    # Text data: the DataModule's argument rules, and every data file read in full.
    problems = check_data_config(to_plain(cfg.data))
    if problems:
        raise DataConfigError(problems)


def _validate_run_control(cfg: DictConfig) -> None:
    """resume and checkpoint.* (issue 6)."""
    resume = str(cfg.get("resume", "auto"))
    if resume not in ("auto", "never") and not Path(resume).is_file():
        raise ValueError(
            f"resume={resume!r} is not valid; expected auto, never or the path of an existing "
            "checkpoint file"
        )
    ckpt = cfg.get("checkpoint")
    if ckpt is None:
        return
    for key in ("every_n_steps", "every_minutes"):
        value = ckpt.get(key)
        if value is not None and value <= 0:
            raise ValueError(
                f"checkpoint.{key}={value} is not valid; expected a positive number or null"
            )
    if ckpt.keep_last < 1:
        raise ValueError(
            f"checkpoint.keep_last={ckpt.keep_last} is not valid; expected an integer >= 1"
        )


def world_size(trainer: DictConfig) -> int | None:
    """Processes of the run, trainer.devices x trainer.num_nodes, where the config says it (an
    integer or a list of device ids); None for "auto", -1 and the like."""
    devices = trainer.get("devices", 1)
    if OmegaConf.is_list(devices) or isinstance(devices, list | tuple):
        n = len(devices)
    elif isinstance(devices, int) and not isinstance(devices, bool):
        n = devices
    elif isinstance(devices, str) and devices.strip().isdigit():
        n = int(devices)
    else:
        return None
    return n * int(trainer.get("num_nodes", 1)) if n > 0 else None


def _validate_world_size(cfg: DictConfig) -> None:
    """trainer.num_nodes >= 1; data.batch_size (a global batch) divisible by the world size."""
    if int(cfg.trainer.get("num_nodes", 1)) < 1:
        raise ValueError(
            f"trainer.num_nodes={cfg.trainer.num_nodes} is not valid; expected an integer >= 1"
        )
    world = world_size(cfg.trainer)
    batch_size = cfg.data.get("batch_size")
    if world and isinstance(batch_size, int) and not isinstance(batch_size, bool):
        per_rank_batch_size(batch_size, world)


def _validate_task(cfg: DictConfig, arch: str) -> None:
    """A decoder-only model needs language-model data, an encoder-decoder sentence pairs.
    Synthetic tasks serve both (the datamodule's `task` follows model.arch)."""
    target = OmegaConf.select(cfg, "data._target_", default=None)
    if not isinstance(target, str):
        return
    import importlib

    module, _, name = target.rpartition(".")
    try:
        task = getattr(getattr(importlib.import_module(module), name), "task", None)
    except (ImportError, AttributeError):
        return  # instantiate reports an unknown _target_
    needed = {"encoder_decoder": "seq2seq", "decoder_only": "lm"}[arch]
    if isinstance(task, str) and task != needed:
        data_name = OmegaConf.select(cfg, "data.name", default=name)
        raise ValueError(
            f"model.arch={arch!r} cannot train on data={data_name!r} ({task} data); "
            f"an {arch} model needs {needed} data"
        )
