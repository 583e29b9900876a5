"""Recipes and the train command's options: one name per setting, recipes as defaults, flags on top."""

import json
from pathlib import Path

import pytest
import torch

from vaswani_transformer.cli.train import main, parse_options
from vaswani_transformer.training import TrainOptions, option_names
from vaswani_transformer.training import options as options_module
from vaswani_transformer.training.options import cuda_section_note, option_groups
from vaswani_transformer.training.recipes import available_recipes, load_recipe, setting_defaults
from vaswani_transformer.training.run_folder import write_options


def test_the_four_recipes_ship_and_load_into_options() -> None:
    assert {"tatoeba", "multi30k", "wmt14-base", "wmt14-big"} <= set(available_recipes())
    for name in available_recipes():
        for cuda in (False, True):
            options = TrainOptions(**load_recipe(name, allowed=option_names(), cuda=cuda))
            assert options.model_config().vocab_size == options.vocab_size


def test_recipe_paths_start_at_data_dir() -> None:
    options = TrainOptions.from_recipe("multi30k", data_dir=Path("/data"))
    assert options.train_source == "/data/multi30k/train.en"
    assert options.test_references_tokenized == "/data/multi30k-tok/test_2016_flickr.lc.norm.tok.de"
    assert options.recipe == "multi30k" and options.lowercase


def test_the_cuda_section_applies_only_with_a_gpu() -> None:
    cpu = load_recipe("tatoeba", allowed=option_names(), cuda=False)
    gpu = load_recipe("tatoeba", allowed=option_names(), cuda=True)
    assert cpu["preset"] != gpu["preset"] and cpu["max_tokens"] < gpu["max_tokens"]
    assert cpu["test_size"] == gpu["test_size"]  # what the section does not name stays


def test_without_a_recipe_flag_the_main_job_runs() -> None:
    options = parse_options(["--cuda_section", "false"])
    assert options.recipe == "tatoeba" and options.train_source is None  # the embedded corpus
    assert options.max_steps == load_recipe("tatoeba", allowed=option_names(), cuda=False)["max_steps"]


def test_the_main_job_trains_to_a_time_budget_that_a_flag_switches_off() -> None:
    """The main job stops on time on every machine; `--max_train_minutes none` (as `null` in a recipe)
    trains by --max_steps alone, and `none` works for every number setting that takes None."""
    assert parse_options(["--cuda_section", "false"]).max_train_minutes == 8.5
    options = parse_options(["--cuda_section", "false", "--max_train_minutes", "none", "--dropout", "NULL"])
    assert options.max_train_minutes is None and options.dropout is None
    with pytest.raises(SystemExit):
        parse_options(["--max_train_minutes", "soon"])


def test_every_default_comes_from_the_defaults_recipe_and_nothing_else() -> None:
    """recipes/defaults.yaml names every setting but the recipe itself, and `TrainOptions` takes its values from
    there: the code holds no default of its own for a setting."""
    defaults = setting_defaults()
    assert set(defaults) == option_names() - {"recipe"}
    options = TrainOptions()
    derived = {"source_lang": "en", "target_lang": "de"}  # null: the data's, here the embedded corpus's
    for name, value in defaults.items():
        expected = derived.get(name, value)
        assert getattr(options, name) == (Path(value) if name in ("output_dir", "data_dir") else expected), (
            name
        )


def test_a_recipe_names_only_what_it_changes_and_the_rest_is_the_defaults() -> None:
    options = TrainOptions.from_recipe("tatoeba", cuda_section=False)
    recipe = load_recipe("tatoeba", allowed=option_names(), cuda=False)
    assert "gradient_accumulation_steps" not in recipe  # not named there: the default
    assert options.gradient_accumulation_steps == setting_defaults()["gradient_accumulation_steps"]
    assert options.max_steps == recipe["max_steps"] != setting_defaults()["max_steps"]


@pytest.mark.parametrize("cuda_section", [False, True])
def test_the_cuda_section_is_applied_visibly_and_recorded(cuda_section: bool, tmp_path: Path) -> None:
    """What the cuda: section changes is said on the log and kept in train_options.json (`cuda_section`), whether
    it applied because of a GPU or because the flag said so; without it the run says nothing about it."""
    argv = ["--cuda_section", str(cuda_section).lower(), "--output_dir", str(tmp_path / "run")]
    options = parse_options(argv)
    assert options.cuda_section is cuda_section
    note = cuda_section_note(options)
    gpu = load_recipe("tatoeba", allowed=option_names(), cuda=True)
    if cuda_section:
        assert options.preset == gpu["preset"] and options.max_tokens == gpu["max_tokens"]
        assert note is not None and f"preset {gpu['preset']}" in note and "--cuda_section false" in note
    else:
        assert options.preset != gpu["preset"] and note is None
    write_options(options, tmp_path)
    assert json.loads((tmp_path / "train_options.json").read_text())["cuda_section"] is cuda_section


def test_the_cuda_section_follows_the_gpu_when_not_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(options_module, "GPU_DRIVER_FILES", (tmp_path,))  # a driver: torch is asked
    for present in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda present=present: present)
        assert parse_options([]).cuda_section is present
        assert TrainOptions.from_recipe("tatoeba").cuda_section is present
    # no GPU driver's device files: no GPU, and torch is not asked
    monkeypatch.setattr(options_module, "GPU_DRIVER_FILES", (tmp_path / "no-driver",))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("asked torch without a GPU driver"))
    assert parse_options([]).cuda_section is False


def test_flags_override_the_recipe_and_take_dashes_or_underscores() -> None:
    options = parse_options(
        ["--recipe", "multi30k", "--max-steps", "7", "--preset", "small", "--no_health_checks"]
    )
    assert (options.max_steps, options.preset, options.health_checks) == (7, "small", False)
    assert options.lowercase and options.vocab_size == 6000  # the rest is the recipe's
    # a short trial of a recipe trains; it only warns that there are fewer checkpoints than --average_last
    assert options.averaging_shortfall() == (
        "warning: --average_last 20, but the run writes 1 checkpoint(s) (--max_steps 7, --save_steps 50): "
        "the final model averages those."
    )


def test_config_overrides_are_json_on_the_command_line() -> None:
    options = parse_options(["--config_overrides", '{"init_scheme": "xavier", "num_encoder_layers": 2}'])
    config = options.model_config()
    assert config.init_scheme == "xavier" and config.num_encoder_layers == 2


def test_help_lists_the_recipes_and_shows_their_values(capsys) -> None:
    with pytest.raises(SystemExit):
        parse_options(["--recipe", "multi30k", "--help"])
    text = capsys.readouterr().out
    assert "recipes: multi30k, tatoeba, wmt14-base, wmt14-big" in text
    assert "{data_dir}/multi30k/train.en" in text  # the recipe's value is the shown default


def test_help_groups_the_settings_as_options_py_does_and_uses_the_installed_command(capsys) -> None:
    with pytest.raises(SystemExit):
        parse_options(["--help"])
    text = capsys.readouterr().out
    titles = list(option_groups())
    assert titles[:3] == ["where the defaults come from", "data", "model and vocabulary"]
    at = [text.index(f"\n{title}:\n") for title in titles]  # each group a section of its own, in order
    assert at == sorted(at) and text.index("\n  --max_steps MAX_STEPS") > text.index("\ntraining (§5):\n")
    assert "python scripts/" not in text and "    vaswani-train --recipe multi30k " in text
    # --no_health_checks says what it does instead of repeating --health_checks' help and default
    no_checks = text[text.index("  --no_health_checks") :].split("\n  --")[0]
    assert (
        "--health_checks false" in no_checks and "divergence" not in no_checks and "default" not in no_checks
    )


def test_a_recipe_with_an_unknown_setting_is_refused(tmp_path: Path) -> None:
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("preset: tiny\nwarmup: 100\n")
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['warmup'\]"):
        parse_options(["--recipe", str(recipe)])
    with pytest.raises(ValueError, match="unknown recipe 'wmt16'.*'multi30k'"):
        parse_options(["--recipe", "wmt16"])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--max_steps", "0"], "--max_steps must be at least 1, got 0"),
        (["--warmup_steps", "0"], "--warmup_steps must be at least 1"),
        (["--gradient_accumulation_steps", "0"], "--gradient_accumulation_steps must be at least 1"),
        (["--num_beams", "0"], "--num_beams must be at least 1"),
        (["--lr_scale", "-1"], "--lr_scale must be positive"),
        (["--config_overrides", '{"dropout": 0.1}'], "--config_overrides cannot set dropout"),
        (["--config_overrides", '{"init_scheme": "he"}'], "init_scheme must be one of"),
        (
            ["--config_overrides", '{"init_schem": "xavier"}'],
            "'init_schem' is not a key of the model's config. Did you mean 'init_scheme'?",
        ),
        (["--config_overrides", '{"nope": 1}'], "'nope' is not a key of the model's config."),
        (["--config_overrides", '{"d_model": "big"}'], "Field 'd_model' expected int, got str"),
        (["--config_overrides", '{"vocab_size": 5}'], "cannot set vocab_size"),
        (["--final_model", "best", "--eval_steps", "0"], "--final_model best needs dev evaluations"),
        (["--dev_size", "0", "--eval_steps", "100"], "--eval_steps needs a dev set"),
        (["--train_source", "x.en", "--train_target", "x.de"], "--test_source is required"),
        (["--max_steps", "-1"], "--max_steps must be at least 1, got -1"),
        (["--eval_batch_size", "0"], "--eval_batch_size must be at least 1"),
        (["--max_test_sentences", "-3"], "--max_test_sentences must be at least 1 (or left out), got -3"),
        (["--max_test_sentences", "0"], "--max_test_sentences must be at least 1 (or left out), got 0"),
        (["--vocab_size", "-1"], "--vocab_size must be at least 1"),
        (["--vocab_size", "1000000000"], "--vocab_size must be at most 1,000,000, got 1,000,000,000"),
        (["--max_tokens", "1"], "--max_tokens 1 is below --max_length 128: a kept pair may be longer"),
        (["--max_length", "0"], "--max_length must be at least 1"),
        (["--seed", "-1"], "--seed must be between 0 and 4294967295, got -1"),
        (["--seed", "8589934592"], "--seed must be between 0 and 4294967295, got 8589934592"),
        (["--resume", "--overwrite"], "--resume continues the run in --output_dir, --overwrite deletes it"),
        (["--test_references_tokenized", "refs.tok"], "--test_references_tokenized needs the --test_source"),
        (["--lr_scale", "nan"], "--lr_scale nan: give a finite number (not nan or inf)"),
        (["--dropout", "inf"], "--dropout inf: give a finite number"),
        (["--length_penalty", "nan"], "--length_penalty nan: give a finite number"),
        (["--length_penalty", "1e308"], "--length_penalty 1e+308: give α between -10 and 10"),
    ],
)
def test_bad_options_stop_before_training_with_status_2(arguments, message, capsys) -> None:
    assert main(arguments) == 2
    assert message in capsys.readouterr().err


def test_missing_recipe_data_names_the_file_and_data_dir(tmp_path: Path, capsys) -> None:
    assert main(["--recipe", "multi30k", "--data_dir", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert f"--train_source {tmp_path}/multi30k/train.en: no such file" in error and "--data_dir" in error


def test_a_folder_given_as_a_corpus_file_is_named_as_a_folder(tmp_path: Path, capsys) -> None:
    """A directory as --train_source is named as a folder (it was reported as "no such file")."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("train.de", "test.en", "test.de"):
        (tmp_path / name).write_text("Hallo.\n")
    arguments = ["--train_source", str(corpus), "--train_target", str(tmp_path / "train.de")]
    arguments += ["--test_source", str(tmp_path / "test.en"), "--test_target", str(tmp_path / "test.de")]
    assert main([*arguments, "--output_dir", str(tmp_path / "run")]) == 2
    assert f"--train_source {corpus} is a folder: give the file inside it." in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("cuda", [False, True])
def test_a_misspelt_key_in_the_cuda_section_is_an_error_whether_it_applies_or_not(
    cuda: bool, tmp_path: Path
) -> None:
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("max_steps: 3\ncuda:\n  max_stepz: 4\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"\(cuda: section\): unknown setting\(s\) \['max_stepz'\]"):
        load_recipe(str(recipe), allowed=option_names(), cuda=cuda)


@pytest.mark.parametrize("recorded", [False, True])
def test_resume_keeps_the_runs_torch_compile_which_shapes_its_batches(tmp_path: Path, recorded: bool) -> None:
    """--torch_compile pads batches to a few shapes, so a run resumed with the other setting would
    continue on other batches than it skipped: a difference --resume refuses, naming the recorded value."""
    from vaswani_transformer.training.options import changed_on_resume

    run = TrainOptions.from_recipe("tatoeba", output_dir=tmp_path / "run", torch_compile=recorded)
    write_options(run, run.output_dir)
    record = json.loads((run.output_dir / "train_options.json").read_text())
    toggled = TrainOptions.from_recipe("tatoeba", output_dir=run.output_dir, torch_compile=not recorded)
    assert changed_on_resume(toggled, record) == [
        f"--resume --torch_compile {not recorded}: the run was made with {recorded}"
    ]
    assert changed_on_resume(run, record) == []
    del record["torch_compile"]  # a hand edit
    assert changed_on_resume(run, record) == [
        f"--resume --torch_compile {recorded}: the run's record does not hold it"
    ]


def test_a_warm_up_no_run_can_reach_is_refused_and_one_beyond_max_steps_warned() -> None:
    """--warmup_steps 1e12 was once accepted (the learning rate of eq. (3) rises for W steps, so a run of
    M < W steps peaks at M/W of the schedule's peak: 4e-20 here). Beyond 10,000 times --max_steps it is
    refused naming both flags and the fix; a warm-up beyond --max_steps alone is a warning (a short trial of a
    recipe is one)."""
    with pytest.raises(
        ValueError, match=r"--warmup_steps 1,000,000,000,000 is beyond the reach of --max_steps 100,000"
    ):
        parse_options(["--max_steps", "100000", "--warmup_steps", "1000000000000"])
    with pytest.raises(ValueError, match=r"Give --warmup_steps at most --max_steps .* or raise --max_steps"):
        parse_options(["--max_steps", "1", "--warmup_steps", "10001"])
    trial = parse_options(["--recipe", "wmt14-big", "--cuda_section", "false", "--max_steps", "1"])
    assert trial.warmup_shortfall() == (
        "warning: --warmup_steps 4,000 is beyond --max_steps 1: training ends while the learning rate still rises, "
        "at 1/4,000 of eq. (3)'s peak."
    )
    assert parse_options(["--max_steps", "300", "--warmup_steps", "300"]).warmup_shortfall() is None
