"""Lightning's model summary without its FLOPs column.

Lightning counts FLOPs only by running the module on its `example_input_array`, which a
Transformer taking (source, target) batches does not define; its summary then prints a FLOPs
column of zeros and "0 Total Flops". attnlab-bench measures FLOPs and MFU instead.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.callbacks.model_summary import log
from lightning.pytorch.utilities.model_summary.model_summary import _format_summary_table

from attnlab.training.hooks import SkipEmptyHooks


class ParamsSummary(SkipEmptyHooks, ModelSummary):
    """The parameter table of Lightning's ModelSummary, minus the FLOPs it cannot count here."""

    @staticmethod
    def summarize(summary_data, total_parameters, trainable_parameters, model_size,
                  total_training_modes, total_flops, **summarize_kwargs) -> None:  # fmt: skip
        columns = [(name, values) for name, values in summary_data if name != "FLOPs"]
        table = _format_summary_table(
            total_parameters, trainable_parameters, model_size, total_training_modes, 0, *columns
        )
        log.info("\n" + "\n".join(l for l in table.splitlines() if not l.endswith("Total Flops")))
