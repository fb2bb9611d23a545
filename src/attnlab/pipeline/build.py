"""Every object of a run, built from its config; the preflight is the same build done dry.

`build(cfg, run_dir, dry=...)` makes the model's TransformerConfig (once), the data module, the
LightningModule with the model, the data's task and the optimizer and schedule partials, and
the callbacks, each from its group's `_target_` (Hydra's `instantiate`); `attach` then adds the
loggers and the Trainer once the run's record is started. Building is the check: each
constructor refuses its own bad arguments in one line naming the key, and a rule between two
groups is asked of the object that receives both: the data's task checks the model its batches
feed (architecture, positions: attnlab.tasks.base), the module its optimizer, schedule and loss,
a callback the run it joins (`check_run`: the time horizon against the schedule and
trainer.max_time), and the Trainer's arguments are Lightning's to accept (trainer_problem, with
the few values Lightning takes but cannot be meant). Any refusal raises ConfigRefused before
anything is written.

`dry=True` (attnlab.pipeline.preflight, for every job of a command line): nothing is written,
trained or downloaded. The model's config comes first, sized to the vocabulary the data config
plans (a bad model value is answered before torch loads), the model is built on the meta
device, the text data is not tokenized (its `check`, which every build runs, reads each file),
and the Trainer's arguments are given to Lightning without loggers or callbacks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.data.configs import planned_vocab_size
from attnlab.data.vocab import PAD_ID
from attnlab.problems import choice_problem, integer_problem, raise_first
from attnlab.training.trainer import trainer_problem


class ConfigRefused(ValueError):
    """A config a run cannot start with; nothing was written. `problems`: one line each."""

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


@dataclass
class Built:
    """The objects of one run (the loggers and the Trainer once attached)."""

    datamodule: object
    module: object
    trainer: object | None = None
    loggers: list = field(default_factory=list)
    preemption: object | None = None
    callbacks: list = field(default_factory=list)
    trainer_class: type | None = None  # trainer._target_


def build(cfg, run_dir: Path | None = None, dry: bool = False, local: bool = True) -> Built:
    """The run of `cfg` (composed, or plain as attnlab.config.plain makes it): everything but
    its loggers and Trainer, whose arguments are checked here and which `attach` adds once the
    run's record is started. `local`: the jobs run on this machine (not a remote launcher's),
    so the Trainer's device arguments are checked here. ConfigRefused (one line per problem)
    if anything is refused; nothing is written until then."""
    from attnlab.config.plain import plain_config

    if not isinstance(cfg, dict) and dry:  # composed without a Hydra run: no output directory
        cfg = cfg.copy()
        cfg.paths.run_dir = str(run_dir or "<run_dir>")  # never written to
    from attnlab.data.download import DownloadError

    plain = cfg if isinstance(cfg, dict) else plain_config(cfg)
    try:
        return _build(plain, run_dir, dry, local)
    except ConfigRefused:
        raise
    except ValueError as err:  # a constructor's own one-line refusal
        raise ConfigRefused(str(err)) from None
    except DownloadError as err:  # data a run needs, missing and out of reach (offline)
        raise ConfigRefused(f"{err} (or set data.root to a folder that holds it)") from None


def _build(plain: dict, run_dir: Path | None, dry: bool, local: bool) -> Built:
    raise_first([_optional_integer("torch_threads", plain.get("torch_threads"), 1)])
    if dry:  # the model's own rules first: a bad value is answered before torch is loaded
        config = model_config(plain["model"], planned_vocab_size(plain["data"]), PAD_ID)
    else:
        import lightning as L

        L.seed_everything(plain["seed"], workers=True)
    datamodule = build_datamodule(plain["data"], plain["trainer"])
    if not dry:  # sized to the data's real vocabulary (a text data module's tokenizer trained)
        config = model_config(plain["model"], datamodule.vocab_size, datamodule.pad_id)
    module = build_module(plain, datamodule, config, dry)
    raise_first([_resume_problem(str(plain.get("resume", "auto")), config, known=not dry)])
    callbacks = build_callbacks(plain, module, run_dir or Path("."))
    for key, node in plain["logger"].items():  # built by attach (W&B starts then): named here
        if node:
            located(node.get("_target_"), f"logger.{key}._target_")
    trainer_class = located(plain["trainer"].get("_target_"), "trainer._target_")
    raise_first([trainer_problem(trainer_class, plain["trainer"], plain["optim"], local)])
    return Built(datamodule, module, callbacks=callbacks, trainer_class=trainer_class)


def attach(built: Built, plain: dict, run_dir: Path, name: str) -> Built:
    """The run's loggers (W&B starts here) and its Trainer, with the built callbacks."""
    from attnlab.runs.loggers import build_loggers
    from attnlab.training.trainer import build_trainer

    loggers = build_loggers(plain, run_dir, name)
    trainer, preemption = build_trainer(
        built.trainer_class, plain, built.callbacks, run_dir, loggers
    )
    built.loggers, built.trainer, built.preemption = loggers, trainer, preemption
    return built


def _optional_integer(key: str, value, minimum: int) -> str | None:
    return None if value is None else integer_problem(key, value, minimum)


# --- the groups, each by its _target_ ---------------------------------------------------------


def located(target, key: str):
    """What `target` names (Hydra's get_object), or ConfigRefused naming `key`: the one line a
    mistyped `_target_` gets, instead of a traceback from inside the run."""
    from hydra.utils import get_object

    logger = logging.getLogger("hydra.utils")  # get_object logs the error before raising it
    level, logger.level = logger.level, logging.CRITICAL
    try:
        obj = get_object(str(target))
    except Exception as err:  # ImportError (ModuleNotFoundError as its cause), ValueError
        obj, why = None, _not_located(str(target), err)
    else:
        why = None if callable(obj) else "is not a class or function"  # a module is not
    finally:
        logger.level = level
    if why:
        raise ConfigRefused(
            f"{key}={target!r} {why}; expected the dotted path of a class or function "
            "(package.module.Name)"
        )
    return obj


def _not_located(target: str, err: Exception) -> str:
    """'cannot be found (module 'a.b' has no 'c')' where the module exists but not the name;
    'cannot be imported (ModuleNotFoundError: ...)' where a module is missing or fails."""
    cause = err.__cause__ or err
    parts = target.split(".")
    missing = getattr(cause, "name", None)
    if isinstance(cause, ModuleNotFoundError) and missing in {
        ".".join(parts[: i + 1]) for i in range(1, len(parts))
    }:
        i = missing.count(".")
        return f"cannot be found (module {'.'.join(parts[:i])!r} has no {parts[i]!r})"
    return f"cannot be imported ({type(cause).__name__}: {cause})"


def instantiate_node(node: dict, key: str, **kwargs):
    """Hydra's instantiate of a plain node whose `_target_` is checked first (located); the
    constructor's own ValueError (one line naming its key) comes through as it is."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    located(node.get("_target_"), f"{key}._target_")
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, ValueError):
            raise ConfigRefused(str(cause)) from None
        raise ConfigRefused(f"{key} ({node.get('_target_')}) is not valid: {cause}") from None


def build_datamodule(data: dict, trainer: dict):
    """The data group (plain) instantiated, resumable mid-epoch (attnlab.data.resumable). A
    class with a `check` (the text data) reads every file it will read first, and every problem
    is a line; then data.batch_size (a global batch) must split over the world size."""
    from attnlab.config.resolvers import world_size
    from attnlab.data.batching import per_rank_batch_size
    from attnlab.data.resumable import make_resumable
    from attnlab.problems import is_integer

    cls = located(data.get("_target_"), "data._target_")
    problems = cls.check(data) if hasattr(cls, "check") else []
    if problems:
        raise ConfigRefused(problems)
    raise_first([integer_problem("trainer.num_nodes", trainer.get("num_nodes", 1), 1)])
    datamodule = make_resumable(instantiate_node(data, "data"))
    world, batch_size = world_size(trainer), data.get("batch_size")
    if world and is_integer(batch_size):  # a global batch, split over the ranks
        per_rank_batch_size(batch_size, world)
    return datamodule


def model_config(model: dict, vocab_size: int, pad_id: int):
    """The TransformerConfig of cfg.model (plain; the harness's own keys dropped), sized to a
    vocabulary: the one place a run's config becomes the model's. A bad value is one line
    naming model.<field>."""
    from attnlab.config.schema import HARNESS_MODEL_KEYS
    from attnlab.model.config import TransformerConfig

    options = {k: v for k, v in model.items() if k not in HARNESS_MODEL_KEYS}
    return TransformerConfig.from_options(
        options, vocab_size=vocab_size, pad_id=pad_id, prefix="model."
    )


def build_module(plain: dict, datamodule, model_config, dry: bool = False):
    """cfg.module's `_target_` (null: TransformerModule), given the model built from
    `model_config`, the data's task (attnlab.tasks), the optimizer and schedule partials
    (`_partial_` whether the config says so or not), the loss group's values and the data's
    special ids. Any LightningModule whose constructor takes these keywords will do
    (docs/training.md); TransformerModule checks them and stores them as plain values, so its
    checkpoints reload with weights_only. `dry`: the model on the meta device."""
    import torch

    from attnlab.model import Transformer
    from attnlab.model.config import prefix_fields
    from attnlab.tasks import task_named
    from attnlab.training.module import TransformerModule

    task = task_named(datamodule.task) if getattr(datamodule, "task", None) else None
    raise_first([task.fit_problem(datamodule, model_config) if task else None])
    target = plain["module"].get("_target_")
    module_class = located(target, "module._target_") if target else TransformerModule
    try:
        with torch.device("meta" if dry else torch.get_default_device()):
            model = Transformer(model_config)
    except ValueError as err:  # a component's own rule (its positional encoding's)
        raise ConfigRefused(prefix_fields(str(err), "model.")) from None
    loss = plain["loss"]
    return module_class(
        model=model,
        task=task,
        optim=instantiate_node(plain["optim"], "optim", _partial_=True, _convert_="all"),
        scheduler=instantiate_node(
            plain["scheduler"], "scheduler", _partial_=True, _convert_="all"
        ),  # fmt: skip
        label_smoothing=loss["label_smoothing"],
        z_loss=loss["z_loss"],
        fused_output=loss["fused_output"],
        loss_normalize=loss["normalize"],
        bos_id=datamodule.bos_id,
        eos_id=datamodule.eos_id,
        max_steps=plain["trainer"]["max_steps"],
        exact_match=exact_match_enabled(plain, datamodule),
        compile=_compile_mode(plain["model"]),
        **_non_default_module_options(plain["module"]),
    )


def _compile_mode(model: dict) -> bool | str:
    """The module's `compile`: False, True (torch.compile's default mode) or a mode
    (model.compile_mode, checked whether or not model.compile is on)."""
    from attnlab.training.options import COMPILE_MODES

    mode = model.get("compile_mode", "default")
    raise_first([choice_problem("model.compile_mode", mode, COMPILE_MODES)])
    if not model.get("compile", False):
        return False
    return True if mode == "default" else mode


def _non_default_module_options(module: dict) -> dict:
    """cfg.module's options other than `_target_` that differ from their defaults: a module of
    one's own that does not take them still builds when they are left alone."""
    check = module.get("divergence_check", "every_step")
    return {} if check == "every_step" else {"divergence_check": check}


def _resume_problem(resume: str, model_config, known: bool) -> str | None:
    """resume=<file>: an existing, readable attnlab checkpoint of this architecture (its
    vocabulary compared where `known`: not in a dry build, whose vocabulary is planned)."""
    if resume in ("auto", "never"):
        return None
    if not Path(resume).is_file():
        return (
            f"resume={resume!r} is not valid; expected auto, never or the path of an existing "
            "checkpoint file"
        )
    from attnlab.runs.checkpoints import resume_problem

    options = model_config.to_dict()
    if not known:
        options.pop("vocab_size")
    problem = resume_problem(Path(resume), options)
    if problem:
        return (
            f"resume={resume} {problem}; expected a checkpoint of this model, or resume=auto / "
            "never"
        )
    return None


def exact_match_enabled(plain: dict, datamodule) -> bool:
    """cfg["exact_match"], where null means the data module's (class's) `exact_match` default:
    True for the synthetic tasks, where greedy-decoding every evaluation sequence is the
    measure; False (or absent) for text, where it is slow and near 0."""
    if plain.get("exact_match") is not None:
        return bool(plain["exact_match"])
    return getattr(datamodule, "exact_match", False) is True


def build_callbacks(plain: dict, module, run_dir: Path) -> list:
    """The callbacks group instantiated; each that has `check_run` is asked about the run it
    joins (the module's schedule, the Trainer's arguments); then the periodic checkpoints."""
    from attnlab.training.callbacks import periodic_checkpoints

    callbacks = []
    for key, node in plain["callbacks"].items():
        if not node:
            continue
        callback = instantiate_node(node, f"callbacks.{key}")
        if hasattr(callback, "check_run"):
            raise_first([callback.check_run(f"callbacks.{key}", module, plain["trainer"])])
        callbacks.append(callback)
    return callbacks + periodic_checkpoints(run_dir / "checkpoints", **plain["checkpoint"])
