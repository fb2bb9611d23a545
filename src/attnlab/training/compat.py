"""Runs saved by earlier versions, read as today's: the one place old formats are known.

A checkpoint's hyper-parameters and a run's stored config.yaml may predate three changes:
- the optimizer a torch class in `optim._target_` (before: `optim.name`, adam or adamw);
- the schedules classes in `scheduler._target_` taking only their own keys (before:
  `scheduler.name` with every schedule's keys), and the peak's one home `scheduler.peak_lr`
  (before: `optim.lr`, which every schedule but noam read);
- the task an argument of the module (before: the class said it, from the architecture).
`as_today` turns any of these into today's form and leaves today's alone; the module reads a
checkpoint through it (attnlab.training.module), the run's changed-config check a config.yaml
(attnlab.pipeline.train).
"""

from __future__ import annotations

import inspect

from attnlab.data.options import task_for_arch

# Names the old configs used, and what they name today.
OPTIMIZERS = {"adam": "torch.optim.Adam", "adamw": "torch.optim.AdamW"}
SCHEDULES = {
    "noam": "Noam",
    "inverse_sqrt": "InverseSqrt",
    "cosine": "Cosine",
    "constant": "Constant",
}


def as_today(saved: dict, checkpoint: bool = False) -> dict:
    """`saved` (a run's stored config, or with `checkpoint` a checkpoint's hyper-parameters)
    with `optim` and `scheduler` in today's form, and a checkpoint's `task` where it has none;
    the other keys as they are. A bad old name is one line naming its key (optim.name,
    scheduler.name)."""
    out = dict(saved)
    optim, scheduler = out.get("optim"), out.get("scheduler")
    if isinstance(optim, dict):
        out["optim"] = _optimizer(optim)
    if isinstance(scheduler, dict):
        out["scheduler"] = _schedule(scheduler, (optim or {}).get("lr"))
    if checkpoint and out.get("task") is None:  # the class said it, from the architecture
        out["task"] = task_for_arch(out["model"].get("arch", "encoder_decoder"))
    return out


def _optimizer(optim: dict) -> dict:
    """optim.name -> its torch class in `_target_`; optim.lr (the peak's old home) dropped."""
    spec = {k: v for k, v in optim.items() if k != "lr"}
    if "name" in spec:
        spec["_target_"] = OPTIMIZERS.get(name := spec.pop("name"))
        if spec["_target_"] is None:
            raise ValueError(
                f"optim.name={name!r} is not valid; expected one of: {', '.join(OPTIMIZERS)}"
            )
    return spec


def _schedule(scheduler: dict, old_lr: float | None) -> dict:
    """scheduler.name -> its class in `_target_`, with only the keys the class takes; the peak
    from the old optim.lr where scheduler.peak_lr is null (noam, which has its own, ignored it)."""
    if "name" not in scheduler:
        return dict(scheduler)
    from attnlab.training import schedules

    spec = dict(scheduler)
    name = spec.pop("name")
    if name not in SCHEDULES:
        raise ValueError(
            f"scheduler.name={name!r} is not valid; expected one of: {', '.join(SCHEDULES)}"
        )
    cls = getattr(schedules, SCHEDULES[name])
    if spec.get("peak_lr") is None and name != "noam" and old_lr is not None:
        spec["peak_lr"] = old_lr
    taken = set(inspect.signature(cls).parameters)
    return {
        "_target_": f"{cls.__module__}.{cls.__name__}",
        "_partial_": True,
        **{k: v for k, v in spec.items() if k in taken},
    }
