"""Shared fixtures: compose the real Hydra config (conf/train.yaml) and shrink it for tests."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf"
DATA_DIR = REPO.parent / "shared" / "data"

# A run that takes a few seconds on a CPU: tiny model, few steps, small evaluation sets.
TINY = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "data.batch_size=16",
    "data.train_len=[1,5]",
    "data.eval_len=[1,5]",
    "data.val_size=32",
    "data.test_size=32",
    "scheduler.warmup_steps=2",
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
    "trainer.log_every_n_steps=1",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
]


@pytest.fixture
def compose():
    """compose(overrides) -> the composed DictConfig of conf/train.yaml (no Hydra run)."""
    from attnlab.cli_errors import compose_config

    def _compose(overrides: list[str] | tuple[str, ...] = ()):
        return compose_config(CONF_DIR, list(overrides))

    return _compose


@pytest.fixture
def tiny_run() -> list[str]:
    """Overrides that shrink a run to a few seconds on a CPU (W&B and paths left as they are)."""
    return list(TINY)
