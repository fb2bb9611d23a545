"""Where the Hydra configs live.

conf/ sits at the repository's top level and is mapped into the package as `attnlab.conf` when
it is built (setup.py), so an editable install and a wheel both find it as a package folder.
$ATTNLAB_CONF_DIR replaces it with another complete config folder (e.g. an edited copy); to add
private presets beside the shipped ones, use `--config-dir DIR` instead (README: "Your own
presets").
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path


def conf_dir() -> Path:
    """$ATTNLAB_CONF_DIR, else the configs shipped in the package (conf/ in a checkout)."""
    if os.environ.get("ATTNLAB_CONF_DIR"):
        return Path(os.environ["ATTNLAB_CONF_DIR"]).resolve()
    try:
        spec = find_spec("attnlab.conf")  # a folder of YAML files: a namespace package
    except ModuleNotFoundError:
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / "train.yaml").is_file():
            return Path(folder).resolve()
    return Path(__file__).resolve().parents[3] / "conf"  # a checkout that was never installed
