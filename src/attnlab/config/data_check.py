"""The data preflight: find a broken data file or a bad data argument before any work starts.

`check_data_config(cfg.data)` applies the configured DataModule's own argument rules and reads
every file it will read, in full (attnlab.data.files), without training a tokenizer or
downloading anything. Each problem is one line that starts with the config key.
"""

from __future__ import annotations

from collections.abc import Mapping

from attnlab.config.targets import located_class
from attnlab.data.files import DataFile, as_path, file_problems


class DataConfigError(ValueError):
    """Problems with the data config or its files, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def _datamodule_class(target):
    """The text DataModule class named by `_target_`, or None (synthetic, unknown, not text)."""
    from attnlab.data.text import TokenizedDataModule

    cls = located_class(target)
    return cls if cls is not None and issubclass(cls, TokenizedDataModule) else None


def check_data_config(data_cfg: Mapping) -> list[str]:
    """One line per problem with the data config `data_cfg` (as in conf/data/*.yaml); [] if fine.

    `_target_` names the DataModule; the other keys are its constructor arguments. Synthetic
    data and unknown targets have nothing to check here. Reads every data file in full; never
    trains a tokenizer or downloads (a missing file that would be downloaded is not a problem).
    """
    cls = _datamodule_class(data_cfg.get("_target_"))
    if cls is None:
        return []
    kwargs = {k: v for k, v in data_cfg.items() if not (k.startswith("_") and k.endswith("_"))}
    args, problems = cls.arguments(kwargs)
    problems += cls.arg_problems(args) + ([] if problems else cls.place_problems(args))
    groups = list(cls.expected_files(args))
    if tokenizer_path := as_path(args.get("tokenizer_path")):
        groups.append([DataFile("data.tokenizer_path", tokenizer_path, kind="sentencepiece")])
    return problems + file_problems(groups)
