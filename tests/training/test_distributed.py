"""Training on several processes (gloo on CPU) gives the model one process would: DDP through the training job,
FSDP through torch's `fully_shard` as Accelerate applies it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate.commands.config.config_args import load_config_from_file
from safetensors.torch import load_file

from tests.conftest import TINY, tatoeba_files
from tests.fsdp_worker import new_model, train_steps
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.modeling.saving_vaswani_transformer import HANDLER_FILE

REPO = Path(__file__).resolve().parents[2]
STEPS = 6


def train(tmp_path: Path, name: str, launcher: list[str], *extra: str) -> Path:
    """Run scripts/train.py on 300 embedded Tatoeba pairs without dropout, in fp32 (compared to rel 1e-4, which
    bf16 autocast on a CPU that has it would not keep); return its run folder."""
    files = tatoeba_files(tmp_path, 300)
    run = tmp_path / name
    arguments = [f"--{key}={value}" for key, value in files.items()]
    arguments += (
        f"--vocab_size 300 --max_tokens 256 --max_steps {STEPS} --save_steps {STEPS} --warmup_steps 3 --dropout 0 "
        "--average_last 1 --logging_steps 1 --dev_size 0 --eval_steps 0 --num_beams 1 --examples Hello. "
        "--mixed_precision no"
    ).split()
    arguments += ["--config_overrides", json.dumps(TINY)]
    arguments += ["--output_dir", str(run), *extra]
    completed = subprocess.run(
        [*launcher, "scripts/train.py", *arguments], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    return run


def losses(run: Path) -> list[float]:
    state = json.loads((run / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


@pytest.mark.slow  # two training processes
def test_two_processes_train_the_model_one_process_trains_with_twice_the_batch(tmp_path: Path) -> None:
    """2 DDP processes × one token batch per update = 1 process × 2 accumulated batches: the same batches (the
    sampler is seeded alike in every process and each takes every second batch), the same token-mean loss (the
    Trainer sums target tokens over processes), hence the same losses and weights."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    two = train(tmp_path, "two", torchrun)
    one = train(tmp_path, "one", [sys.executable], "--gradient_accumulation_steps", "2")
    assert (one / "tokenizer" / "tokenizer.json").read_text() == (
        two / "tokenizer" / "tokenizer.json"
    ).read_text()
    assert len(losses(one)) == STEPS and losses(one)[-1] < losses(one)[0]  # it trained
    assert losses(two) == pytest.approx(losses(one), rel=1e-4)
    weights_one = load_file(one / f"checkpoint-{STEPS}" / "model.safetensors")
    weights_two = load_file(two / f"checkpoint-{STEPS}" / "model.safetensors")
    assert weights_one.keys() == weights_two.keys()
    # Adam divides by sqrt(v): gradients that differ in their last bits (summed in another order) move a weight
    # whose gradient is near 0 by up to ~2e-3 of the peak learning rate (0.1 here: 2.4e-4 seen for one key-projection
    # entry with fused Adam); a real difference moves every weight by ~lr.
    for name, tensor in weights_one.items():
        torch.testing.assert_close(weights_two[name], tensor, rtol=1e-3, atol=1e-3, msg=name)


@pytest.mark.slow  # two training processes
def test_fsdp_on_two_processes_trains_the_one_process_model_and_saves_an_ordinary_checkpoint(
    tmp_path: Path,
) -> None:
    """Accelerate's FSDP2 wrapping of the model with the shipped config (tests/fsdp_worker.py) on 2 gloo processes: every encoder and
    decoder layer is its own shard unit, the three tied tables are one parameter in one unit (torch refuses a
    parameter shared across units), the losses and weights are those of one process training on whole batches,
    and the full state dict saves as a folder that loads on one process with this package's code only."""
    launch = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--num_processes", "2"]
    launch += ["--config_file", "configs/accelerate/fsdp.yaml", "--mixed_precision", "no"]
    completed = subprocess.run(
        [*launch, "tests/fsdp_worker.py", str(tmp_path / "fsdp")],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    layers = {"model.encoder.layers.0", "model.decoder.layers.0"}
    assert layers <= set(report["units"]) and "model.encoder.embed_tokens" in report["units"]
    reference = new_model()
    assert report["losses"] == pytest.approx(train_steps(reference), rel=1e-5)
    loaded = VaswaniTransformerForConditionalGeneration.from_pretrained(tmp_path / "fsdp")
    assert loaded.lm_head.weight is loaded.model.encoder.embed_tokens.weight
    shipped = sorted(path.name for path in (tmp_path / "fsdp").glob("*.py"))
    # the model's code, the translation pipeline's and the Inference Endpoints handler travel with every save
    # (remote_code_vaswani_transformer.py)
    modeling = REPO / "vaswani_transformer" / "modeling"
    assert shipped == sorted(
        [HANDLER_FILE, *(path.name for path in modeling.glob("*_vaswani_transformer.py"))]
    )
    expected = reference.state_dict()
    # As in the DDP test above: Adam turns last-bit gradient differences of near-zero gradients into steps of up to
    # ~1e-3 of lr (1e-2 here; 1.03e-5 seen on one fc2 entry of 2,048), while a real difference moves weights by ~lr.
    for name, tensor in loaded.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], rtol=1e-4, atol=1e-4, msg=name)


@pytest.mark.parametrize("name", ["single_gpu", "multi_gpu", "fsdp", "multi_node"])
def test_shipped_accelerate_configs_load_and_say_how_to_launch(name: str) -> None:
    """Each config in configs/accelerate parses as Accelerate's own config and opens with its launch command."""
    path = REPO / "configs" / "accelerate" / f"{name}.yaml"
    config = load_config_from_file(str(path))
    assert config.mixed_precision == "bf16" and config.num_processes % config.num_machines == 0
    assert f"accelerate launch --config_file configs/accelerate/{name}.yaml" in path.read_text()
