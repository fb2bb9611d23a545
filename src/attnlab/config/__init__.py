"""The config: composition only. The rules are the components' own, asked when a run is built
(attnlab.pipeline.build); the preflight is that build done dry.

    schema.py       the ConfigStore: the model group (from attnlab.model.config), optim,
                    scheduler, loss, loggers, checkpoints, paths; registers the data schemas
    structured.py   OmegaConf-typed copies of the dataclasses that declare options (Literal
                    choices -> str, checked by their class when built): the one bridge, so no
                    option is declared twice
    data_schema.py  the data group's schemas, from attnlab.data.configs
    trainer_schema.py  every lightning.Trainer argument
    plain.py        composed configs as plain Python
    compose.py      the command line's jobs composed, Hydra's errors in one line (the
                    preflight, attnlab.pipeline.preflight, builds each dry)
    file_cache.py   each config file parsed once per process, not once per compose
    resolvers.py    ${attnlab_*:...} resolvers (run directory, world size, accumulation)
    location.py     where conf/ is

Importing this package imports nothing heavy; each module imports what it needs.
"""
