"""Checkpoint discovery for resume=auto: newest good file first, bad files reported."""

import os

import torch

from attnlab.runs.checkpoints import checkpoint_problem, find_resume_checkpoint
from attnlab.training.callbacks import periodic_checkpoints


def save(path, step):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {"w": torch.ones(100)}, "global_step": step}, path)
    os.utime(path, ns=(step * 10**9, step * 10**9))  # mtime follows the step
    return path


def test_newest_good_checkpoint_wins_and_bad_ones_are_reported(tmp_path):
    save(tmp_path / "checkpoints" / "step=10.ckpt", 10)
    good = save(tmp_path / "checkpoints" / "step=20.ckpt", 20)
    bad = save(tmp_path / "checkpoints" / "last.ckpt", 30)
    bad.write_bytes(bad.read_bytes()[:200])
    os.utime(bad, ns=(30 * 10**9, 30 * 10**9))
    said = []
    assert find_resume_checkpoint(tmp_path, say=said.append) == good
    assert len(said) == 1 and str(bad) in said[0] and "falling back" in said[0]


def test_lightning_preemption_checkpoints_count(tmp_path):
    save(tmp_path / "checkpoints" / "step=10.ckpt", 10)
    hpc = save(tmp_path / "hpc_ckpt_1.ckpt", 11)
    assert find_resume_checkpoint(tmp_path) == hpc


def test_no_checkpoint_and_foreign_files(tmp_path):
    assert find_resume_checkpoint(tmp_path) is None
    torch.save({"weights": torch.ones(2)}, tmp_path / "x.ckpt")
    assert "not a Lightning training checkpoint" in checkpoint_problem(tmp_path / "x.ckpt")


def test_periodic_checkpoints_follow_the_config(tmp_path):
    both = periodic_checkpoints(tmp_path, every_n_steps=100, every_minutes=10, keep_last=5)
    assert [c.save_top_k for c in both] == [5, 5]
    assert periodic_checkpoints(tmp_path, None, None, 5) == []


def test_a_checkpoints_folder_averages_up_to_the_runs_final_step(tmp_path):
    """A time-limited run's last step is often only in best-step=N (or timed-step=N, behind
    last.ckpt): averaging the folder includes it instead of silently stopping at the last
    periodic file, says which steps it averages, and warns when the newest is before the run's
    end."""
    from attnlab.evaluation.checkpoints import averaging_note, checkpoint_paths

    for name in ("step=100.ckpt", "step=200.ckpt", "best-step=289.ckpt"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "last.ckpt").symlink_to("best-step=289.ckpt")
    names = [p.name for p in checkpoint_paths(tmp_path)]
    assert names == ["step=100.ckpt", "step=200.ckpt", "best-step=289.ckpt"]
    assert [p.name for p in checkpoint_paths(tmp_path, last=2)] == names[1:]
    paths = checkpoint_paths(tmp_path)
    assert averaging_note(paths, 289) == "steps averaged: 100, 200, 289"
    assert averaging_note(paths[:2], 289) == (
        "steps averaged: 100, 200; warning: the newest is step 200, 89 steps before the run's "
        "last (289): the final model is not in it"
    )
    (tmp_path / "step=289.ckpt").write_bytes(b"x")  # the final step once: the periodic file
    assert [p.name for p in checkpoint_paths(tmp_path)][-2:] == ["step=200.ckpt", "step=289.ckpt"]
