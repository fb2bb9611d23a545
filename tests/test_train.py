"""Training runs, in-process (train(cfg)) and through the attnlab-train command: the run
directory, results.json, metrics, W&B offline files, failures and multirun."""

import csv
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnlab.pipeline.train import train
from cli_run_cache import multiruns

METRICS = ("loss", "nll", "perplexity", "token_acc", "exact_match")


def _run(compose, tiny_run, tmp_path, *overrides: str) -> tuple[dict, Path]:
    run_dir = tmp_path / "run"
    ovs = [*tiny_run, "logger=none", f"paths.run_dir={run_dir}", *overrides]
    results = train(compose(ovs), ovs)
    return results, run_dir


@pytest.mark.slow
@pytest.mark.parametrize(
    ("data", "model"),
    [("copy", "small"), ("reverse", "small"), ("sort", "small"), ("reverse", "lm_small")],
)
def test_short_run_writes_the_run_directory(compose, tiny_run, tmp_path, data, model):
    results, run_dir = _run(
        compose, tiny_run, tmp_path, f"data={data}", f"model={model}", "model.n_decoder_layers=1"
    )
    on_disk = json.loads((run_dir / "results.json").read_text())
    assert on_disk == results
    assert results["status"] == "completed" and results["error"] is None
    assert results["steps"] == 4 and results["wall_time_s"] > 0 and results["seed"] == 1
    metrics = results["metrics"]
    for split in ("val", "test"):
        for name in METRICS:
            assert 0 <= metrics[f"{split}/{name}"] < math.inf, f"{split}/{name}"
    for name in ("loss", "tokens_per_sec", "token_acc", "perplexity"):
        assert metrics[f"train/{name}"] > 0, name
    assert metrics["diag/grad_norm"] > 0 and metrics["diag/attn_logit_max"] > 0
    assert math.isfinite(metrics["diag/log_z"])
    assert metrics["train/lr"] >= 0  # the cosine schedule ends at 0
    assert metrics["val/loss_best"] <= metrics["val/loss"]
    assert metrics["val/exact_match_best"] >= metrics["val/exact_match"]
    assert results["config"]["model.n_heads"] == 2 and results["config"]["data"] == data
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["data"]["name"] == data
    assert (run_dir / "checkpoints" / "last.ckpt").exists()
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert {"train/loss", "train/lr", "val/loss", "val/exact_match", "test/exact_match"} <= set(
        rows[0]
    )
    assert max(float(r["train/lr"]) for r in rows if r["train/lr"]) > 0


@pytest.mark.slow
@pytest.mark.parametrize("native", [False, True])
def test_bf16_on_a_cpu_that_emulates_it_is_warned_about(
    compose, tiny_run, tmp_path, monkeypatch, capsys, native
):
    import attnlab.training.environment

    monkeypatch.setattr(attnlab.training.environment, "cpu_has_native_bf16", lambda: native)
    results, _ = _run(compose, tiny_run, tmp_path, "trainer.precision=bf16-mixed")
    assert results["status"] == "completed"
    warned = [line for line in capsys.readouterr().err.splitlines() if "emulated" in line]
    assert len(warned) == (0 if native else 1)
    if warned:
        assert warned[0].startswith("attnlab-train: warning: trainer.precision=bf16-mixed")
        assert "trainer.precision=32-true" in warned[0]


@pytest.mark.slow
def test_training_lowers_the_loss(compose, tiny_run, tmp_path):
    results, run_dir = _run(
        compose,
        tiny_run,
        tmp_path,
        "data=copy",
        "trainer.max_steps=60",
        "trainer.val_check_interval=30",
        "scheduler.peak_lr=3e-3",
        "scheduler=inverse_sqrt",
        "scheduler.warmup_steps=10",
        "callbacks=none",
    )
    with open(run_dir / "metrics.csv") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    assert len(losses) == 60
    assert sum(losses[-10:]) / 10 < 0.8 * sum(losses[:10]) / 10
    assert not (run_dir / "checkpoints").exists()  # callbacks=none: no checkpoints


@pytest.mark.slow
def test_failure_is_recorded_and_raised(compose, tiny_run, tmp_path, monkeypatch):
    from attnlab.training.module import TransformerModule

    def boom(self, batch, batch_idx):
        raise RuntimeError("boom at step 0")

    monkeypatch.setattr(TransformerModule, "training_step", boom)
    with pytest.raises(RuntimeError, match="boom"):
        _run(compose, tiny_run, tmp_path)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "failed" and "boom at step 0" in results["error"]


@pytest.mark.slow
def test_fast_dev_run_is_recorded_as_debug_with_its_metrics(compose, tiny_run, tmp_path):
    from attnlab.runs.status import exit_code

    results, run_dir = _run(compose, tiny_run, tmp_path, "trainer.fast_dev_run=true")
    assert results["status"] == "debug" and exit_code([results["status"]]) == 0
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["train/loss"] != "" for r in rows].count(True) == 1  # one batch of each split
    assert any(r["val/loss"] for r in rows) and any(r["test/loss"] for r in rows)


@pytest.mark.slow
def test_non_finite_loss_ends_the_run_as_diverged(compose, tiny_run, tmp_path, monkeypatch):
    import attnlab.training.module as module

    def nan_loss(logits, targets, label_smoothing, pad_id):
        nan = logits.sum() * float("nan")
        return nan, nan, (targets != pad_id).sum()

    monkeypatch.setattr(module, "label_smoothed_nll", nan_loss)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    results, run_dir = _run(compose, tiny_run, tmp_path, "logger=wandb")
    assert results["status"] == "diverged" and results["steps"] <= 1  # stopped at once
    assert json.loads((run_dir / "results.json").read_text())["status"] == "diverged"
    (run_file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    assert _wandb_exit_codes(run_file) == [3]  # W&B marks the run failed (diverged: 3)


def _wandb_records(run_file: Path) -> list:
    """The records of an offline W&B run file (a LevelDB-style log of protobufs), as far as it
    has been written."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    records, pos, block, payload = [], 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (length == 0 and kind == 0):  # block trailer
            pos += left
            continue
        payload += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4) and pos <= len(data):  # FULL or LAST fragment, all written
            record = pb.Record()
            record.ParseFromString(payload)
            records.append(record)
            payload = b""
    return records


def _wandb_config(run_file: Path) -> dict:
    """The config W&B recorded in an offline run file."""
    config = {}
    for record in _wandb_records(run_file):
        kind_name = record.WhichOneof("record_type")
        items = {"config": record.config.update, "run": record.run.config.update}
        for item in items.get(kind_name, []):
            config[item.key] = json.loads(item.value_json)
        if kind_name == "run":
            config["_run_name"] = record.run.display_name
            config["_run_group"] = record.run.run_group
    return config


def _wandb_exit_codes(run_file: Path, timeout_s: float = 30.0) -> list[int]:
    """The exit codes of the run file's exit records, once there is one (W&B's service process
    may still be writing the file when wandb.finish returns); [] after timeout_s."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        records = _wandb_records(run_file)
        codes = [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"]
        if codes or time.monotonic() > deadline:
            return codes
        time.sleep(0.2)


ABLATION = [
    "model.pos_encoding=rope",
    "model.norm_position=post",
    "model.n_heads=2",
    "scheduler=noam",
    "scheduler.warmup_steps=200",
]
EXPECTED = {
    "model.pos_encoding": "rope",
    "model.norm_position": "post",
    "model.n_heads": 2,
    "scheduler.warmup_steps": 200,
}


@pytest.mark.slow
def test_ablation_keys_reach_config_results_and_wandb(compose, tiny_run, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    run_dir = tmp_path / "run"
    ovs = [*tiny_run, "logger=wandb", f"paths.run_dir={run_dir}", *ABLATION, "callbacks=none"]
    results = train(compose(ovs), ovs)

    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    recorded = json.loads((run_dir / "results.json").read_text())
    run_files = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 1
    wandb_config = _wandb_config(run_files[0])
    for key, value in EXPECTED.items():
        group, field = key.split(".")
        assert saved[group][field] == value, key
        assert recorded["config"][key] == value, key
        assert wandb_config[key] == value, key
    assert recorded["config"]["scheduler"] == "noam"  # a group choice: recorded as the choice
    noam = "attnlab.training.schedules.Noam"
    assert saved["scheduler"]["_target_"] == recorded["config"]["scheduler._target_"] == noam
    assert wandb_config["scheduler._target_"] == noam
    assert recorded["overrides"] == ovs and recorded["wandb_run_id"] == results["wandb_run_id"]
    assert recorded["wandb_run_id"] in run_files[0].name
    assert wandb_config["_run_name"].endswith("-pe=rope-norm=post-h=2-sched=noam-wu=200")


@pytest.mark.slow
def test_wandb_disabled_writes_no_wandb_files(compose, tiny_run, tmp_path, monkeypatch):
    """WANDB_MODE=disabled turns W&B off; Lightning's offline logger used to replace it with
    WANDB_MODE=dryrun and write an offline run anyway."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    results, run_dir = _run(compose, tiny_run, tmp_path, "logger=wandb", "callbacks=none")
    assert results["status"] == "completed" and results["wandb_run_id"] is None
    assert not (run_dir / "wandb").exists()
    assert os.environ["WANDB_MODE"] == "disabled"


@pytest.mark.slow
def test_an_offline_run_leaves_the_environment_as_it_found_it(
    compose, tiny_run, tmp_path, monkeypatch, capsys
):
    """Two offline runs in one process (a multirun's jobs): the second gives the real reason,
    not the WANDB_MODE=dryrun that Lightning's offline logger sets."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for seed in (1, 2):
        _run(compose, tiny_run, tmp_path / str(seed), "logger=wandb", "callbacks=none")
        assert "WANDB_MODE" not in os.environ
    offline = [ln for ln in capsys.readouterr().out.splitlines() if "W&B is offline" in ln]
    assert len(offline) == 2 and all("no W&B API key" in ln for ln in offline)


@pytest.mark.slow
def test_multirun_from_the_command_line_writes_one_record_per_job(tmp_path_factory):
    """`attnlab-train -m seed=1,2 name=mr logger=wandb` (W&B offline; cli_run_cache.multiruns,
    its first command line): one record, run folder and W&B run per job, in one W&B group."""
    folder, ran = multiruns(tmp_path_factory)
    assert ran["runs"][0]["code"] == 0, ran["out"][-3000:]
    records = sorted((folder / "multirun" / "mr").glob("*/results.json"))
    assert len(records) == 2  # one deterministic directory per job: <run name>-<hash>
    groups = set()
    for job, path in enumerate(records, start=1):
        results = json.loads(path.read_text())
        assert results["status"] == "completed" and results["seed"] == job
        assert f"seed={job}" in results["overrides"] and results["config"]["seed"] == job
        assert (path.parent / "metrics.csv").exists() and (path.parent / "config.yaml").exists()
        (run_file,) = path.parent.glob("wandb/offline-run-*/run-*.wandb")
        wandb_config = _wandb_config(run_file)
        assert wandb_config["seed"] == job and f"s={job}" in wandb_config["_run_name"].split("-")
        groups.add(wandb_config["_run_group"])
    assert groups == {"mr"}  # one W&B group per sweep: the experiment name by default


@pytest.mark.slow
@pytest.mark.long
def test_default_run_learns_reverse(tmp_path):
    """`attnlab-train` with no arguments (W&B off): test exact match >= 0.95. (Long: the whole
    default run; the short runs above test the same command on debug=tiny.)"""
    env = {**os.environ, "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "-m", "attnlab.cli.train", "paths.root=runs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = (tmp_path / "runs" / "default").glob("*/results.json")
    results = json.loads(record.read_text())
    assert results["status"] == "completed"
    assert results["metrics"]["test/exact_match"] >= 0.95


@pytest.mark.slow
def test_each_unnamed_multirun_gets_its_own_dated_folder(tmp_path_factory, tmp_path, capsys):
    """Two multiruns without name= (seed=1, then seed=2, a second apart; cli_run_cache.multiruns,
    its second and third command lines): two folders, nothing overwritten or mixed;
    attnlab-compare on their parent says that it mixes them."""
    from attnlab.cli import compare

    shared, ran = multiruns(tmp_path_factory)
    assert [run["code"] for run in ran["runs"][1:]] == [0, 0], ran["out"][-3000:]
    root = shared / "dated"
    folders = sorted((root / "default").iterdir())
    assert len(folders) == 2 and all(f.name[:4].isdigit() for f in folders)  # <date>_<time>
    for folder, seed in zip(folders, (1, 2), strict=True):
        (record,) = folder.glob("*/results.json")
        assert json.loads(record.read_text())["seed"] == seed
        assert (folder / "multirun.yaml").is_file()
    assert compare.main([str(root), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert (
        f"note: these runs come from 2 multiruns or sweeps:\n  {folders[0]}\n  {folders[1]}\n"
        in out
    )


def _plain_module_class():
    import lightning as L
    import torch.nn.functional as F

    class PlainModule(L.LightningModule):
        """A LightningModule of one's own (no TransformerModule): the keywords build_module
        gives, a cross-entropy on the task's inputs and targets, the config's optimizer."""

        def __init__(self, model, task, optim, scheduler, **rest):
            super().__init__()
            self.model, self.task, self.optim = model, task, optim

        def _nll(self, batch):
            logits = self.model(*self.task.inputs(batch))
            return F.cross_entropy(
                logits.flatten(0, 1), self.task.targets(batch).flatten(),
                ignore_index=self.model.config.pad_id,
            )  # fmt: skip

        def training_step(self, batch, batch_idx):
            return self._nll(batch)

        def validation_step(self, batch, batch_idx):
            self.log("val/nll", self._nll(batch), batch_size=len(batch[self.task.source_key]))

        def test_step(self, batch, batch_idx):
            self.log("test/nll", self._nll(batch), batch_size=len(batch[self.task.source_key]))

        def configure_optimizers(self):
            return self.optim(self.model.parameters(), lr=3e-3)

    return PlainModule


PlainModule = _plain_module_class()


@pytest.mark.slow
def test_a_lightning_module_of_ones_own_trains_from_module_target(compose, tiny_run, tmp_path):
    """module._target_ may name any LightningModule taking the built model, the task and the
    optimizer and schedule partials: the run completes, tests and records its metrics."""
    results, run_dir = _run(compose, tiny_run, tmp_path, f"module._target_={__name__}.PlainModule")
    assert results["status"] == "completed"
    assert math.isfinite(results["metrics"]["test/nll"]) and "nll_init" not in results
    assert list((run_dir / "checkpoints").glob("best-step=*.ckpt"))  # selected on its val/nll
