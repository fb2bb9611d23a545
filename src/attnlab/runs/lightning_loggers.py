"""Lightning's CSV, W&B and TensorBoard loggers, made to continue a resumed run's history
(attnlab.runs.history): one step axis, every logging step once. Imported when loggers are built."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only

from attnlab.runs.history import (
    STEP,
    read_csv,
    rows_to_replay,
    wandb_history,
    wandb_segments,
)


class _ContinuingWriter(ExperimentWriter):
    """metrics.csv that a resumed attempt continues instead of deleting (Lightning's writer
    deletes it): at the first save, earlier attempts' rows before the first new step stay."""

    def __init__(self, log_dir: str) -> None:
        self._continuing = True
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:  # Lightning's version deletes metrics.csv
        pass

    def save(self) -> None:
        if self._continuing and self.metrics:
            self._continuing = False
            self._keep_rows_before(min(int(m[STEP]) for m in self.metrics))
        super().save()

    def _keep_rows_before(self, step: int) -> None:
        path = Path(self.metrics_file_path)
        header, rows = read_csv(path)
        if not header:
            return
        kept = [r for r in rows if r.get(STEP) and int(float(r[STEP])) < step]
        self.metrics_keys = sorted(set(header) | set().union(*self.metrics))
        tmp = path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(kept)
        tmp.replace(path)


class ContinuingCSVLogger(CSVLogger):
    """<run_dir>/metrics.csv, written at every logging step (a SIGKILL loses at most the row
    being written) and continued by a resumed attempt."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(save_dir=str(run_dir), name="", version="", flush_logs_every_n_steps=1)

    @property
    def experiment(self) -> _ContinuingWriter:
        if self._experiment is None:
            self._experiment = _ContinuingWriter(log_dir=self.log_dir)
        return self._experiment


class _Replaying:
    """At the first logged step R of an attempt, first log the rows of metrics.csv before R
    that this logger does not hold (`_held`), then go on; rows it holds are not logged twice."""

    def _setup_replay(self, previous_rows: list[dict]) -> None:
        self._previous_rows = previous_rows
        self._held_rows: Counter | None = None

    def _held(self) -> Counter:
        return Counter()

    @rank_zero_only
    def log_metrics(self, metrics, step=None) -> None:
        if self._held_rows is None and step is not None:
            self._held_rows = self._held()
            for row in rows_to_replay(self._previous_rows, step, self._held_rows):
                self._log_row({k: v for k, v in row.items() if k != STEP}, row[STEP])
        if step is not None and self._held_rows and self._held_rows[step] > 0:
            self._held_rows[step] -= 1  # an earlier attempt logged this row already
            return
        self._log_row(metrics, step)


class ReplayingTensorBoardLogger(_Replaying, TensorBoardLogger):
    """Event files in <run_dir>/tensorboard. A resumed attempt starts its file with a purge at
    step 0 (TensorBoard then ignores the earlier files) and replays metrics.csv into it. The
    HParams tab gets the run's config and its val/ and test/ metrics when the run ends
    (record_hparams), not Lightning's placeholder `hp_metric`, so a sweep's runs compare there."""

    def __init__(self, run_dir: Path, previous_rows: list[dict], subdir: str) -> None:
        log_dir = Path(run_dir) / subdir
        purge = {"purge_step": 0} if any(log_dir.glob("events.out.tfevents.*")) else {}
        super().__init__(
            save_dir=str(run_dir), name=subdir, version="", default_hp_metric=False, **purge
        )
        self._setup_replay(previous_rows)

    @rank_zero_only
    def record_hparams(self, metrics: dict[str, float], keys: dict | None = None) -> None:
        """The HParams tab's record of this run: `keys` (the keys an ablation varies and those
        the command set, as results.json's "config" holds them; without it, everything
        log_hyperparams stored) and the names of `metrics`, whose values TensorBoard reads from
        the run's scalars of the same names (logged during the run). Written once, at the end,
        when the names are known."""
        from torch.utils.tensorboard.summary import hparams

        params = {
            k: v if isinstance(v, (bool, int, float, str)) else str(v)
            for k, v in (dict(self.hparams) if keys is None else keys).items()
        }
        writer = self.experiment._get_file_writer()
        for summary in hparams(params, dict(metrics)):
            writer.add_summary(summary)
        writer.flush()

    def _log_row(self, metrics, step) -> None:
        TensorBoardLogger.log_metrics(self, metrics, step)


class ReplayingWandbLogger(_Replaying, WandbLogger):
    """W&B with `_step` continuous over the attempts of a run (each offline attempt is its own
    directory) and the rows a killed attempt's file lost replayed from metrics.csv."""

    def __init__(self, previous_rows: list[dict], **kwargs) -> None:
        super().__init__(**kwargs)
        # Lightning passes anonymous=None to wandb.init, which W&B (0.19+) answers on every run
        # with "The anonymous setting has no effect"; the setting is gone from W&B, so drop it.
        self._wandb_init.pop("anonymous", None)
        self._setup_replay(previous_rows)
        self._next_step: int | None = None

    def earlier_segments(self) -> list[Path]:
        """The offline directories of the earlier attempts of this run, oldest first."""
        run = self.experiment
        current = Path(run.dir).parent
        return [s for s in wandb_segments(Path(self.save_dir), run.id) if s != current]

    def _held(self) -> Counter:
        run = self.experiment
        held: Counter = Counter()
        last_step = run.starting_step - 1
        for segment in self.earlier_segments():
            for item in wandb_history(segment):
                last_step = max(last_step, int(item.get("_step", -1)))
                if "trainer/global_step" in item:
                    held[int(item["trainer/global_step"])] += 1
        self._next_step = last_step + 1
        return held

    def _log_row(self, metrics, step) -> None:
        if self._next_step is None:
            self._next_step = self.experiment.starting_step
        row = dict(metrics)
        if step is not None:
            row["trainer/global_step"] = step
        self.experiment.log(row, step=self._next_step)
        self._next_step += 1
