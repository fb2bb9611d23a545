"""attnlab-train answers --help, shell completion and config errors without loading torch,
Lightning or W&B (they take seconds to import): what a command imports, not how long it takes."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "lightning", "pytorch_lightning", "wandb")


def _train_command(*argv: str, env: dict | None = None) -> tuple[int, str, set[str]]:
    """Run attnlab-train's entry point with `argv` in a fresh interpreter: its exit code, its
    output and the top-level packages it imported."""
    code = (
        "import sys\n"
        f"sys.argv = ['attnlab-train', *{list(argv)!r}]\n"
        "from attnlab.cli.train import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    lines = proc.stdout.splitlines()
    modules = set(lines[-1].split()[1:]) if lines and lines[-1].startswith("MODULES") else set()
    return proc.returncode, proc.stdout + proc.stderr, modules


def test_help_imports_no_torch_lightning_or_wandb():
    code, out, modules = _train_command("--help")
    assert code == 0 and "model.pos_encoding" in out  # the composed config was shown
    assert modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.n_head=3", "model.n_head is not a key of model"),
        ("model.pos_encoding=foo", "model.pos_encoding='foo' is not valid"),
        ("model.d_model=30", "model.d_model=30 is not divisible by"),
    ],
)
def test_config_errors_import_no_torch(override, message):
    code, out, modules = _train_command(override)
    assert code == 2 and message in out
    assert modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_shell_completion_imports_no_torch():
    import os

    env = {**os.environ, "COMP_LINE": "attnlab-train model.pos_"}
    code, out, modules = _train_command("--shell-completion", "query=bash", env=env)
    assert code == 0 and "model.pos_encoding=" in out
    assert modules and not modules & set(HEAVY), sorted(modules & set(HEAVY))
