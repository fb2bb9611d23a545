"""Where the Hydra configs live."""

from __future__ import annotations

import os
from pathlib import Path


def conf_dir() -> Path:
    """conf/ at the repository root, or $ATTNLAB_CONF_DIR."""
    return Path(os.environ.get("ATTNLAB_CONF_DIR") or Path(__file__).resolve().parents[3] / "conf")
