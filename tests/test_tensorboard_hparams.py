"""logger=tensorboard: TensorBoard's HParams tab carries the run's config and its val/ and test/
metrics (written when the run ends), not Lightning's placeholder `hp_metric` alone, so a sweep's
runs compare there offline (issue 50). Read back from the event files with TensorBoard's own
HParams plugin data."""

from __future__ import annotations

import pytest

from attnlab.pipeline.train import train

pytest.importorskip("tensorboard", reason="logger=tensorboard needs the [tensorboard] extra")


def _hparams_records(log_dir) -> dict:
    """{plugin tag: the HParamsPluginData message} of every HParams summary in log_dir."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    found = {}
    for tag, content in events.PluginTagToContent("hparams").items():
        found[tag] = plugin_data_pb2.HParamsPluginData.FromString(content)
    return found, events


@pytest.mark.slow
def test_the_hparams_tab_gets_the_config_and_the_runs_metrics(compose, tmp_path):
    ovs = ["debug=tiny", "logger=tensorboard", f"paths.run_dir={tmp_path}", "model.n_heads=2"]
    results = train(compose(ovs), ovs)
    assert results["status"] == "completed"
    records, events = _hparams_records(tmp_path / "tensorboard")
    experiment = records["_hparams_/experiment"].experiment
    names = {m.name.tag for m in experiment.metric_infos}
    assert {"val/nll_best", "test/loss", "test/exact_match"} <= names
    assert "hp_metric" not in names and not any(n.startswith("train/") for n in names)
    session = records["_hparams_/session_start_info"].session_start_info
    assert session.hparams["model.n_heads"].number_value == 2
    assert session.hparams["scheduler._target_"].string_value.endswith("Cosine")
    # the keys an ablation varies and those the command set, not the whole config (128 keys,
    # paths and every _target_, before)
    from attnlab.runs.record import ABLATION_KEYS

    assert set(session.hparams) == {*ABLATION_KEYS, "debug", "model.n_heads"}
    scalars = events.Tags()["scalars"]  # the values the tab shows are these scalars' last ones
    for name in names:
        assert name in scalars, name
    (last,) = events.Scalars("val/nll_best")[-1:]
    assert last.value == pytest.approx(results["metrics"]["val/nll_best"], rel=1e-6)
