"""The text data options of the `data` group (multi30k, parallel_text, lm_text,
tinyshakespeare) and the text presets: typed schemas made from the DataModules' own option
classes (attnlab.data.configs, the one declaration), the data preflight (one line per problem,
exit 2), and which runs compute greedy exact match."""

from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import get_class, instantiate

from attnlab.config.data_schema import DATA_SCHEMAS
from attnlab.config.plain import to_plain
from attnlab.data.language_model import LMTextDataModule, TinyShakespeareDataModule
from attnlab.data.translation import Multi30kDataModule, TranslationDataModule
from attnlab.pipeline.build import ConfigRefused, exact_match_enabled
from attnlab.pipeline.preflight import preflight
from build_utils import dry_build

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
DATA = Path(__file__).parents[2] / "shared" / "data"
MULTI30K = DATA / "multi30k"
needs_data = pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"{MULTI30K} absent")

SCHEMAS = {
    "parallel_text": (DATA_SCHEMAS["parallel_text_data_schema"], TranslationDataModule),
    "multi30k": (DATA_SCHEMAS["multi30k_data_schema"], Multi30kDataModule),
    "lm_text": (DATA_SCHEMAS["lm_text_data_schema"], LMTextDataModule),
    "tinyshakespeare": (DATA_SCHEMAS["tinyshakespeare_data_schema"], TinyShakespeareDataModule),
}


@pytest.mark.parametrize("option", sorted(SCHEMAS))
def test_schema_is_the_datamodules_options(option):
    """The schema has the module's options, their defaults (seed: the run's; arch, for sentence
    pairs: the model's) and its target."""
    schema, cls = SCHEMAS[option]
    defaults, _ = cls.arguments({})
    assert {f.name for f in fields(schema)} - {"_target_"} == set(defaults)
    wired = {"_target_": None, "seed": "${seed}", "arch": "${model.arch}"}
    for f in fields(schema):
        if f.name in wired:
            assert f.name == "_target_" or f.default == wired[f.name], f.name
            continue
        value = f.default_factory() if f.default is MISSING else f.default
        assert value == defaults[f.name], f.name
    target = next(f.default for f in fields(schema) if f.name == "_target_")
    assert target == f"{cls.__module__}.{cls.__name__}"


def test_a_new_data_option_is_one_field_of_the_options_class(monkeypatch):
    """A field added to Multi30kDataConfig reaches the module's arguments and a remade schema."""
    from dataclasses import dataclass

    from attnlab.config.data_schema import _schema
    from attnlab.data.configs import Multi30kDataConfig

    @dataclass
    class WithLowercase(Multi30kDataConfig):
        lowercase: bool = False

    monkeypatch.setattr(Multi30kDataModule, "config_class", WithLowercase)
    args, problems = Multi30kDataModule.arguments({"lowercase": True})
    assert problems == [] and args["lowercase"] is True
    schema = _schema("x", WithLowercase, "attnlab.data.translation.Multi30kDataModule")
    assert "lowercase" in {f.name for f in fields(schema)}


@pytest.mark.slow
@pytest.mark.parametrize("option", sorted(SCHEMAS))
def test_each_text_option_composes_and_instantiates(compose, option, tmp_path):
    model = "lm_small" if option in ("lm_text", "tinyshakespeare") else "small"
    cfg = compose([f"data={option}", f"model={model}", f"data.cache_dir={tmp_path}"])
    dm = instantiate(to_plain(cfg.data))
    assert isinstance(dm, SCHEMAS[option][1]) and dm.seed == cfg.seed
    assert exact_match_enabled({"exact_match": cfg.exact_match}, dm) is False
    forced = compose([f"data={option}", f"model={model}", "exact_match=true"])
    assert exact_match_enabled({"exact_match": forced.exact_match}, dm)
    reverse = compose(["data=reverse"])
    reverse_class = get_class(reverse.data._target_)
    assert exact_match_enabled({"exact_match": reverse.exact_match}, reverse_class) is True


@pytest.mark.slow
def test_types_and_keys_are_checked_when_composing_and_choices_when_built(compose):
    for override in ("data.max_tokens=lots", "data.train_src=x.en"):  # multi30k reads data.root
        with pytest.raises(ConfigCompositionException):
            compose(["data=multi30k", override])
    for override, message in (
        ("data.src_lang=fr", r"^data.src_lang='fr' is not valid; expected one of: en, de"),
        ("data.tokenizer_type=wordpiece", r"^data.tokenizer_type='wordpiece' is not valid"),
    ):
        with pytest.raises(ValueError, match=message):
            dry_build(compose(["data=multi30k", override]))


def _preflight_lines(capsys, argv: list[str]) -> list[str]:
    with pytest.raises(SystemExit) as info:
        preflight(argv, CONF_DIR)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert all(line.startswith("attnlab-train: error: data.") for line in lines), err
    return [line.removeprefix("attnlab-train: error: ") for line in lines]


@pytest.mark.slow
def test_preflight_reports_each_data_problem_on_one_line(capsys, tmp_path):
    lines = _preflight_lines(capsys, ["data=parallel_text"])
    assert [line.split(":")[0] for line in lines] == ["data.train_src", "data.train_tgt"]

    src, tgt, empty = tmp_path / "a.en", tmp_path / "a.de", tmp_path / "b.de"
    src.write_text("one\ntwo\nthree\n")
    tgt.write_text("eins\nzwei\n")
    empty.write_text("")
    lines = _preflight_lines(
        capsys,
        [
            "data=parallel_text",
            f"data.train_src={src}",
            f"data.train_tgt={tgt}",
            f"data.val_src={src}",
            f"data.val_tgt={empty}",
        ],
    )
    assert lines == [
        f"data.train_tgt: {tgt}: 2 lines but data.train_src {src} has 3; "
        "parallel files must be line-aligned",
        f"data.val_tgt: {empty}: file is empty",
    ]
    gone = tmp_path / "gone.en"  # one missing file named by two keys: reported once
    lines = _preflight_lines(
        capsys,
        ["data=parallel_text", f"data.train_src={gone}", f"data.train_tgt={tgt}"]
        + [f"data.val_src={gone}", f"data.val_tgt={tgt}"],
    )
    assert lines == [f"data.train_src: {gone}: missing"]
    lines = _preflight_lines(
        capsys,
        ["data=multi30k", f"data.root={tmp_path / 'none'}", "data.download=false"],
    )
    assert lines == [
        f"data.root: {tmp_path / 'none'} does not exist; put Multi30K's files there "
        "({train,val,test_2016_flickr}.{en,de}.gz), or set data.download=true to fetch them "
        "into it (data.root=null: into the cache)"
    ]
    (tmp_path / "empty").mkdir()
    lines = _preflight_lines(capsys, ["data=multi30k", f"data.root={tmp_path / 'empty'}"])
    assert len(lines) == 6 and all("missing; place it there, or set data.do" in x for x in lines)
    lines = _preflight_lines(
        capsys, ["model=lm_small", "data=lm_text", f"data.path={tmp_path / 'x.txt'}"]
    )
    assert lines == [f"data.path: {tmp_path / 'x.txt'}: missing"]


@pytest.mark.slow
def test_validate_config_raises_the_problems(compose, tmp_path):
    cfg = compose(["data=parallel_text", f"data.train_src={tmp_path / 'x'}"])
    with pytest.raises(ConfigRefused) as info:
        dry_build(cfg)
    assert [p.split(":")[0] for p in info.value.problems] == ["data.train_src", "data.train_tgt"]


@pytest.mark.slow
@needs_data
def test_shared_multi30k_passes_the_preflight(compose, capsys):
    preflight(["data=multi30k", f"data.root={MULTI30K}", "data.download=false"], CONF_DIR)
    preflight(["experiment=multi30k_cpu", f"data.root={MULTI30K}"], CONF_DIR)
    preflight(["experiment=tinyshakespeare", f"data.root={DATA / 'tinyshakespeare'}"], CONF_DIR)
    assert capsys.readouterr().err == ""


@pytest.mark.slow
@pytest.mark.parametrize("option", ["multi30k", "multi30k_cpu", "tinyshakespeare"])
def test_text_presets(compose, option):
    cfg = compose([f"experiment={option}"])
    assert cfg.name == option
    assert (
        exact_match_enabled({"exact_match": cfg.exact_match}, get_class(cfg.data._target_)) is False
    )
    if option.startswith("multi30k"):
        assert cfg.callbacks.translation_quality.beam_size == 4
        # the paper's alpha, except where the preset chose its own on the validation set
        alpha = {"multi30k": 0.6, "multi30k_cpu": 2.0}[option]
        assert cfg.callbacks.translation_quality.length_penalty == alpha
        assert cfg.loss.label_smoothing == 0.1 and cfg.checkpoint.keep_last == 5
        assert cfg.data._target_.endswith("Multi30kDataModule")
    else:
        assert to_plain(cfg.model)["arch"] == "decoder_only" and cfg.data.block_size == 256
        assert cfg.data.tokenizer_type == "char"
