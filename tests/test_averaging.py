"""Checkpoint averaging."""

import pytest
import torch

from attnlab.training.averaging import average_checkpoints, average_state_dicts


def save(path, state_dict):
    torch.save({"state_dict": state_dict, "global_step": 3}, path)
    return path


def test_averaging_identical_checkpoints_is_the_identity(tmp_path):
    torch.manual_seed(0)
    sd = {"w": torch.randn(4, 3), "b": torch.randn(3), "steps": torch.tensor(7)}
    paths = [save(tmp_path / f"{i}.ckpt", sd) for i in range(5)]
    averaged = average_checkpoints(paths)
    for key, value in sd.items():
        assert torch.equal(averaged[key], value), key


def test_averaging_is_the_elementwise_mean():
    a = {"w": torch.tensor([0.0, 2.0]), "n": torch.tensor(1)}
    b = {"w": torch.tensor([1.0, 4.0]), "n": torch.tensor(2)}
    out = average_state_dicts([a, b])
    assert out["w"].tolist() == [0.5, 3.0]
    assert out["n"].item() == 2  # integers come from the last checkpoint


def test_mismatched_and_unreadable_checkpoints_are_named(tmp_path):
    with pytest.raises(ValueError, match="different parameters"):
        average_state_dicts([{"w": torch.zeros(1)}, {"v": torch.zeros(1)}])
    bad = tmp_path / "truncated.ckpt"
    save(bad, {"w": torch.zeros(1000)})
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(ValueError, match="truncated.ckpt"):
        average_checkpoints([bad])
    with pytest.raises(FileNotFoundError, match="missing.ckpt"):
        average_checkpoints([tmp_path / "missing.ckpt"])
