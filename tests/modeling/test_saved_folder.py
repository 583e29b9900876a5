"""What a saved model folder tells its users: the decoding settings and the cache as
generation reads them, greedy decoding as one line that saves, and a tokenizer that loads without questions."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState
from transformers import DataCollatorForSeq2Seq, GenerationConfig, Seq2SeqTrainer, Seq2SeqTrainingArguments

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration


@pytest.fixture
def model(letter_tokenizer) -> VaswaniTransformerForConditionalGeneration:
    torch.manual_seed(0)
    return VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer))).eval()


def test_greedy_decoding_as_the_saved_default_is_one_line_that_saves(model, tmp_path: Path) -> None:
    """The line docs/decoding.md gives, run as written; `num_beams = 1` alone leaves the beam settings that
    transformers refuses to save."""
    decoding_page = (Path(__file__).parents[2] / "docs" / "decoding.md").read_text(encoding="utf-8")
    (line,) = [
        line for line in decoding_page.splitlines() if line.startswith("model.generation_config.update(")
    ]
    exec(line, {"model": model})  # noqa: S102  (the documentation's own line)
    model.save_pretrained(tmp_path)
    loaded = VaswaniTransformerForConditionalGeneration.from_pretrained(tmp_path)
    assert loaded.generation_config.num_beams in (None, 1)
    source = torch.tensor([[5, 6, 7, 3]])
    torch.testing.assert_close(
        loaded.generate(input_ids=source), model.generate(input_ids=source, num_beams=1)
    )


def test_a_seq2seq_trainer_leaves_no_fallback_settings_and_no_false_use_cache_in_the_saved_files(
    model, letter_tokenizer, tmp_path: Path
) -> None:
    """transformers' Seq2SeqTrainer sets config.use_cache from its arguments (False) and writes its fallback
    decoding settings (max_length=20, ...) into the model's generation config when it first generates."""
    target = letter_tokenizer("b a")["input_ids"]
    pairs = [
        {"input_ids": letter_tokenizer(text)["input_ids"], "labels": target} for text in ("a b c", "d e")
    ]
    args = Seq2SeqTrainingArguments(
        tmp_path / "run", predict_with_generate=True, per_device_eval_batch_size=2, report_to=[], use_cpu=True
    )
    try:
        trainer = Seq2SeqTrainer(
            model=model,
            args=args,
            eval_dataset=pairs,
            processing_class=letter_tokenizer,
            data_collator=DataCollatorForSeq2Seq(letter_tokenizer, model),
            compute_metrics=lambda predictions: {},  # else the Trainer computes the loss only
        )
        trainer.evaluate()
        assert model.generation_config.max_length == 20 and model.config.use_cache is False  # what it did
        trainer.save_model(tmp_path / "model")
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    generation = json.loads((tmp_path / "model" / "generation_config.json").read_text())
    fallbacks = GenerationConfig._get_default_generation_params()
    assert "max_length" not in generation
    assert not {name for name in generation if name in fallbacks and generation[name] == fallbacks[name]}
    assert (generation["num_beams"], generation["length_penalty"]) == (4, 0.6)  # the paper's, kept
    assert json.loads((tmp_path / "model" / "config.json").read_text())["use_cache"] is True
    assert (
        model.generation_config.max_length == 20 and model.config.use_cache is False
    )  # the live model as it was


QUESTION, TRANSFORMERS_LOG = "[y/N]", "[transformers]"  # how transformers' warnings start


def load_tokenizer_in_a_fresh_interpreter(
    folder: Path, load: str, home: Path, package: bool
) -> tuple[str, float]:
    """What a fresh interpreter prints (stdout and stderr) loading `folder`'s tokenizer with `load`, standard
    input an open pipe (a CI job, a notebook kernel), and how long the loading took (timed inside, as starting
    the interpreter on a busy machine takes long too)."""
    script = textwrap.dedent(
        f"""
        import sys, time
        {"import vaswani_transformer; vaswani_transformer.register_auto_classes()" if package else 'sys.modules["vaswani_transformer"] = None'}
        from transformers import AutoTokenizer, PreTrainedTokenizerFast
        started = time.monotonic()
        tokenizer = {load}
        print("ids", tokenizer("Tom")["input_ids"], "seconds", time.monotonic() - started)
        """
    )
    environment = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HF_HOME": str(home)}
    if package:
        environment["PYTHONPATH"] = str(Path(__file__).parents[2])
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=environment, cwd=home,
    ) as process:  # fmt: skip
        output, _ = process.communicate(timeout=120)  # the pipe stays open: a question would wait 15 s
    assert process.returncode == 0, output[-3000:]
    return output, float(output.split("seconds")[-1])


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize(
    ("load", "package"),
    [
        ("PreTrainedTokenizerFast.from_pretrained(FOLDER)", False),
        ("AutoTokenizer.from_pretrained(FOLDER, trust_remote_code=True)", False),
        ("AutoTokenizer.from_pretrained(FOLDER)", True),
    ],
)
def test_the_documented_ways_load_the_tokenizer_without_a_question_a_wait_or_a_warning(
    model, letter_tokenizer, tmp_path: Path, load, package
) -> None:
    """docs/hub.md's ways to load a model folder's tokenizer, with this package and without."""
    path = tmp_path / "model"
    model.save_pretrained(path)
    letter_tokenizer.save_pretrained(path)
    load = load.replace("sys.argv[1] if len(sys.argv) > 1 else FOLDER", "FOLDER").replace(
        "FOLDER", repr(str(path))
    )
    output, seconds = load_tokenizer_in_a_fresh_interpreter(path, load, tmp_path, package)
    assert QUESTION not in output and TRANSFORMERS_LOG not in output, output  # no question, no warning
    assert seconds < 10
    assert f"ids {letter_tokenizer('Tom')['input_ids']}" in output


@pytest.mark.slow  # a fresh interpreter
def test_auto_tokenizer_without_trust_remote_code_still_asks_as_the_docs_say(
    model, letter_tokenizer, tmp_path
) -> None:
    """transformers 5 reads a folder's config.json before its tokenizer files, whatever they hold, and asks before
    running the config's code: nothing a saved folder can write avoids it (docs/hub.md says so and names the ways
    above). When this fails, transformers has changed: simplify docs/hub.md and the model card."""
    model.save_pretrained(tmp_path / "model")
    letter_tokenizer.save_pretrained(tmp_path / "model")
    script = (
        f"from transformers import AutoTokenizer; AutoTokenizer.from_pretrained({str(tmp_path / 'model')!r})"
    )
    completed = subprocess.run(
        [sys.executable, "-c", 'import sys; sys.modules["vaswani_transformer"] = None; ' + script],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path)},
    )  # fmt: skip
    assert QUESTION in completed.stdout + completed.stderr
