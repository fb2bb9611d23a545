"""A wheel (not an editable install) carries the configs: built, unpacked into a folder of its
own and run from another directory, attnlab-train composes and checks its config."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_wheel_ships_the_configs_and_composes_from_any_folder(tmp_path):
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
             "-w", str(tmp_path / "dist"), str(REPO)]  # fmt: skip
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("attnlab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"attnlab/conf/{p.relative_to(REPO / 'conf')}" for p in REPO.glob("conf/**/*.yaml")}
    assert shipped and shipped <= names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what pip puts into site-packages
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import attnlab, sys; from attnlab.config.location import conf_dir; "
        "from attnlab.pipeline.preflight import preflight; "
        "print(attnlab.__file__); print(conf_dir()); "
        "print(preflight(['-m', 'debug=tiny', 'logger=csv', 'seed=1,2'], conf_dir()))"
    )
    env = {k: v for k, v in os.environ.items() if k != "ATTNLAB_CONF_DIR"}
    # -S: not this environment's site-packages (where attnlab is installed editable); its
    # dependencies come from PYTHONPATH after the wheel's folder.
    deps = [p for p in sys.path if p.endswith("site-packages")]
    env["PYTHONPATH"] = os.pathsep.join([str(site), *deps])
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    package, conf, jobs = proc.stdout.split()
    assert package.startswith(str(site)) and conf == str(site / "attnlab" / "conf")
    assert jobs == "2"
