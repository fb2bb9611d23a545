"""attnlab's commands as processes of their own, forked from an interpreter that has already
imported torch, Lightning and Hydra, instead of started as a fresh Python each.

A fresh Python spends 6-10 s of CPU on 2 cores importing torch and Lightning before a tiny run
trains anything; the resumption tests start a dozen runs that are killed, interrupted and
resumed. Each is still a process of its own (its own pid, memory, exit code; SIGKILL, SIGTERM
and Ctrl-C reach it alone; atexit handlers run at its end), started the way `python -m MODULE
ARGS` starts it (runpy, sys.argv, the command's environment, folder and PYTHONPATH), from an
interpreter that has imported those libraries and run nothing. What differs from a fresh
Python: the libraries' import-time state is shared with the forking interpreter (hash seed
and `random`'s state included: tests of a fresh interpreter's hash seed start a real one), and
PYTHONHASHSEED and the other PYTHON* variables that act at start-up are not applied
(PYTHONPATH, PYTHONUNBUFFERED and PYTHONWARNINGS are, and OMP_NUM_THREADS as torch's threads).

`run` is subprocess.run's subset the tests use; `popen` gives a handle with pid, poll, wait,
send_signal and kill. One forking interpreter per pytest process (xdist worker), started on
first use.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The forking interpreter: imports what attnlab-train's runs import, then reads one JSON
# request a line; for each, forks a child that runs the command and answers its pid. It reaps its
# children on SIGCHLD and writes each one's return code (subprocess's convention: -N for a
# signal) to the request's status file.
SERVER = r"""
import json, os, runpy, signal, sys, threading, types

import torch, lightning, hydra, omegaconf, tensorboard, torchmetrics  # noqa: F401
import attnlab.pipeline.train, attnlab.training.module, attnlab.runs.loggers  # noqa: F401

BASE_PATH = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
statuses = {}

def reap(signum, frame):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        path = statuses.pop(pid, None)
        if path:
            with open(path + ".tmp", "w") as f:
                f.write(str(code))
            os.replace(path + ".tmp", path)

signal.signal(signal.SIGCHLD, reap)
print(json.dumps({"ready": threading.active_count()}), flush=True)
child = None
for line in sys.stdin:
    req = json.loads(line)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # the pid is known before reaping
    pid = os.fork()
    if pid == 0:
        child = req
        break
    statuses[pid] = req["status"]
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
    print(json.dumps({"pid": pid}), flush=True)

if child is not None:  # the command, as `python -m MODULE ARGS` or `python SCRIPT ARGS` runs it
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, child["stdout"]), (2, child["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    unbuffered = bool(child["env"].get("PYTHONUNBUFFERED"))
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=1 if unbuffered else -1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    os.chdir(child["cwd"])
    os.environ.clear()
    os.environ.update(child["env"])
    extra = [p for p in child["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    if child["env"].get("OMP_NUM_THREADS", "").isdigit():  # torch reads it when imported
        torch.set_num_threads(int(child["env"]["OMP_NUM_THREADS"]))
    if child["env"].get("PYTHONWARNINGS"):  # as start-up applies it (after -W options: none)
        import warnings
        warnings._processoptions(child["env"]["PYTHONWARNINGS"].split(","))
    argv = child["argv"]
    if argv[0] == "-c":
        sys.path[:] = ["", *extra, *BASE_PATH]
        sys.argv = ["-c", *argv[2:]]
        main = types.ModuleType("__main__")  # a real __main__ module, as `python -c` has
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    elif argv[0] == "-m":
        sys.path[:] = [os.getcwd(), *extra, *BASE_PATH]
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.path[:] = [os.path.dirname(os.path.abspath(argv[0])), *extra, *BASE_PATH]
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")
"""


class Forked:
    """A command's process, forked by the Server (subprocess.Popen's subset the tests use)."""

    def __init__(self, pid: int, args: list[str], files: dict[str, Path], server_alive=None):
        self.pid, self.args, self._files = pid, args, files
        self.returncode: int | None = None
        self._server_alive = server_alive or (lambda: True)

    def poll(self) -> int | None:
        if self.returncode is None and self._files["status"].exists():
            self.returncode = int(self._files["status"].read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            if not self._server_alive() and self.poll() is None:  # its exit is never recorded
                raise RuntimeError(f"the forking interpreter died while {self.args} ran")
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def output(self, name: str) -> str:
        """What the process wrote to stdout or stderr so far."""
        return self._files[name].read_text(errors="replace")


class Server:
    """The forking interpreter (SERVER) of this pytest process."""

    def __init__(self):
        self._dir = Path(tempfile.mkdtemp(prefix="attnlab-forked-"))
        self._count = 0
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env={**os.environ, "PYTHONPATH": ""},
        )  # fmt: skip
        ready = json.loads(self._proc.stdout.readline() or "null")
        # forking an interpreter that runs threads would copy their locks in whatever state
        assert ready == {"ready": 1}, f"the forking interpreter did not start cleanly: {ready}"

    def popen(self, args: list[str], env: dict | None = None, cwd: Path | str | None = None):
        """Start `args` ([sys.executable, "-m", MODULE, ...], [sys.executable, "-c", CODE, ...]
        or [sys.executable, SCRIPT, ...])."""
        if args[0] != sys.executable:
            raise ValueError(f"forked commands start with sys.executable, not {args[0]!r}")
        self._count += 1
        files = {k: self._dir / f"{self._count}.{k}" for k in ("stdout", "stderr", "status")}
        request = {
            "argv": list(args[1:]),
            "env": dict(os.environ if env is None else env),
            "cwd": str(cwd or os.getcwd()),
            **{k: str(v) for k, v in files.items()},
        }
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        pid = json.loads(self._proc.stdout.readline())["pid"]
        return Forked(pid, list(args), files, lambda: self._proc.poll() is None)

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=30)


_SERVER: Server | None = None


def server() -> Server:
    global _SERVER
    if _SERVER is None or _SERVER._proc.poll() is not None:
        _SERVER = Server()
        atexit.register(_SERVER.close)
    return _SERVER


def popen(args: list[str], env: dict | None = None, cwd: Path | str | None = None) -> Forked:
    """Start the command (see Server.popen) as a forked process; its output goes to files."""
    return server().popen(args, env=env, cwd=cwd)


def run(
    args: list[str], env: dict | None = None, cwd: Path | str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    with the command forked (raises TimeoutExpired after killing it, as subprocess.run does)."""
    proc = popen(args, env=env, cwd=cwd)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess(
        args, proc.returncode, proc.output("stdout"), proc.output("stderr")
    )
