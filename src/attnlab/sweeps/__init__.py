"""Sweeps: W&B sweep files, expanded and run locally (attnlab-sweep) or on the W&B server."""

from attnlab.sweeps.spec import SweepError, Trial, expand_sweep, load_sweep

__all__ = ["SweepError", "Trial", "expand_sweep", "load_sweep"]
