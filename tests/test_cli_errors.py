"""Bad values end in one line on stderr naming the key (and the valid choices), exit code 2,
and no traceback: checked in-process through `preflight`, and end to end for a single run and a
multirun (the commands that only print, too: --help, --cfg job)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.config.compose import describe
from attnlab.model.config import POS_ENCODINGS
from attnlab.pipeline.preflight import preflight
from cli_run_cache import light_commands

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

BAD = [
    (
        "model.pos_encoding=foo",
        f"model.pos_encoding='foo' is not valid; expected one of: {', '.join(POS_ENCODINGS)}",
    ),
    (
        "model.norm_position=middle",
        "model.norm_position='middle' is not valid; expected one of: pre, post",
    ),
    ("model.n_heads=3", "model.n_heads=3"),
    ("modle=small", "modle is not a key of the config; did you mean model?"),  # not module
    ("modul._target_=x", "modul is not a key of the config; did you mean module?"),
    (
        "table3=A1",
        "table3 is not in the default config, so table3=<option> has nothing to "
        "replace; add it with a +: +table3=<option> (e.g. +table3=A1)",
    ),  # fmt: skip
    (
        "scheduler.name=noam",
        "scheduler.name is not a key; the schedule is chosen by its group: scheduler=<option>; "
        "expected one of: constant, cosine, inverse_sqrt, noam",
    ),
    ("scheduler=nope", "scheduler='nope' is not valid; expected one of: constant, cosine, inv"),
    ("optim.name=adamw", "optim.name is not a key; the optimizer is chosen by its group: optim="),
    ("scheduler.scale=2", "scheduler.scale is not a key of scheduler; expected one of: peak_lr,"),
    ("scheduler.warmup_steps=abc", "scheduler.warmup_steps='abc' is not valid; expected an int"),
    (
        "data=nope",  # the options read from conf/data, so a task of one's own is among them
        "data='nope' is not valid; expected one of: "
        + ", ".join(sorted(p.stem for p in (CONF_DIR / "data").glob("*.yaml"))),
    ),
    ("model.dropout=-0.1", "model.dropout=-0.1 is not valid; expected a number in [0, 1)"),
    ("trainer.max_steps=abc", "trainer.max_steps='abc' is not valid; expected an integer"),
    ("model.d_model=abc", "model.d_model='abc' is not valid; expected an integer"),
    ("model.fooo=1", "model.fooo is not a key of model; expected one of: name, arch, d_model"),
    ("module._target_=no.such.Module", "module._target_='no.such.Module' cannot be imported"),
    (
        "optim._target_=attnlab.training.nothing",
        "optim._target_='attnlab.training.nothing' cannot be found (module 'attnlab.training'",
    ),
    ("scheduler._target_=attnlab.training", "scheduler._target_='attnlab.training' is not a"),
    ("logger.wandb._target_=x.y", "logger.wandb._target_='x.y' cannot be imported"),
    ("data._target_=no.such.Data", "data._target_='no.such.Data' cannot be imported"),
    ("data.train_len=[5,2]", "data.train_len=[5, 2] is not valid"),
    (
        "trainer.fast_dev_rn=1",
        "trainer.fast_dev_rn is not a key of trainer; did you mean trainer.fast_dev_run?",
    ),
    ("trainer.logger=x", "trainer.logger is set by attnlab-train; use logger="),
    ("scheduler.peak_lr=-1", "scheduler.peak_lr=-1 is not valid; expected a number > 0"),
    ("scheduler.peak_lr=0", "scheduler.peak_lr=0 is not valid; expected a number > 0"),
    (
        "scheduler.peak_lr=null",
        "scheduler.peak_lr=null is not valid with Cosine; expected a number > 0",
    ),
    ("optim.lr=0.5", "optim.lr is not a key; the peak learning rate has one home"),
    ("loss.z_loss=-1", "loss.z_loss=-1.0 is not valid; expected a number >= 0"),
    (
        "loss.label_smoothing=1",
        "loss.label_smoothing=1.0 is not valid; expected a number in [0, 1)",
    ),
    ("optim.betas=[0.9,-0.1]", "optim.betas[1]=-0.1 is not valid; expected a number in [0, 1)"),
    ("optim.eps=-1e-9", "optim.eps=-1e-09 is not valid; expected a number >= 0"),
    ("trainer.gradient_clip_val=-1", "trainer.gradient_clip_val=-1.0 is not valid"),
    ("trainer.devices=0", "trainer.devices=0 is not valid here: `Trainer(devices=0)`"),
    (
        "trainer.max_time=soon",
        "trainer.max_time='soon' is not valid here: `Timer(duration='soon')`",
    ),
    (
        "model.compile_mode=fast",
        "model.compile_mode='fast' is not valid; expected one of: default, reduce-overhead, "
        "max-autotune, max-autotune-no-cudagraphs",
    ),
    (
        "module.divergence_check=sometimes",
        "module.divergence_check='sometimes' is not valid; expected one of: every_step, "
        "logging_steps",
    ),
    (
        "module.divergence_check=logging_steps optim.foreach=true",
        "module.divergence_check=logging_steps needs a fused optimizer",
    ),
    ("trainer.precision=17", "trainer.precision='17' is not valid here: Precision '17' is invalid"),
    # an encoding's own option, checked by the encoding (model.pos is its mapping)
    (
        "model.pos_encoding=t5_bias model.pos.num_buckets=0",
        "model.pos.num_buckets=0 is not valid; expected an integer >= 4",
    ),
    (
        "model.pos.num_buckets=8",
        "model.pos.num_buckets is not an option of model.pos_encoding='sinusoidal'; its options: "
        "none",
    ),
    # Hydra's `+` adds any key: one the schema does not know used to run to the end
    ("+foo=1", "+foo=1: foo is not a key of the config (TrainConfig)"),
    (
        "+model.n_head=4",
        "+model.n_head=4: n_head is not a key of model (ModelConfig) (did you mean model.n_heads?)",
    ),
]


def _preflight_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        preflight(argv, CONF_DIR)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("attnlab-train: error: ")
    return err.strip()


# not marked slow (0.3-0.5 s a case): the quick loop keeps one guard of the error messages
@pytest.mark.parametrize(("override", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_value_is_one_line_naming_the_key(capsys, override, message):
    assert message in _preflight_error(capsys, override.split(" "))  # one or more overrides


@pytest.mark.slow
def test_each_point_of_a_sweep_is_checked(capsys):
    err = _preflight_error(capsys, ["-m", "model.n_heads=2,3"])
    assert "model.n_heads=3" in err
    preflight(["-m", "model.n_heads=2,4", "seed=1,2"], CONF_DIR)  # every point is fine


@pytest.mark.slow
def test_good_commands_and_info_flags_pass(capsys):
    preflight([], CONF_DIR)
    preflight(["model.pos_encoding=rope", "model.norm_position=post", "model.n_heads=2"], CONF_DIR)
    preflight(["++foo=1"], CONF_DIR)  # Hydra's add-or-override: a key of ones own, on purpose
    for flags in (["--help"], ["--cfg", "job", "model.pos_encoding=foo"], ["--info"]):
        preflight(flags, CONF_DIR)  # left to Hydra
    assert capsys.readouterr().err == ""


def test_describe_collapses_unknown_errors_to_one_line():
    assert describe(ValueError("first\n  second")) == "first; second"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-m", "attnlab.cli.train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "key"),
    [
        pytest.param(["-m", "trainer=cpu,gpu"], "trainer.accelerator='gpu'", marks=NO_GPU),
        pytest.param(["trainer.accelerator=gpu"], "trainer.accelerator='gpu'", marks=NO_GPU),
        (["-m", "model.dropout=0.1,-0.5"], "model.dropout=-0.5"),
        (["experiment=multi30k_cpu", "data.root=mistyped/m"], "data.root: mistyped/m does not e"),
        (["experiment=tinyshakespeare", "data.root=mistyped/ts"], "data.root: mistyped/ts does "),
        # a mistyped data folder: one line, the folder is not created
        (["data=multi30k", "data.root=mistyped/multi30k"], "data.root: mistyped/multi30k does n"),
    ],
)
def test_the_preflight_refuses_presets_and_multiruns_in_one_line(tmp_path, monkeypatch, capsys,
                                                                 args, key):  # fmt: skip
    """In-process, as the end-to-end commands below but without a process each (about 8 s
    each: the preflight builds the run dry, so the process imports torch and Lightning)."""
    monkeypatch.chdir(tmp_path)
    assert _preflight_error(capsys, args).startswith(f"attnlab-train: error: {key}")
    assert not (tmp_path / "mistyped").exists()


def _exits_2_with_one_line(code, stdout: str, stderr: str, cwd: Path, key: str) -> None:
    """Exit code 2, one line on stderr naming `key`, no traceback, nothing written in `cwd`."""
    assert code == 2
    assert stderr.startswith(f"attnlab-train: error: {key}")
    assert stderr.count("\n") == 1 and "Traceback" not in stderr + stdout
    assert not (cwd / "outputs").exists() and not (cwd / "multirun").exists()
    assert not (cwd / "mistyped").exists()


@pytest.mark.slow
def test_command_line_exits_2_without_traceback(tmp_path):
    """`python -m attnlab.cli.train -m data=multi30k data.root=mistyped/multi30k
    data.download=true,false`: the second job's data folder is mistyped, so the multirun stops
    before its first job (which would download into that folder) with one line; no download
    attempt, the folder is not created, nothing is written."""
    args = ["-m", "data=multi30k", "data.root=mistyped/multi30k", "data.download=true,false"]
    proc = _cli(*args, cwd=tmp_path)
    key = "data.root: mistyped/multi30k does n"
    _exits_2_with_one_line(proc.returncode, proc.stdout, proc.stderr, tmp_path, key)


@pytest.mark.slow
def test_a_single_run_exits_2_without_traceback(tmp_path_factory):
    """`attnlab-train model.pos_encoding=foo` in a fresh interpreter, in an empty folder
    (cli_run_cache.light_commands)."""
    folder, ran = light_commands(tmp_path_factory)
    run = ran["runs"]["model.pos_encoding=foo"]
    key = "model.pos_encoding='foo'"
    _exits_2_with_one_line(run["code"], run["stdout"], run["stderr"], folder, key)


@pytest.mark.slow
def test_cfg_job_resolve_prints_the_resolved_config(tmp_path_factory):
    """`attnlab-train --cfg job --resolve seed=3` (cli_run_cache.light_commands)."""
    _, ran = light_commands(tmp_path_factory)
    run = ran["runs"]["cfg_resolve"]
    assert run["code"] == 0, run["stderr"][-2000:]
    assert "run_dir: outputs/default/s_3-" in run["stdout"] and "${" not in run["stdout"]


@pytest.mark.slow
def test_your_own_presets_come_from_config_dir(tmp_path, capsys):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(
        "# @package _global_\nmodel:\n  n_heads: 3\n"
    )
    err = _preflight_error(capsys, ["--config-dir", str(tmp_path), "experiment=mine"])
    assert "model.n_heads=3" in err  # found, composed and checked: d_model 64 is not divisible
    preflight(["--config-dir", str(tmp_path), "experiment=mine", "model.d_model=96"], CONF_DIR)


def test_help_lists_the_config_groups_and_options(tmp_path_factory):
    """`attnlab-train --help` (cli_run_cache.light_commands)."""
    _, ran = light_commands(tmp_path_factory)
    proc = ran["runs"]["help"]
    assert proc["code"] == 0
    for group in ("model", "scheduler", "data"):  # each group's options, read from conf/
        options = ", ".join(sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")))
        assert f"{group}: {options}" in proc["stdout"], group
    assert {"copy", "reverse", "sort", "small", "noam"} <= set(
        re.findall(r"\w+", proc["stdout"])
    )  # the shipped ones among them
    for group in ("data:", "optim:", "trainer:", "logger:", "callbacks:", "experiment:"):
        assert f"\n{group} " in proc["stdout"], group
    # each key's meaning beside its default, from the schema's own comments
    config = proc["stdout"].split("== Config ==")[1]
    assert re.search(r"\n  n_heads: 4 +# h: parallel attention heads \(Sec\. 3\.2\.2\)\n", config)
    assert re.search(r"\n  warmup_steps: 100 +# steps of linear warmup from 0 to peak_lr", config)
    assert re.search(r"\n  batch_size: 64 +# global, over all DDP ranks\n", config)  # synthetic's
    assert re.search(r"\n  max_steps: 1000 +# lightning.Trainer's argument\n", config)
    assert max(len(line) for line in config.splitlines()) <= 100


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["data=tinyshakespeare"],
            "model.arch='encoder_decoder' cannot train on data='tinyshakespeare' (lm data): an "
            "encoder_decoder model needs seq2seq data; for data=tinyshakespeare use a "
            "decoder_only model such as model=lm_small or experiment=tinyshakespeare",
        ),
    ],
)
def test_data_of_the_wrong_task_names_the_option_and_what_fits(capsys, args, message):
    """A token stream cannot train an encoder-decoder. (Sentence pairs train either
    architecture: tests/test_evaluate.py's decoder-only translation.) Checked by the preflight
    in-process; the console prints the preflight's line and exits 2 (the end-to-end tests
    above)."""
    with pytest.raises(SystemExit) as info:
        preflight([*args, "logger=none"], CONF_DIR)
    assert info.value.code == 2
    assert capsys.readouterr().err == f"attnlab-train: error: {message}\n"


def test_a_target_whose_module_fails_to_import_says_why(tmp_path, monkeypatch):
    """A module that exists but raises on import is not reported as missing."""
    from attnlab.pipeline.build import ConfigRefused, located

    (tmp_path / "broken_builders.py").write_text("import no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigRefused) as info:
        located("broken_builders.build", "module._target_")
    problem = str(info.value)
    assert problem.startswith(
        "module._target_='broken_builders.build' cannot be imported (ModuleNotFoundError:"
    ), problem
    assert "no_such_dependency" in problem and "\n" not in problem
    from attnlab.training.schedules import Noam

    assert located("attnlab.training.schedules.Noam", "scheduler._target_") is Noam
    assert located("torch.optim.AdamW", "optim._target_").__name__ == "AdamW"
