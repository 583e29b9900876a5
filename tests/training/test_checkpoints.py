"""Checkpoint averaging: state-dict means, Trainer checkpoint discovery, and a real model round trip."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from vaswani_transformer.cli import average as average_cli
from vaswani_transformer.files.writing import WriteError
from vaswani_transformer.training.checkpoints import (
    average_checkpoints,
    average_last,
    average_state_dicts,
    checkpoint_problem,
    find_checkpoints,
    whole_checkpoints,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAINER_STATE_FILES = (
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
    "training_args.bin",
)


def write_checkpoint(run_dir: Path, step: int, fill: float) -> Path:
    """A checkpoint folder whose two weights are all `fill`, with a config and Trainer state files."""
    checkpoint = run_dir / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    weights = {"layer.weight": torch.full((3, 2), fill), "layer.bias": torch.full((3,), fill)}
    save_file(weights, checkpoint / "model.safetensors", metadata={"format": "pt"})
    (checkpoint / "config.json").write_text(f'{{"step": {step}}}')
    for name in TRAINER_STATE_FILES:
        (checkpoint / name).write_bytes(b"resume state")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))  # a finished save
    return checkpoint


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_mean_of_ones_and_threes_is_twos_in_the_input_dtype(dtype: torch.dtype) -> None:
    ones = {"w": torch.ones(2, 3, dtype=dtype), "b": torch.ones(4, dtype=dtype)}
    threes = {"w": torch.full((2, 3), 3.0, dtype=dtype), "b": torch.full((4,), 3.0, dtype=dtype)}

    averaged = average_state_dicts([ones, threes])

    assert averaged.keys() == {"w", "b"}
    for key, tensor in averaged.items():
        assert tensor.dtype == dtype
        assert torch.equal(tensor, torch.full_like(ones[key], 2.0))


def test_mean_is_summed_in_high_precision() -> None:
    # 2**24 + 1 is not representable in float32: summing these in float32 would give a mean of 0, not 1/3.
    values = [torch.tensor([2.0**24]), torch.tensor([1.0]), torch.tensor([-(2.0**24)])]

    averaged = average_state_dicts([{"x": value} for value in values])

    assert averaged["x"].item() == pytest.approx(1 / 3)


def test_mean_leaves_the_inputs_untouched() -> None:
    first = {"x": torch.tensor([1.0, 5.0], dtype=torch.float64)}
    second = {"x": torch.tensor([3.0, 7.0], dtype=torch.float64)}

    averaged = average_state_dicts([first, second])

    assert averaged["x"].tolist() == [2.0, 6.0]
    assert first["x"].tolist() == [1.0, 5.0]


def test_mismatched_keys_name_the_key_and_the_checkpoint() -> None:
    full = {"a": torch.zeros(2), "b": torch.zeros(2)}
    partial = {"a": torch.zeros(2)}

    with pytest.raises(ValueError, match=r"ckpt-2 lacks 1 key.*'b'"):
        average_state_dicts([full, partial], labels=["ckpt-1", "ckpt-2"])
    with pytest.raises(ValueError, match=r"ckpt-2 has 1 key.*absent.*'b'"):
        average_state_dicts([partial, full], labels=["ckpt-1", "ckpt-2"])


def test_integer_tensors_and_shape_changes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"'steps' in state dict #0: torch.int64"):
        average_state_dicts([{"steps": torch.tensor([1])}, {"steps": torch.tensor([3])}])
    with pytest.raises(ValueError, match=r"'w' has shape \(3,\) in state dict #1"):
        average_state_dicts([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])
    with pytest.raises(ValueError, match="no checkpoints"):
        average_state_dicts([])


def test_find_checkpoints_sorts_by_step_number(tmp_path: Path) -> None:
    for name in ("checkpoint-1000", "checkpoint-200", "checkpoint-30", "averaged", "checkpoint-final"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-5").write_text("a file, not a checkpoint folder")

    found = find_checkpoints(tmp_path)

    assert [path.name for path in found] == ["checkpoint-30", "checkpoint-200", "checkpoint-1000"]


def test_average_last_takes_the_numerically_latest_checkpoints(tmp_path: Path) -> None:
    # Lexically the last two would be checkpoint-200 and checkpoint-50 (mean 1.5), numerically 200 and 1000.
    for step, fill in ((50, 1.0), (200, 2.0), (1000, 4.0)):
        write_checkpoint(tmp_path / "run", step, fill)

    output = average_last(tmp_path / "run", 2, tmp_path / "averaged")

    weights = load_file(output / "model.safetensors")
    assert torch.equal(weights["layer.weight"], torch.full((3, 2), 3.0))
    assert torch.equal(weights["layer.bias"], torch.full((3,), 3.0))
    with safe_open(output / "model.safetensors", framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}
    assert (output / "config.json").read_text() == '{"step": 1000}'
    assert sorted(path.name for path in output.iterdir()) == ["config.json", "model.safetensors"]
    # safetensors writes 0600; the averaged weights get a new file's permissions, like the config beside them
    assert oct((output / "model.safetensors").stat().st_mode) == oct((output / "config.json").stat().st_mode)


def test_average_last_refuses_more_checkpoints_than_the_run_has(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, 10, 1.0)

    with pytest.raises(ValueError, match="last 2 checkpoints but .* has 1"):
        average_last(tmp_path, 2, tmp_path / "averaged")
    with pytest.raises(ValueError, match="at least 1"):
        average_last(tmp_path, 0, tmp_path / "averaged")


def test_checkpoints_without_safetensors_weights_are_refused(tmp_path: Path) -> None:
    good = write_checkpoint(tmp_path, 10, 1.0)
    pickled = tmp_path / "checkpoint-20"
    pickled.mkdir()
    (pickled / "pytorch_model.bin").write_bytes(b"not to be unpickled")

    with pytest.raises(FileNotFoundError, match="checkpoint-20 has no model.safetensors.*safetensors"):
        average_checkpoints([good, pickled], tmp_path / "averaged")
    with pytest.raises(ValueError, match="must not be one of the averaged"):
        average_checkpoints([good], good)


@pytest.mark.slow  # a command in a fresh interpreter
def test_cli_averages_the_last_checkpoints_into_run_dir_averaged(tmp_path: Path) -> None:
    for step, fill in ((100, 1.0), (200, 2.0), (300, 6.0)):
        write_checkpoint(tmp_path, step, fill)
    python_path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))

    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "average_checkpoints.py"), str(tmp_path), "--last", "3"],
        env={**os.environ, "PYTHONPATH": python_path},
        capture_output=True,
        text=True,
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == str(tmp_path / "averaged")
    averaged = load_file(tmp_path / "averaged" / "model.safetensors")
    assert torch.equal(averaged["layer.bias"], torch.full((3,), 3.0))


def test_averaged_marian_checkpoints_load_with_every_parameter_the_mean(tmp_path: Path) -> None:
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=50,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=32,
        pad_token_id=0,
        decoder_start_token_id=0,
        eos_token_id=1,
    )
    models = []
    for step, seed in ((500, 0), (1000, 1)):
        torch.manual_seed(seed)
        model = MarianMTModel(config)
        model.save_pretrained(tmp_path / "run" / f"checkpoint-{step}")
        (tmp_path / "run" / f"checkpoint-{step}" / "optimizer.pt").write_bytes(b"resume state")
        (tmp_path / "run" / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
        models.append(model)
    first, second = (model.state_dict() for model in models)

    output = average_last(tmp_path / "run", 2, tmp_path / "averaged")
    averaged, loading_info = MarianMTModel.from_pretrained(output, output_loading_info=True)

    assert not loading_info["missing_keys"] and not loading_info["unexpected_keys"]
    assert not (output / "optimizer.pt").exists()
    assert (output / "generation_config.json").is_file()
    fc1 = "model.encoder.layers.0.fc1.weight"
    assert not torch.equal(first[fc1], second[fc1])
    for name, tensor in averaged.state_dict().items():
        torch.testing.assert_close(tensor, (first[name] + second[name]) / 2, msg=name)


def test_incomplete_checkpoints_are_named_and_left_out(tmp_path: Path) -> None:
    """What a killed save leaves: no trainer_state.json (it is written last), or weights cut short."""
    run = tmp_path / "run"
    whole = write_checkpoint(run, 1, 1.0)
    unfinished = write_checkpoint(run, 2, 2.0)
    (unfinished / "trainer_state.json").unlink()
    truncated = write_checkpoint(run, 3, 3.0)
    weights = truncated / "model.safetensors"
    size = weights.stat().st_size
    weights.write_bytes(weights.read_bytes()[:-5])
    cut_state = write_checkpoint(run, 4, 4.0)
    (cut_state / "trainer_state.json").write_text('{"global_st')
    assert checkpoint_problem(whole) is None
    assert (
        checkpoint_problem(unfinished)
        == f"{unfinished / 'trainer_state.json'} is missing: the save was interrupted"
    )
    assert checkpoint_problem(truncated) == f"{weights} is cut short ({size - 5:,} of {size:,} bytes)"
    assert "trainer_state.json is cut short" in checkpoint_problem(cut_state)
    assert whole_checkpoints(run)[0] == [whole]
    with pytest.raises(ValueError, match=r"has 1 \(left out: .*checkpoint-2/trainer_state.json is missing"):
        average_last(run, 2, tmp_path / "averaged")


def test_averaging_into_a_scored_folder_drops_its_scores(tmp_path: Path) -> None:
    """`vaswani-average RUN --output RUN/final` once replaced the weights and kept the old scores.json and
    hypotheses, so a later push published BLEU of another model. The scores go with the weights they measured."""
    for step, fill in ((100, 1.0), (200, 3.0)):
        write_checkpoint(tmp_path / "run", step, fill)
    final = tmp_path / "run" / "final"
    average_last(tmp_path / "run", 1, final)
    for name in ("scores.json", "hypotheses.txt", "dev_scores.json", "val_hypotheses.txt"):
        (final / name).write_text("of the old weights")
    (final / "training_curve.png").write_bytes(b"the run's history")
    average_last(tmp_path / "run", 2, final)
    assert torch.equal(load_file(final / "model.safetensors")["layer.bias"], torch.full((3,), 2.0))
    assert sorted(path.name for path in final.iterdir()) == [
        "config.json",
        "model.safetensors",
        "training_curve.png",
    ]


def test_a_failed_average_leaves_no_empty_folder_and_no_partial_weights(tmp_path: Path, monkeypatch) -> None:
    write_checkpoint(tmp_path / "run", 100, 1.0)

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("vaswani_transformer.training.checkpoints.save_file", disk_full)
    with pytest.raises(WriteError, match=f"no space left on device while writing {tmp_path / 'averaged'} "):
        average_last(tmp_path / "run", 1, tmp_path / "averaged")
    assert sorted(tmp_path.iterdir()) == [tmp_path / "run"]  # nor a temporary folder


def test_cli_errors_are_messages_with_exit_status_2(tmp_path: Path, capsys) -> None:
    write_checkpoint(tmp_path, 100, 1.0)
    with pytest.raises(SystemExit) as stopped:
        average_cli.main([str(tmp_path), "--last", "0"])
    assert stopped.value.code == 2 and "--last must be at least 1, got 0" in capsys.readouterr().err
    assert average_cli.main([str(tmp_path), "--last", "5"]) == 2
    assert "last 5 checkpoints but" in capsys.readouterr().err
    assert not (tmp_path / "averaged").exists()
