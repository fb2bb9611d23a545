"""The uninterrupted runs that tests/test_resume_rows.py and tests/test_resume.py compare their
interrupted-and-resumed runs with, and the commands they share.

The two uninterrupted runs are made once per pytest session, by whichever test (on whichever
xdist worker) asks first (cli_run_cache.shared); the other tests wait for them and read their
folders (theirs to read, not to write). Every run, interrupted, resumed or not, is a process
of its own (`python -m attnlab.cli.train`, forked from an interpreter that has imported torch
and Lightning: tests/forked.py), as a user's would be.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import forked
from cli_run_cache import shared
from conftest import TINY

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# test_resume_rows.py's run: rows every 5 steps, validations every 10, checkpoints every 5, a
# sanity check (debug=tiny skips it).
ROWS_RUN = [
    *TINY,
    "trainer.max_steps=40",
    "trainer.val_check_interval=10",
    "trainer.log_every_n_steps=5",
    "checkpoint.every_n_steps=5",
    "model.dropout=0.1",  # dropout draws must continue exactly after a resume
    "logger=csv",
    "trainer.num_sanity_val_steps=2",
]

# Every interrupt of test_resume_rows.py: (callback key, class in tests/fixtures/interrupts.py,
# step). Each command of that file carries them all, each with its own marker file; an interrupt
# fires once, when its marker is missing, so a test arms the ones it wants and the others are
# spent (the uninterrupted run has them all spent: the same command, interrupted nowhere).
INTERRUPTS = [
    ("interrupt_sanity", "CtrlCDuringSanityCheck", 0),
    ("interrupt_saving", "CtrlCWhileSavingCheckpoint", 15),
    ("interrupt_step20", "CtrlCAfterStep", 20),  # a logging and validation step
    ("interrupt_kill", "KillDuringValidation", 30),  # after step 30's checkpoint, before its row
    ("interrupt_final_val", "CtrlCDuringValidation", 40),  # the last validation, after the
    ("interrupt_test", "CtrlCDuringTest", 0),  # last step: no step is left to stop after
    ("interrupt_val", "CtrlCDuringValidation", 10),
    ("interrupt_term_val", "SigtermDuringValidation", 20),
    ("interrupt_step23", "CtrlCAfterStep", 23),  # off the logging grid (rows at 4, 9, 14, ...)
    ("interrupt_term_test", "SigtermDuringTest", 0),
    ("interrupt_record", "CtrlCDuringFinalRecord", 0),
    ("interrupt_sweep", "CtrlCAfterStep", 27),
]


def interrupts(markers: Path, armed: tuple[str, ...] = ()) -> list[str]:
    """The overrides of every interrupt in INTERRUPTS, their markers in `markers`: those whose
    key is in `armed` fire (once each), the others are spent."""
    markers.mkdir(parents=True, exist_ok=True)
    overrides = []
    for key, kind, step in INTERRUPTS:
        if key not in armed:
            (markers / key).touch()
        overrides += [
            f"+callbacks.{key}._target_=interrupts.{kind}",
            f"+callbacks.{key}.step={step}",
            f"+callbacks.{key}.marker={markers / key}",
        ]
    return overrides


# test_resume.py's run: a row every step, validations every 20, checkpoints every 5, W&B
# (offline) and TensorBoard.
KILL_RUN = [
    *TINY,
    "trainer.max_steps=40",
    "trainer.val_check_interval=20",
    "checkpoint.every_n_steps=5",
    "model.dropout=0.1",  # dropout draws must continue exactly after a resume
    "logger=[wandb,tensorboard]",
]


def fixtures_env(env: dict) -> dict:
    """`env` with tests/fixtures on PYTHONPATH (where `interrupts` is imported from)."""
    path = os.pathsep.join(filter(None, [str(FIXTURES), env.get("PYTHONPATH")]))
    return {**env, "PYTHONPATH": path}


def references(tmp_path_factory) -> Path:
    """The session's folder of the two uninterrupted runs, made on the first call (each a
    process of its own, forked: tests/forked.py): rows/ (ROWS_RUN, every interrupt spent:
    markers/) and whole/ (KILL_RUN)."""

    def start(folder: Path) -> dict:
        env = fixtures_env({**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(folder)})
        train = [sys.executable, "-m", "attnlab.cli.train"]
        whole = [*train, *KILL_RUN, f"paths.root={folder / 'whole'}"]
        rows = [*train, *ROWS_RUN, *interrupts(folder / "markers"), f"paths.root={folder / 'rows'}"]
        procs = [forked.run(cmd, env=env, cwd=folder, timeout=600) for cmd in (whole, rows)]
        codes = [p.returncode for p in procs]
        assert codes == [0, 0], "".join(p.stdout[-1500:] + p.stderr[-1500:] for p in procs)
        return {"codes": codes}

    return shared(tmp_path_factory, "resume-references", start)[0]
