"""A search study shared on a real PostgreSQL server (issue 49): a server started for the test
(PostgreSQL's initdb and pg_ctl, as the unprivileged `postgres` user when the tests run as
root, which PostgreSQL refuses), two attnlab-sweep worker processes on one
postgresql+psycopg:// study, one killed with SIGKILL while its trial runs and started again:
every trial runs to the end once (the killed one's trial once more, in the same folder) and
the study ends with its cap of completed trials. Skipped, with the reason, where the server's
programs or the [postgres] extra are missing."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("optuna", reason="the search needs the [optuna] extra")
pytest.importorskip("psycopg", reason="a PostgreSQL study needs the [postgres] extra (psycopg)")

from attnlab.sweeps.study import ATTR_RETRY_OF, counted  # noqa: E402
from test_search import _first_attempt, _start, search_file, trials_of  # noqa: E402

pytestmark = pytest.mark.slow

INITDB, PG_CTL = shutil.which("initdb"), shutil.which("pg_ctl")


def _as_server_user(command: list[str]) -> list[str]:
    """PostgreSQL will not run as root: the command as the `postgres` user then."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres() -> str:
    """A fresh server on a Unix socket in a temporary folder: its postgresql+psycopg:// URL."""
    if not (INITDB and PG_CTL):
        pytest.skip("PostgreSQL's initdb and pg_ctl are not on PATH")
    if os.geteuid() == 0:
        try:
            server_user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no `postgres` user to run the server")
    # not under pytest's temporary folder (the tests' TMPDIR), which only its owner may enter
    shared = "/tmp" if Path("/tmp").is_dir() else None
    root = Path(tempfile.mkdtemp(prefix="attnlab-postgres-", dir=shared))
    data, sockets = root / "data", root / "socket"
    sockets.mkdir()
    if os.geteuid() == 0:
        for path in (root, sockets):
            os.chown(path, server_user.pw_uid, server_user.pw_gid)
    run = dict(check=True, capture_output=True, text=True, timeout=120)
    subprocess.run(
        _as_server_user([INITDB, "-D", str(data), "-U", "postgres", "-A", "trust"]), **run
    )
    port = _free_port()
    options = f"-k {sockets} -p {port} -c listen_addresses=''"
    log = root / "server.log"
    subprocess.run(
        _as_server_user([PG_CTL, "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]),
        **run,
    )
    version = subprocess.run([INITDB, "--version"], **run).stdout.strip()
    print(f"PostgreSQL server: {version}, socket {sockets}, port {port}")
    try:
        yield f"postgresql+psycopg://postgres@/postgres?host={sockets}&port={port}"
    finally:
        subprocess.run(
            _as_server_user([PG_CTL, "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


def test_two_workers_on_postgresql_run_every_trial_once_after_one_is_killed(tmp_path, postgres):
    hang = tmp_path / "hang"
    hang.touch()
    path = search_file(tmp_path, knobs=["fake.sleep=0.3", f"fake.hang={hang}"], run_cap=6)
    out = tmp_path / "out"
    args = [str(path), "--out", str(out), "--storage", postgres]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    doomed = _start(args, **pipes)
    attempts = _first_attempt(out)  # its first trial hangs until `hang` goes
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=60)
    hang.unlink()
    workers = [_start(args, **pipes) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in workers]
    assert [p.returncode for p in workers] == [0, 0], outputs
    trials = trials_of(postgres)
    states = [t.state.name for t in trials]
    assert states.count("COMPLETE") == 6 and states.count("FAIL") == 1, states
    retried = [t for t in trials if ATTR_RETRY_OF in t.user_attrs]
    assert len(retried) == 1 and retried[0].user_attrs["attnlab:run_dir"] == attempts.parent.name
    assert len(counted(trials)) == 6
    run_dirs = [out / t.user_attrs["attnlab:run_dir"] for t in counted(trials)]
    assert len(set(run_dirs)) == 6
    for run_dir in run_dirs:  # each trial's run once, the killed one's once more
        runs = (run_dir / "attempts.log").read_text().split()
        assert len(runs) == (2 if run_dir == attempts.parent else 1), run_dir
        assert json.loads((run_dir / "results.json").read_text())["status"] == "completed"
    owners = {t.user_attrs["attnlab:owner"] for t in counted(trials)}
    assert len(owners) >= 2, "the two restarted workers shared the study"
    print(f"trials: {states}; owners: {sorted(owners)}")
