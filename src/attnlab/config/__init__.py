"""The config: its schema (Hydra structured configs), validation and the preflight.

    schema.py       the ConfigStore: the model group (from attnlab.model.config), optim,
                    scheduler, loss, loggers, checkpoints, paths; registers the data schemas
    structured.py   OmegaConf-typed copies of the dataclasses that declare options (Literal
                    choices -> Enums): the one bridge, so no option is declared twice
    data_schema.py  the data group's schemas, from attnlab.data.configs
    trainer_schema.py  every lightning.Trainer argument
    plain.py        composed configs as plain Python
    validate.py     checks between groups, before anything is built
    values.py       checks of single values the schema cannot express
    data_check.py   the data preflight: every data file read before training starts
    trainer_check.py  what Lightning would refuse on this machine
    preflight.py    the command line composed and validated: one-line errors, exit 2
    run.py          a run's one call into config/: checks (unless the preflight ran), plain tree
    resolvers.py    ${attnlab_*:...} resolvers (run directory, world size, accumulation)
    location.py     where conf/ is

Importing this package imports nothing heavy; each module imports what it needs.
"""
