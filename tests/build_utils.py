"""The preflight's check of one composed config, for tests: the run built dry."""

from __future__ import annotations


def dry_build(cfg) -> None:
    """attnlab.pipeline.build.build(cfg, dry=True), the Trainer's device keys left unchecked (the
    tests compose GPU presets on a CPU): ConfigRefused (a ValueError) if refused."""
    from attnlab.pipeline.build import build

    build(cfg, dry=True, local=False)
