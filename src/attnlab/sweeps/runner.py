"""Run sweep trials locally: one process per trial, N at a time, each pinned to its own GPUs.

Each trial runs in its own session (process group), so a trial that starts DDP workers is stopped
as a whole, and Ctrl-C reaches the runner first: it interrupts the running trials, waits for them
to shut down, and records every trial.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.runs.gpu_share import MEMORY_SHARE_ENV
from attnlab.runs.identity import defining_overrides
from attnlab.runs.status import (
    EXIT_BAD_CONFIG,
    EXIT_CODES,
    FINAL_STATUSES,
    Status,
    status_from_exit_code,
)
from attnlab.sweeps.spec import Trial

STOP_GRACE_S = 15.0  # time given to interrupted trials (SIGINT) before SIGKILL
POLL_S = 0.05


@dataclass
class TrialResult:
    trial: Trial
    status: str = Status.NOT_STARTED  # a final status (attnlab.runs.status), or not_started
    exit_code: int | None = None
    wall_time_s: float | None = None
    metric: float | None = None
    gpus: str | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)  # this attempt's "<prog>: warning:" lines

    @property
    def results_path(self) -> Path | None:
        path = self.trial.run_dir / "results.json" if self.trial.run_dir else None
        return path if path is not None and path.exists() else None

    @property
    def log_path(self) -> Path | None:
        return self.trial.run_dir / "trial.log" if self.trial.run_dir else None


def gpu_groups(gpus: str | None, gpus_per_trial: int) -> list[str]:
    """'0,1,2,3' with 2 per trial -> ['0,1', '2,3']; [] without --gpus."""
    if gpus_per_trial < 1:
        raise ValueError(f"--gpus-per-trial={gpus_per_trial} must be >= 1")
    if not gpus:
        if gpus_per_trial != 1:
            raise ValueError("--gpus-per-trial needs --gpus (the device ids to share out)")
        return []
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if len(set(ids)) != len(ids):
        raise ValueError(f"--gpus={gpus} lists a device twice")
    if len(ids) % gpus_per_trial != 0:
        raise ValueError(
            f"--gpus-per-trial={gpus_per_trial} does not divide the {len(ids)} devices of "
            f"--gpus={gpus}; use a divisor of {len(ids)}"
        )
    return [",".join(ids[i : i + gpus_per_trial]) for i in range(0, len(ids), gpus_per_trial)]


def gpu_slots(groups: Sequence[str], trials_per_gpu: int) -> list[str]:
    """Each GPU group `trials_per_gpu` times, groups interleaved so that trials spread over the
    GPUs before they share one: ['0', '1'] x 2 -> ['0', '1', '0', '1']."""
    if trials_per_gpu < 1:
        raise ValueError(f"--trials-per-gpu={trials_per_gpu} must be >= 1")
    if trials_per_gpu > 1 and not groups:
        raise ValueError("--trials-per-gpu needs --gpus (the device ids to share out)")
    return [g for _ in range(trials_per_gpu) for g in groups]


def mps_running() -> bool:
    """Is a CUDA MPS control daemon serving this user? Its pipe directory (the
    CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps) holds a `control` pipe while it runs; with
    it, the kernels of the trials sharing a GPU run concurrently instead of time-sliced."""
    pipes = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
    return (pipes / "control").exists()


def sharing_line(trials_per_gpu: int) -> str:
    """How several trials share each GPU, said once at the start of a packed sweep."""
    mps = (
        "CUDA MPS is running: their kernels run concurrently"
        if mps_running()
        else "CUDA MPS is not running: they time-slice the GPU "
        "(start it with `nvidia-cuda-mps-control -d` for concurrent kernels)"
    )
    share = 1 / trials_per_gpu
    return f"{trials_per_gpu} trials per GPU, each limited to {share:.0%} of its memory; {mps}"


def trial_env(gpus: str | None, memory_share: float | None = None) -> dict[str, str]:
    """The runner's environment, with this interpreter's bin/ first on PATH (so `attnlab-train`
    is the one installed beside attnlab-sweep), CUDA_VISIBLE_DEVICES set to the trial's GPUs
    and, when trials share a GPU, the fraction of its memory each may take."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    if memory_share is not None:
        env[MEMORY_SHARE_ENV] = f"{memory_share:.6g}"
    return env


def read_results(run_dir: Path | None) -> dict | None:
    """results.json of a finished trial, or None when absent or unreadable."""
    if run_dir is None:
        return None
    try:
        data = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def completed_earlier(trial: Trial, kept: Sequence[str] = (Status.COMPLETED,)) -> dict | None:
    """results.json of an earlier run of this very trial that ended with a status of `kept`
    (default: completed), or None: the same defining overrides, the rule by which attnlab-train
    itself would answer "already completed" (attnlab.runs.identity). A resumed sweep keeps such
    a trial without starting its process (about 12 s of imports each on a small CPU, just to
    hear that); a study's stage 1 keeps failed and diverged ones too (each trial runs once)."""
    results = read_results(trial.run_dir)
    if not results or results.get("status") not in kept:
        return None
    recorded = results.get("overrides") or []
    return results if defining_overrides(recorded) == defining_overrides(trial.overrides) else None


def kept_as_ended(result: TrialResult, kept: Sequence[str], metric_name: str) -> bool:
    """True, with `result` set from its results.json, when an earlier run of the trial ended
    with a status of `kept` (completed_earlier); False, `result` untouched, otherwise."""
    results = completed_earlier(result.trial, kept)
    if results is None:
        return False
    result.status = Status(results["status"])
    result.exit_code = EXIT_CODES.get(result.status)
    result.wall_time_s = results.get("wall_time_s")
    result.metric = _metric(results, metric_name)
    if result.status != Status.COMPLETED:
        result.error = str(results.get("error") or result.status)
    return True


def _metric(results: dict | None, name: str) -> float | None:
    """The numeric metric `name` of a results.json, else None."""
    value = ((results or {}).get("metrics") or {}).get(name)
    return float(value) if isinstance(value, (int, float)) else None


def finish(result: TrialResult, exit_code: int, interrupted: bool, metric_name: str) -> None:
    """Set status, metric and error from results.json (whose status wins) and the exit code."""
    result.exit_code = exit_code
    # Exit 2: the trial was refused before it ran; a results.json there is an older run's.
    results = None if exit_code == EXIT_BAD_CONFIG else read_results(result.trial.run_dir)
    status = results.get("status") if results else None
    if status not in FINAL_STATUSES:
        status = status_from_exit_code(exit_code, interrupted)
        status = (
            Status.FAILED if status == Status.CONFIG_ERROR else status
        )  # counted as a failed trial
    result.status = status
    result.metric = _metric(results, metric_name)
    result.warnings = attempt_warnings(result.log_path)
    if status != Status.COMPLETED:
        error = (results or {}).get("error")
        if not error:
            error = "bad config" if exit_code == EXIT_BAD_CONFIG else f"exit code {exit_code}"
            last = _last_line(result.log_path)
            error = f"{error}: {last}" if last and status == Status.FAILED else error
        result.error = str(error)


def attempt_warnings(path: Path | None) -> list[str]:
    """The warnings the trial's last attempt printed (its `<program>: warning: ...` lines in
    trial.log after the attempt's `$ <command>` line), each once, in order."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except (OSError, AttributeError):
        return []
    starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
    found = [ln.strip() for ln in lines[starts[-1] if starts else 0 :] if ": warning: " in ln]
    return list(dict.fromkeys(w for w in found if w.split(": warning: ")[0].startswith("attnlab")))


def warning_lines(result: TrialResult, shown: set[str]) -> list[str]:
    """The console lines for a trial's warnings not shown before in this sweep (`shown` is
    updated): the same warning from every trial of a grid is printed once."""
    new = [w for w in result.warnings if w not in shown]
    shown.update(new)
    return [f"          {result.trial.label}: {w}" for w in new]


def _last_line(path: Path | None) -> str | None:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines()]
    except (OSError, AttributeError):
        return None
    lines = [ln for ln in lines if ln]
    return lines[-1][:200] if lines else None


def run_trials(
    trials: Sequence[Trial],
    parallel: int = 1,
    groups: Sequence[str] = (),
    metric_name: str = "val/nll",
    log: Callable[[str], None] = print,
    memory_share: float | None = None,
    kept: Sequence[str] = (Status.COMPLETED,),
    env: dict[str, str] | None = None,
    launcher=None,
) -> list[TrialResult]:
    """Run every trial (each needs a run_dir), `parallel` at a time; each running trial holds one
    GPU group from `groups` (a group listed K times, gpu_slots, runs K trials at once, each
    limited to `memory_share` of its memory). A failed trial does not stop the others. Ctrl-C
    (KeyboardInterrupt) interrupts the running trials and returns with the rest not_started.
    A trial an earlier run ended with a status of `kept` is kept as it ended, not started. `env`
    is added to every trial's environment. `launcher` (attnlab.sweeps.cluster.ClusterLauncher):
    each trial a cluster job instead of a local process, `parallel` of them in flight."""
    pool = _TrialPool(trials, parallel, groups, metric_name, log, memory_share, kept, env, launcher)
    try:
        pool.run()
    except KeyboardInterrupt:
        pool.interrupt()
    return pool.results


class _TrialPool:
    """The trials waiting, the processes running (with their GPU groups), the results."""

    def __init__(
        self, trials, parallel: int, groups, metric_name: str, log, memory_share=None,
        kept=(Status.COMPLETED,), env=None, launcher=None,
    ) -> None:  # fmt: skip
        self.results = [TrialResult(t) for t in trials]
        self.pending = deque(self.results)
        self.groups = list(groups)
        self.free = deque(groups)
        self.slots = min(parallel, len(groups)) if groups else parallel
        self.running: dict[subprocess.Popen, tuple[TrialResult, float, object]] = {}
        self.warned: set[str] = set()  # trial warnings already on the console
        self.metric_name, self.log = metric_name, log
        self.memory_share: float | None = memory_share
        self.kept: tuple[str, ...] = tuple(kept)
        self.env: dict[str, str] = dict(env or {})  # added to every trial's environment
        self.launcher = launcher  # None: local processes; else cluster jobs (sweeps.cluster)

    def run(self) -> None:
        while self.pending or self.running:
            while self.pending and len(self.running) < self.slots:
                result = self.pending.popleft()
                if not self.keep(result):
                    self.start(result)
            done = [p for p in self.running if p.poll() is not None]
            for proc in done:
                self.reap(proc)
            if not done:
                time.sleep(POLL_S)

    def interrupt(self) -> None:
        self.log(f"interrupted: stopping {len(self.running)} running trial(s)")
        stop(list(self.running))
        for proc in list(self.running):
            self.reap(proc, interrupted=True)

    def _progress(self, result: TrialResult) -> str:
        return f"[{result.trial.index + 1}/{len(self.results)}]"

    def keep(self, result: TrialResult) -> bool:
        """A trial that ended (completed; or a status of self.kept) in an earlier run of the
        sweep: recorded as it ended, not started."""
        if not kept_as_ended(result, self.kept, self.metric_name):
            return False
        label = f"{self._progress(result)} kept      {result.trial.label}"
        self.log(f"{label} ({result.status} earlier)")
        return True

    def start(self, result: TrialResult) -> None:
        """Start the trial's process, its output appended to <run_dir>/trial.log (an earlier
        attempt's output stays above it)."""
        trial = result.trial
        result.gpus = self.free.popleft() if self.groups else None
        try:
            with _ctrl_c_deferred():  # a started process is always in self.running
                env = {**trial_env(result.gpus, self.memory_share), **self.env}
                proc, logfile = launch(trial, env, result.gpus, self.launcher)
                self.running[proc] = (result, time.monotonic(), logfile)
        except OSError as err:
            self.release(result)
            result.status, result.exit_code, result.wall_time_s = Status.FAILED, None, 0.0
            result.error = f"could not start {trial.command[0]!r}: {err.strerror or err}"
            self.log(f"{self._progress(result)} failed    {trial.label}: {result.error}")
            return
        gpus = f" on GPUs {result.gpus}" if result.gpus is not None else ""
        self.log(f"{self._progress(result)} started   {trial.label}{gpus}")

    def release(self, result: TrialResult) -> None:
        if result.gpus is not None:
            self.free.append(result.gpus)

    def reap(self, proc: subprocess.Popen, interrupted: bool = False) -> None:
        """Record the ended trial (results.json's status, its metric) and free its GPUs."""
        result, t0, logfile = self.running.pop(proc)
        if logfile is not None:
            logfile.close()
        result.wall_time_s = time.monotonic() - t0
        finish(result, proc.returncode, interrupted, self.metric_name)
        self.release(result)
        metric = "" if result.metric is None else f" {self.metric_name}={result.metric:.4g}"
        error = f": {result.error}" if result.error and result.status != Status.COMPLETED else ""
        self.log(
            f"{self._progress(result)} {result.status:<9} {result.trial.label}"
            f"{metric} ({result.wall_time_s:.1f} s){error}"
        )
        for line in warning_lines(result, self.warned):
            self.log(line)


def launch(trial: Trial, env: dict[str, str], gpus: str | None = None, launcher=None):
    """Start the trial's process in its own session, its output appended to <run_dir>/trial.log
    (an earlier attempt's output stays above it); (process, open log file: close it when the
    process ends). OSError when the command cannot start. Call it inside _ctrl_c_deferred(), with
    the bookkeeping of the process, so that a Ctrl-C cannot fall between the two. With a
    `launcher`, the trial is submitted as a cluster job instead: (its JobProcess, None)."""
    trial.run_dir.mkdir(parents=True, exist_ok=True)
    logfile = open(trial.run_dir / "trial.log", "a")
    logfile.write(f"$ {shlex.join(trial.command)}\n")
    if gpus is not None:
        logfile.write(f"# CUDA_VISIBLE_DEVICES={gpus}\n")
    logfile.flush()
    if launcher is not None:
        logfile.close()
        return launcher.launch(trial.command, env, trial.run_dir / "trial.log"), None
    try:
        proc = subprocess.Popen(
            trial.command,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError:
        logfile.close()
        raise
    return proc, logfile


@contextlib.contextmanager
def _ctrl_c_deferred(signals: Sequence[int] = (signal.SIGINT,)):
    """Hold a Ctrl-C (SIGINT; or each of `signals`) that arrives inside the block until its end,
    then deliver it: a KeyboardInterrupt inside subprocess.Popen, after the fork, would leave a
    trial running that the runner does not know of and never stops. (A handler, not a blocked
    signal mask, which the child would inherit.) Outside the main thread, where handlers cannot
    be set, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum))
                for sig in signals}  # fmt: skip
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if caught:  # delivered again to the handler in place: KeyboardInterrupt, ignored, or exit
        signal.raise_signal(caught[0])


def stop(procs: Sequence[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    """SIGINT each trial's process group (Lightning shuts down cleanly on it), then SIGKILL
    whatever is still alive after `grace_s` or on a second Ctrl-C."""
    for proc in procs:
        _signal_group(proc, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        pass
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    if hasattr(proc, "signal_group"):  # a cluster job (attnlab.sweeps.cluster.JobProcess)
        proc.signal_group(sig)
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
