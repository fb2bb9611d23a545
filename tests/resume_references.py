"""The uninterrupted runs that tests/test_resume_rows.py and tests/test_resume.py compare their
interrupted-and-resumed runs with, and the commands they share.

A fresh Python that imports torch and Lightning takes seconds before it trains anything, so the
two uninterrupted runs are made once per pytest session, one after the other in one fresh
interpreter, by whichever test (on whichever xdist worker) asks first; the other tests wait for
them and read their folders (theirs to read, not to write). Every interrupted run and every
resume is a process of its own (`python -m attnlab.cli.train`), as a user's would be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

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
    ("interrupt_test", "CtrlCDuringTest", 0),
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


# attnlab-train's entry point once per argv, one after the other in this one interpreter (each
# its own command line, as the console script runs it), printing each one's exit code; an argv
# ["copy", SRC, DST] copies the folder SRC to DST instead (what a run left, before the next).
DRIVER = """
import json, shutil, sys
import attnlab.cli.train as train

for argv in json.loads(sys.argv[1]):
    if argv[:1] == ["copy"]:
        shutil.copytree(argv[1], argv[2], symlinks=True)
        continue
    train._EXIT_STATUSES.clear()  # one command's statuses: its exit code
    sys.argv = ["attnlab-train", *argv]
    try:
        train.main()
        code = 0
    except SystemExit as e:
        code = e.code
    print("EXIT", code, flush=True)
"""


def references(tmp_path_factory) -> Path:
    """The session's folder of the two uninterrupted runs, made on the first call: rows/
    (ROWS_RUN, every interrupt spent: markers/) and whole/ (KILL_RUN)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    folder, done = root / "resume-references", root / "resume-references.json"
    with FileLock(str(root / "resume-references.lock")):
        if not done.exists():
            folder.mkdir()
            argvs = [
                [*KILL_RUN, f"paths.root={folder / 'whole'}"],
                [*ROWS_RUN, *interrupts(folder / "markers"), f"paths.root={folder / 'rows'}"],
            ]
            env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(folder)}
            proc = subprocess.run(
                [sys.executable, "-c", DRIVER, json.dumps(argvs)],
                capture_output=True,
                text=True,
                env=fixtures_env(env),
                cwd=folder,
                timeout=600,
            )
            codes = [line.split()[1] for line in proc.stdout.splitlines() if line[:5] == "EXIT "]
            assert codes == ["0", "0"], (proc.stdout + proc.stderr)[-3000:]
            done.write_text(json.dumps({"codes": codes}))
    return folder
