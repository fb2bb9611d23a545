"""Checkpoints to evaluate: files named on the command line, a run's periodic checkpoints,
their average (Sec. 6.1), and the run directory they came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from attnlab.runs.checkpoints import step_of  # best-step=N, step=N, timed-step=N


class EvalError(Exception):
    """A problem with the user's input, reported in one line."""


def checkpoint_paths(ckpt: Any, last: int | None = None) -> list[Path]:
    """`ckpt` (a path, a list of paths, or a directory) as the list of checkpoint files to
    average. A directory stands for its periodic checkpoints step=<n>.ckpt, oldest first, of
    which `last` keeps the newest."""
    given = list(ckpt) if isinstance(ckpt, list | tuple) or OmegaConf.is_list(ckpt) else [ckpt]
    if not given:
        raise EvalError("ckpt=[] names no checkpoint")
    if last is not None and last < 1:
        raise EvalError(f"last={last} is not valid; expected an integer >= 1")
    paths: list[Path] = []
    for item in given:
        path = Path(str(item)).expanduser()
        if path.is_dir():
            paths += _periodic_checkpoints(path, last)
        elif not path.is_file():
            raise EvalError(f"ckpt: file not found: {path}")
        else:
            paths.append(path)
    return paths


def _periodic_checkpoints(folder: Path, last: int | None) -> list[Path]:
    """The folder's step=<n>.ckpt, oldest first, and the run's final state where no step= file
    holds it (a time-limited run's last step is often only in best-step=<n> or timed-step=<n>,
    or behind last.ckpt): averaging "the last k checkpoints" then ends at the run's end."""
    found = sorted(
        (p for p in folder.glob("step=*.ckpt") if step_of(p) is not None),
        key=step_of,
    )
    final = final_checkpoint(folder)
    if final is not None and (not found or step_of(final) > step_of(found[-1])):
        found.append(final)
    if not found:
        raise EvalError(
            f"ckpt: {folder} holds no periodic step=<n>.ckpt checkpoints to average; for one "
            f"file give it, e.g. ckpt={folder / 'last.ckpt'}"
        )
    return found[-last:] if last else found


def final_checkpoint(folder: Path) -> Path | None:
    """The checkpoint of the newest step in `folder`, by any name that carries its step
    (step=, best-step=, timed-step=, or last.ckpt's link target), or None."""
    named = [p for p in folder.glob("*.ckpt") if step_of(p) is not None]
    last = folder / "last.ckpt"
    if last.is_symlink() and step_of(last.resolve()) is not None:
        named.append(last)
    steps = [(step_of(p.resolve() if p.is_symlink() else p), p) for p in named]
    return max(steps, key=lambda sp: (sp[0], sp[1].name.startswith("step=")))[1] if steps else None


def averaging_note(paths: list[Path], run_steps: int | None) -> str | None:
    """'steps averaged: 100, 200, 289' (the steps the file names carry) for an average, and a
    warning where the newest of them is before the run's last step (`run_steps`,
    results.json's `steps`); None for one checkpoint of the run's last step (or unknown)."""
    steps = [step_of(p.resolve() if p.is_symlink() else p) for p in paths]
    shown = ", ".join("?" if s is None else str(s) for s in steps)
    known = [s for s in steps if s is not None]
    warning = None
    if run_steps and known and max(known) < run_steps:
        warning = (
            f"warning: the newest is step {max(known)}, {run_steps - max(known)} steps before "
            f"the run's last ({run_steps}): the final model is not in it"
        )
    if len(paths) > 1:
        return f"steps averaged: {shown}" + (f"; {warning}" if warning else "")
    return f"step: {shown}; {warning}" if warning else None


def find_run_dir(ckpt: Path) -> Path:
    """The run directory of a checkpoint: its nearest parent holding config.yaml (a checkpoint
    copied elsewhere: the parent of its folder, where tokenizer.model is then looked for)."""
    ckpt = ckpt.resolve()
    for parent in list(ckpt.parents)[:3]:
        if (parent / "config.yaml").is_file():
            return parent
    return ckpt.parent.parent


def load_model(paths: list[str]):
    """The (averaged) model in eval mode, the training hyper-parameters and the run directory."""
    from attnlab.runs.checkpoints import load_attnlab_checkpoint
    from attnlab.training.averaging import average_checkpoints
    from attnlab.training.compat import as_today
    from attnlab.training.module import model_from_hparams

    for path in paths:
        first, problem = load_attnlab_checkpoint(Path(path))
        if problem:
            raise EvalError(
                f"ckpt: checkpoint {path} {problem}; expected an attnlab-train checkpoint, e.g. "
                "ckpt=outputs/<name>/<run>/checkpoints/last.ckpt"
            )
    first, _ = load_attnlab_checkpoint(Path(paths[0]))
    try:
        state = average_checkpoints(paths)  # loads each safely, checks they match
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        raise EvalError(f"ckpt: {str(err).strip().splitlines()[0]}") from None
    hparams = as_today(first["hyper_parameters"], checkpoint=True)  # an older version's too
    model = model_from_hparams(hparams["model"])
    weights = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
    model.load_state_dict(weights)
    return model.eval(), hparams, find_run_dir(Path(paths[0]))


def run_datamodule(run_dir: Path, data_overrides: dict | None = None):
    """The run's DataModule, built from its config.yaml with `data_overrides` (e.g. a moved
    data.root) and, for text, the run's own tokenizer.model."""
    from hydra.utils import instantiate

    cfg_path = run_dir / "config.yaml"
    if not cfg_path.is_file():
        raise EvalError(f"{cfg_path} not found: the checkpoint's run directory has no config")
    extra = {}
    if (run_dir / "tokenizer.model").is_file():
        extra["tokenizer_path"] = str(run_dir / "tokenizer.model")
    try:
        data_cfg = OmegaConf.load(cfg_path).data
        if extra and "tokenizer_path" in data_cfg:
            data_cfg = OmegaConf.merge(data_cfg, extra)
        data_cfg = OmegaConf.merge(data_cfg, data_overrides or {})
        return instantiate(OmegaConf.to_container(data_cfg, resolve=True))
    except Exception as err:  # a bad data.<key> override: instantiate wraps the cause
        cause = err.__cause__ or err
        raise EvalError(f"data: {str(cause).splitlines()[0]}") from None


def device_of(name: str):
    """torch.device for `device=` (auto: CUDA when available, else CPU)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
