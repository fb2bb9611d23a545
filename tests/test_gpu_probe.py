"""The GPU probe (scripts/gpu_battery.sh probe, issue 48) dry-run on the CPU: the same commands
with tiny sizes (the six attnlab-bench variants with their same arguments, in one process), so
the first call on a lent GPU does not fail on its wiring (overrides, the sweep file, the files
the table reads). The figures of a dry run mean nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="the battery is a bash script")
def test_the_probe_dry_run_writes_its_json_and_table(tmp_path):
    work = tmp_path / "repo"  # the probe writes outputs/probe/ where it runs: a copy of the repo
    work.mkdir()
    for name in ("scripts", "sweeps", "src", "conf"):
        (work / name).symlink_to(REPO / name)
    env = {**os.environ, "DRY_RUN": "1", "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(work / "scripts" / "gpu_battery.sh"), "probe"],
        cwd=work, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    probe = json.loads((tmp_path / "out" / "battery-probe.json").read_text())
    variants = [row["variant"] for row in probe["switches"]]
    assert variants == [
        "base (every switch on)",
        "no_autocast",
        "no_cuda_graphs",
        "no_fused_adam",
        "no_fused_output",
        "no_skip_padding",
    ]
    assert all(row["tokens_per_s"] > 0 for row in probe["switches"])
    out = tmp_path / "out"
    # each variant's output in its own log, as on a GPU
    logs = [out / "probe-base.log", *(out / f"probe-{v}.log" for v in variants[1:])]
    assert all("attnlab-bench: figures in" in log.read_text() for log in logs)
    assert not (out / "probe-bench.queue").exists()  # the dry run's queue of bench arguments
    # the dry run: 2 trials at once, then 1 alone (12 and 12 on a GPU)
    assert probe["trials"]["at_once"]["completed"] == 2, probe["trials"]
    assert probe["trials"]["one_at_a_time"]["completed"] == 1, probe["trials"]
    assert "trials/hour" in (tmp_path / "out" / "battery-probe.md").read_text()
