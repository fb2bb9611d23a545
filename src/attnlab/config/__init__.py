"""The config: its schema (Hydra structured configs), validation and the preflight.

    schema.py       dataclasses registered in Hydra's ConfigStore, one per config group
    data_schema.py  the text data options (conf/data/*.yaml)
    plain.py        composed configs as plain Python
    validate.py     checks between fields, before anything is built
    data_check.py   the data preflight: every data file read before training starts
    preflight.py    the command line composed and validated: one-line errors, exit 2
    location.py     where conf/ is

Importing this package imports nothing heavy; each module imports what it needs.
"""
