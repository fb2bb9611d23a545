"""Deterministic run identity: same run, same directory and W&B id; different run, different."""

from attnlab.run_identity import defining_overrides, run_dir_name, run_hash, wandb_run_id


def test_same_run_same_name_whatever_the_order_and_the_plumbing():
    a = ["model.n_heads=2", "seed=3", "logger=csv", "paths.root=/x", "resume=auto"]
    b = ["seed=3", "model.n_heads=2", "trainer.enable_progress_bar=false", "group=g"]
    assert run_dir_name("exp", a, 3) == run_dir_name("exp", b, 3)
    assert defining_overrides(a) == ["model.n_heads=2", "seed=3"]


def test_what_defines_a_run_changes_the_hash():
    base = run_hash("exp", ["model.n_heads=2"], 1)
    assert run_hash("exp", ["model.n_heads=4"], 1) != base
    assert run_hash("exp", ["model.n_heads=2"], 2) != base  # seed
    assert run_hash("other", ["model.n_heads=2"], 1) != base  # experiment name
    assert run_hash("exp", ["model.n_heads=2", "trainer.max_steps=10"], 1) != base


def test_readable_names_and_fresh_directories():
    name = run_dir_name("exp", ["model.pos_encoding=rope", "model.n_heads=8"], 1)
    assert name.startswith("h_8-pe_rope-") and "=" not in name
    assert run_dir_name("exp", [], 1).startswith("default-")
    fresh = run_dir_name("exp", [], 1, fresh=True)
    assert fresh.startswith(run_dir_name("exp", [], 1) + "-") and fresh != run_dir_name(
        "exp", [], 1
    )


def test_wandb_id_follows_the_run_directory(tmp_path):
    assert wandb_run_id(tmp_path / "a") == wandb_run_id(tmp_path / "a")
    assert wandb_run_id(tmp_path / "a") != wandb_run_id(tmp_path / "b")
