"""Resumable data order is a property of the data modules (attnlab.data.resumable), not a patch
applied by the run: a module built anywhere skips the batches a checkpoint says were trained."""

import pytest
import torch

from attnlab.data.resumable import ResumableLoader
from attnlab.data.synthetic import SyntheticDataModule


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_a_module_built_by_hand_continues_where_the_checkpoint_says(arch):
    def fresh():
        dm = SyntheticDataModule(name="copy", arch=arch, batch_size=4, train_size=40, seed=3)
        dm.setup("fit")
        return dm

    full = list(fresh().train_dataloader())
    loader = fresh().train_dataloader()
    assert isinstance(loader, ResumableLoader)
    loader.load_state_dict({"epoch": 0, "batches_done": 3})  # no trainer: the same epoch
    resumed = list(loader)
    key = "src" if arch == "encoder_decoder" else "tokens"
    assert len(resumed) == len(full) - 3 == 7
    assert all(torch.equal(a[key], b[key]) for a, b in zip(resumed, full[3:], strict=True))


def test_evaluation_loaders_leave_the_global_rng_alone():
    dm = SyntheticDataModule(name="copy", batch_size=4, val_size=8, seed=3)
    dm.setup("validate")
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    list(dm.val_dataloader())
    assert torch.equal(torch.rand(1), expected)


class _OwnDataModule(__import__("lightning").LightningDataModule):
    """A researcher's own module (not a ResumableDataModule): batches 0, 1, ..., 9."""

    def train_dataloader(self):
        return torch.utils.data.DataLoader(list(range(10)), batch_size=1)


def test_a_module_of_ones_own_is_made_resumable_by_the_run():
    from attnlab.data.resumable import make_resumable

    dm = make_resumable(_OwnDataModule())
    loader = dm.train_dataloader()
    assert isinstance(loader, ResumableLoader)
    loader.load_state_dict({"epoch": 0, "batches_done": 4})
    assert [int(b) for b in loader] == [4, 5, 6, 7, 8, 9]
    ours = SyntheticDataModule(name="copy", batch_size=4, train_size=8)
    assert make_resumable(ours) is ours and "train_dataloader" not in vars(ours)  # no patch
