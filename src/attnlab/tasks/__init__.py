"""Tasks: what differs between training on sentence pairs and on one token stream.

Each task is one module of this package, named as the data modules name their batches' task
(`datamodule.task == "seq2seq"` is seq2seq.py), holding one Task subclass (base.py) exported as
`TASK`. A task says which keys its batches carry, how a batch becomes the model's teacher-forced
inputs and targets, how the model's whole-sequence answers are predicted (exact match), and
which keys the attention maps label their axes with, and whether a data module of its batches can
feed a given model (`fit_problem`, asked by the run's builder). The LightningModule, its
diagnostics, the attention maps and the benchmark's FLOP count ask the task; none of them
branches on its name. A new task is
a new module here (and its test); `task_named(name)` imports the one a run uses.
"""

from __future__ import annotations

import importlib

from attnlab.components import module_names

NAMES: tuple[str, ...] = module_names(__file__)


def task_named(name: str):
    """The Task of `name` (one of NAMES, a data module's `task`); ValueError otherwise."""
    if name not in NAMES:
        raise ValueError(f"data task {name!r} is not valid; expected one of: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}").TASK
