"""Where the Hydra configs live.

conf/ sits at the repository's top level and is mapped into the package as `attnlab.conf` when
it is built (setup.py), so an editable install and a wheel both find it as a package resource.
$ATTNLAB_CONF_DIR replaces it with another complete config folder (e.g. an edited copy); to add
private presets beside the shipped ones, use `--config-dir DIR` instead (README: "Your own
presets").
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path


def conf_dir() -> Path:
    """$ATTNLAB_CONF_DIR, else the configs shipped in the package (conf/ in a checkout)."""
    if os.environ.get("ATTNLAB_CONF_DIR"):
        return Path(os.environ["ATTNLAB_CONF_DIR"])
    try:
        shipped = Path(str(files("attnlab.conf")))
    except ModuleNotFoundError:  # run from a checkout that was never installed
        shipped = Path(__file__).resolve().parents[3] / "conf"
    return shipped
