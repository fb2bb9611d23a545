"""Shared fixtures: compose the real Hydra config (conf/train.yaml) and shrink it for tests."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

# One thread: on a small shared CPU, torch's default threads stall each other (the model tests
# ran 40x slower with 2 threads while another process was busy).
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf"
DATA_DIR = REPO.parent / "shared" / "data"

# A run that takes a few seconds on a CPU: conf/debug/tiny.yaml (tiny model, 4 steps, small
# evaluation sets); command-line overrides after it win.
TINY = ["debug=tiny"]


LONG_TESTS = "ATTNLAB_LONG_TESTS"


def pytest_collection_modifyitems(config, items):
    """Tests marked `long` (30 s or more on 2 cores; each has a shorter sibling in the suite)
    skip with their reason unless ATTNLAB_LONG_TESTS=1, so the suite fits CI's 15 minutes."""
    if os.environ.get(LONG_TESTS) == "1":
        return
    skip = pytest.mark.skip(reason=f"long (30 s or more on 2 cores): {LONG_TESTS}=1 runs it")
    for item in items:
        if item.get_closest_marker("long"):
            item.add_marker(skip)


@pytest.fixture
def compose():
    """compose(overrides) -> the composed DictConfig of conf/train.yaml (no Hydra run)."""
    from attnlab.config.compose import compose_config

    def _compose(overrides: list[str] | tuple[str, ...] = ()):
        return compose_config(CONF_DIR, list(overrides))

    return _compose


def model_config(model, vocab_size: int, pad_id: int):
    """The TransformerConfig of a composed cfg.model, as attnlab-train builds it
    (attnlab.pipeline.build.model_config)."""
    from attnlab.config.plain import to_plain
    from attnlab.pipeline.build import model_config as build_model_config

    plain = dict(model) if isinstance(model, dict) else to_plain(model)
    return build_model_config(plain, vocab_size, pad_id)


@pytest.fixture
def tiny_run() -> list[str]:
    """Overrides that shrink a run to a few seconds on a CPU (W&B and paths left as they are)."""
    return list(TINY)


def wandb_offline_bytes(run_dir: Path, needle: bytes, timeout_s: float = 30.0) -> bytes:
    """The bytes of the run's offline W&B files once `needle` is in them (W&B's service process
    may still be writing them when wandb.finish returns); what is there after timeout_s."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        data = b"".join(f.read_bytes() for f in run_dir.glob("wandb/offline-run-*/run-*.wandb"))
        if needle in data or time.monotonic() > deadline:
            return data
        time.sleep(0.2)


@pytest.fixture(autouse=True)
def _isolated_wandb_environment():
    """W&B keeps state in os.environ once it has run in a process (WANDB_SERVICE: the service a
    child process would join, and then find a killed run's id "in use"): each test starts
    without it, so its subprocesses start their own service; W&B variables are restored after."""
    before = {n: v for n, v in os.environ.items() if n.startswith("WANDB_")}
    os.environ.pop("WANDB_SERVICE", None)
    yield
    for name in [n for n in os.environ if n.startswith("WANDB_")]:
        del os.environ[name]
    os.environ.update(before)


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_in_pytests_folder(tmp_path_factory):
    """The suite's temporary files, its subprocesses' included (W&B's media and artifact
    folders, which W&B leaves behind), go under pytest's own folder, which pytest prunes:
    nothing is left in the system's temporary folder."""
    tmp = tmp_path_factory.mktemp("tmp")
    before = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(tmp), str(tmp)
    yield
    if before[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before[0]
    tempfile.tempdir = before[1]


@pytest.fixture(autouse=True)
def ctrl_c_enabled():
    """Ctrl-C handled as in an interactive shell, whatever this process inherited, for every
    test: a shell that starts the tests in the background (`pytest &`, `nohup .ci/run &`)
    ignores SIGINT, and then a test's own Ctrl-C (os.kill of itself) and the processes the tests
    start (sweeps, submitit jobs) would never be interrupted (three such tests failed so)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
