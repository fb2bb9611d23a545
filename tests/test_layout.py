"""The package layout's promises: which layers stay light, and the debug preset."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"


def modules_imported_by(code: str) -> set[str]:
    """The top-level package names in sys.modules after running `code` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {name.split(".")[0] for name in out.split()}


def test_importing_the_run_bookkeeping_does_not_import_lightning_or_torch():
    code = (
        "import attnlab.runs.identity, attnlab.runs.record, attnlab.runs.status, "
        "attnlab.runs.checkpoints, attnlab.runs.guard, attnlab.runs.loggers, attnlab.runs.wandb"
    )
    loaded = modules_imported_by(code)
    assert "lightning" not in loaded and "pytorch_lightning" not in loaded
    assert "torch" not in loaded and "wandb" not in loaded


@pytest.mark.slow
def test_the_comparison_and_sweep_runner_do_not_import_torch():
    loaded = modules_imported_by(
        "import attnlab.cli.compare, attnlab.sweeps.runner, attnlab.sweeps.summary"
    )
    assert "torch" not in loaded and "lightning" not in loaded


@pytest.mark.parametrize("module", ["problems.py", "data/options.py", "runs/status.py"])
def test_leaf_modules_import_nothing_from_attnlab(module):
    tree = ast.parse((SRC / module).read_text())
    imported = [
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    ] + [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names]
    assert not [m for m in imported if m.startswith("attnlab")], module


def test_no_import_cycle_between_data_files_text_and_tokenizer():
    """attnlab.data.files is imported by text and tokenizer users; it imports neither at module
    level (the SentencePiece check imports the tokenizer only when it runs)."""
    tree = ast.parse((SRC / "data" / "files.py").read_text())
    top_level = [n.module for n in tree.body if isinstance(n, ast.ImportFrom)]
    assert not [m for m in top_level if m and m.startswith("attnlab.data")]
    tokenizer = ast.parse((SRC / "data" / "tokenizer.py").read_text())
    assert "attnlab.data.files" not in [
        n.module for n in tokenizer.body if isinstance(n, ast.ImportFrom)
    ]


@pytest.mark.slow
def test_the_debug_preset_shrinks_any_synthetic_run_and_overrides_still_win(compose):
    cfg = compose(["debug=tiny", "model=lm_small", "data=copy", "trainer.max_steps=7"])
    assert cfg.model.d_model == 32 and cfg.model.arch == "decoder_only"
    assert cfg.trainer.max_steps == 7  # the command line wins over the preset
    assert cfg.trainer.val_check_interval == 2 and list(cfg.data.train_len) == [1, 5]
    assert compose(["debug=tiny", "experiment=length_extrapolation"]).model.d_model == 32


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Lines per module and per function (methods and nested functions included)."""
    modules, functions = {}, {}
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        name = str(path.relative_to(SRC))
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return modules, functions


@pytest.mark.slow
def test_no_module_over_450_lines_and_no_function_over_60():
    modules, functions = _sizes()
    assert len(modules) > 100 and max(functions.values()) > 40  # the census found the code
    assert {m: n for m, n in modules.items() if n > 450} == {}
    assert {f: n for f, n in functions.items() if n > 60} == {}


def _status_literals_compared(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines comparing something with a status spelled as a string ("completed")."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            items = [e for s in sides for e in (s.elts if isinstance(s, ast.Tuple) else [s])]
            if any(isinstance(e, ast.Constant) and e.value in names for e in items):
                lines.append(node.lineno)
    return lines


@pytest.mark.slow
def test_statuses_are_compared_by_their_one_home_not_spelled_again():
    from attnlab.runs.status import Status

    names = {s.value for s in Status}
    found = {
        str(path.relative_to(SRC)): lines
        for path in SRC.rglob("*.py")
        if path.name != "status.py"
        and (lines := _status_literals_compared(ast.parse(path.read_text()), names))
    }
    assert found == {}
    assert _status_literals_compared(ast.parse('s == "completed"'), names) == [1]
