"""The `data` config group's schemas, made from the DataModules' own option classes.

attnlab.data.configs declares each DataModule's options once (fields, defaults, `Literal`
choices); here each becomes a structured config (attnlab.config.structured) with the module as
its `_target_`, so composing checks types (`data.max_tokens=lots` fails) and unknown keys
(`data.train_src=...` under multi30k fails), and `instantiate(cfg.data)` builds the module.
The harness wires two defaults: the data follow the run's `${seed}`, and synthetic data the
model's `${model.arch}` (which decides the batch format). conf/data/<option>.yaml names
`/<ConfigStore name>@_here_` in its defaults. Rules between values are the DataModules' own
(`own_problems`), raised by their constructors when the run is built (attnlab.pipeline.build); a
text data module's `check` also reads every file first.
"""

from __future__ import annotations

from dataclasses import fields

from attnlab.config.structured import structured
from attnlab.data.configs import DATA_CONFIGS

_WIRED = {"seed": "${seed}", "arch": "${model.arch}"}


def _schema(name: str, options: type, target: str) -> type:
    own = {f.name for f in fields(options)}
    return structured(
        options,
        options.__name__,
        head=(("_target_", str, target),),
        defaults={k: v for k, v in _WIRED.items() if k in own},
        doc=f"{target}: attnlab.data.configs.{options.__name__}.",
    )


# ConfigStore name -> schema
DATA_SCHEMAS = {name: _schema(name, *entry) for name, entry in DATA_CONFIGS.items()}
