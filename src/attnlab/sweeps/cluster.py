"""Trials as cluster jobs: `attnlab-sweep FILE --launcher slurm` submits each trial of a sweep or
a study (and a study's evaluations) as a SLURM job through submitit, the library Hydra's SLURM
launcher is built on; `--launcher submitit_local` runs the very same path as local processes
(how the tests run it: this machine has no SLURM).

A job runs the trial's command (`attnlab-train ...`) as a child in its own session, its output
appended to the trial's trial.log, and returns its exit code; the runner reads the trial's
results.json as it does for a local trial (the run folders must be on a filesystem the nodes
share). The runner holds at most `--parallel` jobs in flight. Stopping the sweep (Ctrl-C)
cancels its jobs: the job passes the signal on to the trial, which records `interrupted` and
resumes when the sweep is run again. Near a job's time limit submitit's signal (SIGUSR2, 90 s
before by default) makes the job stop its trial the same way (SIGTERM: a checkpoint) and requeue
itself; the requeued job runs the same command, which resumes the trial from that checkpoint.
GPUs: SLURM gives each job `--gpus-per-trial` of them (no `--gpus`); a trial on several runs DDP
with Lightning's own launcher (the job's SLURM task count is hidden from the trial, so Lightning
does not expect one SLURM task per GPU).
"""

from __future__ import annotations

import difflib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

LAUNCHERS = ("local", "slurm", "submitit_local")
# conf/hydra/launcher/slurm.yaml's defaults for one job, as submitit's names (`--launcher-opt
# KEY=VALUE` overrides or adds any of submitit's parameters: slurm_partition, slurm_account, ...)
DEFAULTS = {"timeout_min": 1440, "cpus_per_task": 8, "mem_gb": 64, "nodes": 1, "tasks_per_node": 1}
GRACE_S = 60.0  # a trial stopped before a requeue gets this long to checkpoint (a cancel: the
# cluster's own grace, SLURM's KillWait)
# SLURM's task layout, hidden from the trial: Lightning would otherwise expect one task per GPU
HIDDEN = ("SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS")


def add_arguments(p) -> None:
    """attnlab-sweep's --launcher and --launcher-opt."""
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="local",
        help="where trials run: local processes (default), or each a SLURM job through submitit "
        "(slurm; submitit_local runs that path here); --parallel caps the jobs in flight",
    )
    p.add_argument(
        "--launcher-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a submitit parameter for every job (slurm_partition=gpu, timeout_min=600, "
        "mem_gb=32, slurm_account=...); defaults: conf/hydra/launcher/slurm.yaml's",
    )


def check_arguments(args, searched: bool = False) -> None:
    """ValueError (one line) for a launcher that cannot run this sweep (`searched`: a search,
    attnlab.cli.sweep.searched) with these arguments."""
    if args.launcher == "local":
        if args.launcher_opt:
            raise ValueError("--launcher-opt needs --launcher slurm or submitit_local")
        return
    _executor(args.launcher, None, parse_options(args.launcher_opt))  # bad options: one line
    clash = next((name for name, on in (("--gpus", args.gpus), ("--wandb", args.wandb),
                  ("--trials-per-gpu", args.trials_per_gpu > 1)) if on), None)  # fmt: skip
    if clash:
        raise ValueError(
            f"--launcher {args.launcher} with {clash}: SLURM gives each job its own GPUs "
            "(--gpus-per-trial N of them) and the runs are the runner's, not W&B agents'"
        )
    if searched:
        raise ValueError(
            f"--launcher {args.launcher}: a search runs its trials locally (not yet as cluster "
            "jobs); run the search itself inside a job"
        )


def from_arguments(args, out: Path):
    """The trials' ClusterLauncher for attnlab-sweep's arguments, or None for local processes."""
    if args.launcher == "local":
        return None
    per_trial = args.gpus_per_trial if args.launcher == "slurm" else 0
    return ClusterLauncher(args.launcher, out, per_trial, parse_options(args.launcher_opt))


def _executor(kind: str, folder: Path | None, options: Mapping):
    """submitit's executor for `kind` with DEFAULTS and `options` (folder None: a temporary one,
    to check the options); ValueError (one line) where it cannot be made."""
    import shutil
    import tempfile

    import submitit

    if kind not in LAUNCHERS[1:]:
        raise ValueError(f"--launcher {kind}: expected one of {', '.join(LAUNCHERS[1:])}")
    if kind == "slurm" and shutil.which("srun") is None:
        raise ValueError(
            "--launcher slurm: no SLURM here (srun not found); run it where sbatch and srun "
            "are, or try the path locally with --launcher submitit_local"
        )
    for key in ("nodes", "tasks_per_node"):
        if options.get(key, 1) != 1:
            raise ValueError(
                f"--launcher-opt {key}={options[key]}: a trial is one task on one node "
                "(several GPUs: --gpus-per-trial, DDP inside the job)"
            )
    if folder is None:
        with tempfile.TemporaryDirectory() as tmp:
            return _executor(kind, Path(tmp), options)
    cluster = "slurm" if kind == "slurm" else "local"
    executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    try:
        executor.update_parameters(**{**DEFAULTS, **options})
    except (ValueError, TypeError, NameError) as err:
        shared = sorted(submitit.AutoExecutor._valid_parameters())
        bad = [k for k in options if k not in shared and not k.startswith(("slurm_", "local_"))]
        if bad:  # a misspelled name: say which, and the names there are
            close = difflib.get_close_matches(bad[0], shared, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(
                f"--launcher-opt {bad[0]}: not a submitit parameter{hint}; its shared ones: "
                f"{', '.join(shared)}; SLURM's own as slurm_<name> (slurm_partition=gpu)"
            ) from None
        raise ValueError(f"--launcher-opt: {str(err).splitlines()[0]}") from None
    return executor


def parse_options(items: Sequence[str]) -> dict:
    """`--launcher-opt KEY=VALUE` items as submitit parameters (values read as YAML: 60 is an
    int, gpu a string); ValueError naming the item that is not KEY=VALUE."""
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--launcher-opt {item}: expected KEY=VALUE (slurm_partition=gpu)")
        options[key.strip()] = yaml.safe_load(value)
    return options


class TrialCommand:
    """The callable a job runs: the trial's command in its own session, its output appended to
    `log`, the environment the job has plus `env`; returns the exit code. Checkpointable (its
    `checkpoint` is submitit's requeue hook): a job near its time limit stops the trial (SIGTERM)
    and is resubmitted with the same command."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str], log: str) -> None:
        self.command, self.env, self.log = list(command), dict(env), log
        self._proc: subprocess.Popen | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_proc": None}  # the running child is this process's own

    def __call__(self) -> int:
        env = {k: v for k, v in os.environ.items() if k not in HIDDEN}
        env.update(self.env)
        env["PYTHONUNBUFFERED"] = "1"  # this interpreter's bin/ first, as the runner does locally
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        self._passed: set[int] = set()
        previous = {s: signal.signal(s, self._pass_on) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            with open(self.log, "a") as out:
                self._proc = subprocess.Popen(
                    self.command, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                )  # fmt: skip
                # poll, never a blocking wait(): submitit's requeue handler (checkpoint) runs
                # on this thread and must be able to poll the child while we wait for it
                while self._proc.poll() is None:
                    time.sleep(0.2)
                return self._proc.returncode
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _pass_on(self, signum, frame) -> None:
        """A cancelled job (SIGINT locally, SIGTERM from scancel): the trial gets the signal
        once (Lightning stops cleanly and the run records `interrupted`; a second SIGINT would
        make it stop at once, without its checkpoint); the job waits for it."""
        if self._proc is not None and self._proc.poll() is None and signum not in self._passed:
            self._passed.add(signum)
            signal_group(self._proc.pid, signum)

    def checkpoint(self, *args, **kwargs):
        """submitit's hook before a requeue (time limit or preemption): stop the trial with
        SIGTERM, give it GRACE_S to checkpoint, then resubmit this command (it resumes)."""
        from submitit.helpers import DelayedSubmission

        stop_child(self._proc)
        return DelayedSubmission(TrialCommand(self.command, self.env, self.log))


def stop_child(proc: subprocess.Popen | None, grace_s: float = GRACE_S) -> None:
    """SIGTERM to the trial's group, then SIGKILL after `grace_s`; polls only (a blocking
    wait() would deadlock inside the requeue handler, TrialCommand.__call__ being in poll)."""
    if proc is None or proc.poll() is not None:
        return
    signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if proc.poll() is None:
        signal_group(proc.pid, signal.SIGKILL)
        while proc.poll() is None:
            time.sleep(0.05)


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group `pid` leads; gone or not ours: nothing."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def alive(pid: int, group: bool = False) -> bool:
    """Is process `pid` (with `group`: the process group it leads) still there? One that is
    not ours counts as there."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # there, but not ours
        pass
    return True


class JobProcess:
    """A submitted job seen as the runner sees a local trial's process: poll, wait, returncode,
    and signal_group (any stop signal cancels the job; the job passes it on to the trial)."""

    def __init__(self, job) -> None:
        self.job, self.returncode, self.pid = job, None, None
        self.cancelled = False

    def poll(self) -> int | None:
        if self.returncode is None and self.job.done():
            self.returncode = self._code()
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.5)
        return self.returncode

    def signal_group(self, sig: int) -> None:
        if not self.cancelled or sig == signal.SIGKILL:
            self.cancelled = True
            self.job.cancel(check=False)

    def _code(self) -> int:
        try:
            code = self.job.result()
        except Exception:  # the job died (killed, out of memory, node failure): its logs say
            return -signal.SIGINT if self.cancelled else 1
        return int(code) if isinstance(code, int) else 1


class ClusterLauncher:
    """Submits trials (and evaluations) as jobs of one submitit executor, its job files in
    <sweep folder>/.submitit."""

    def __init__(self, kind: str, folder: Path, gpus_per_trial: int = 0, options=None) -> None:
        import threading

        self.kind, self.lock, self.evaluating = kind, threading.Lock(), []
        params = {"gpus_per_node": gpus_per_trial} if gpus_per_trial else {}
        params.update(options or {})
        self.executor = _executor(kind, folder / ".submitit", params)

    def launch(self, command: Sequence[str], env: Mapping[str, str], log: Path,
               name: str | None = None) -> JobProcess:  # fmt: skip
        """Submit one command as job `name` (default: its log's folder, the trial); its output
        is appended to `log` (the job's id written there). `env`: the runner's environment for
        it; only what differs from this process's own goes with the job (the node's
        environment, SLURM's variables and devices, is kept; PATH is the node's with this
        interpreter's bin/ first). OSError when the cluster refuses the job."""
        extra = {k: v for k, v in env.items() if os.environ.get(k) != v and k != "PATH"}
        try:
            with self.lock:  # the name and the submission together (evaluations use threads)
                self.executor.update_parameters(name=(name or log.parent.name)[:64])
                job = self.executor.submit(TrialCommand(command, extra, str(log)))
        except Exception as err:  # sbatch's refusal (a QOS limit, a timeout): a failed trial
            raise OSError(f"{self.kind} refused the job: {str(err).strip()[:300]}") from None
        with open(log, "a") as f:
            f.write(f"# {self.kind} job {job.job_id}\n")
        return JobProcess(job)

    def call(self, argv: Sequence[str], log: Path, env: Mapping[str, str]) -> int:
        """attnlab.sweeps.evaluate's `call`: an evaluation as a job, waited for; its code."""
        log.write_text(f"$ attnlab-eval {' '.join(argv)}\n")
        try:
            job = self.launch([sys.executable, "-m", "attnlab.cli.eval", *argv], env, log,
                              name=f"eval-{log.parent.parent.name}")  # fmt: skip
        except OSError as err:
            log.write_text(log.read_text() + f"{err}\n")
            return 1
        self.evaluating.append(job)
        return job.wait()

    def cancel_evaluations(self) -> None:
        """Cancel the evaluation jobs still running (Ctrl-C during a study's evaluations)."""
        for job in self.evaluating:
            if job.poll() is None:
                job.signal_group(signal.SIGINT)
