"""The model inside Seq2SeqTrainer: collator, training, generation at evaluation, gradient accumulation."""

import json
import random
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.decoding.translate import translate
from vaswani_transformer.modeling.saving_vaswani_transformer import FOLDER_CODE


def reversal_dataset(tokenizer, size: int, seed: int) -> Dataset:
    """Source: random letters; target: the same letters reversed (lengths vary, so padding matters)."""
    rng = random.Random(seed)
    sources = [" ".join(rng.choices("abcdefghij", k=rng.randint(2, 7))) for _ in range(size)]
    targets = [" ".join(reversed(s.split())) for s in sources]
    return Dataset.from_dict(dict(tokenizer(sources, text_target=targets)))


def trainer_for(model, tokenizer, dataset, output_dir: Path, **overrides) -> Seq2SeqTrainer:
    args = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 16,
        "learning_rate": 3e-3,
        "max_steps": 60,
        "logging_steps": 1,
        "report_to": [],
        "save_strategy": "no",
        "use_cpu": True,
        "predict_with_generate": True,
        "seed": 0,
        "disable_tqdm": True,
    } | overrides
    return Seq2SeqTrainer(
        model=model,
        args=Seq2SeqTrainingArguments(**args),
        train_dataset=dataset,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
    )


def test_seq2seq_trainer_learns_and_generates(letter_tokenizer, tmp_path: Path) -> None:
    torch.manual_seed(0)
    # At this toy width (d_model 32) the default N(0, 0.02) sits ~200 steps on the unigram plateau of the
    # reversal task before it learns; N(0, 0.1) leaves it within 60 (docs/decisions/initialisation.md).
    config = tiny_config(vocab_size=len(letter_tokenizer), init_std=0.1)
    model = VaswaniTransformerForConditionalGeneration(config)
    trainer = trainer_for(model, letter_tokenizer, reversal_dataset(letter_tokenizer, 512, seed=0), tmp_path)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
    test = reversal_dataset(letter_tokenizer, 8, seed=1)
    prediction = trainer.predict(test, max_new_tokens=10)
    assert prediction.predictions.shape[0] == 8
    assert prediction.predictions[:, 0].tolist() == [2] * 8  # decoding starts from <s>
    translations = translate(["a b c", "d e f g h i j a"], model, letter_tokenizer, batch_size=1)
    assert len(translations) == 2 and all(set(t.split()) <= set("abcdefghij") for t in translations)


def test_gradient_accumulation_equals_one_big_batch(letter_tokenizer, tmp_path: Path) -> None:
    """2 micro-batches of 2 give the same update as one batch of 4 (loss is normalised by all target tokens)."""
    dataset = reversal_dataset(letter_tokenizer, 4, seed=3)
    assert len(set(map(len, dataset["labels"]))) > 1  # unequal lengths: a per-micro-batch mean would differ
    weights = []
    for batch_size, accumulation in ((4, 1), (2, 2)):
        torch.manual_seed(0)
        model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
        trainer = trainer_for(
            model,
            letter_tokenizer,
            dataset,
            tmp_path / str(batch_size),
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            optim="sgd",
            learning_rate=1.0,
            lr_scheduler_type="constant",
            max_grad_norm=0.0,
        )
        trainer.train()
        weights.append(model.model.encoder.layers[0].self_attn.q_proj.weight.detach().clone())
    initial = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    assert not torch.allclose(weights[0], initial.model.encoder.layers[0].self_attn.q_proj.weight)
    torch.testing.assert_close(weights[0], weights[1], rtol=1e-5, atol=1e-6)


def test_eval_loss_is_plain_cross_entropy_and_label_smoothing_factor_is_honoured(
    letter_tokenizer, tmp_path: Path
) -> None:
    """`eval_loss` is the plain per-token negative log-likelihood (it was label-smoothed), and a
    Trainer's `label_smoothing_factor` replaces the model's ε with its own (transformers' LabelSmoother), in
    training and evaluation alike, as for any transformers model."""
    torch.manual_seed(0)
    # wide initial weights: peaked predictions, on which smoothing changes the loss clearly
    model = VaswaniTransformerForConditionalGeneration(
        tiny_config(vocab_size=len(letter_tokenizer), init_std=0.5)
    )
    dataset = reversal_dataset(letter_tokenizer, 8, seed=2)
    batch = DataCollatorForSeq2Seq(letter_tokenizer, model=model)([dataset[i] for i in range(8)])
    labels = batch.pop("labels")

    def mean_loss(smoothing: float) -> float:
        with torch.no_grad():
            logits = model.eval()(**batch).logits
        return torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=smoothing
        ).item()

    plain, smoothed = mean_loss(0.0), mean_loss(0.2)
    assert abs(plain - smoothed) > 0.01  # far beyond the comparisons' tolerance below
    settings = {"per_device_eval_batch_size": 8, "predict_with_generate": False}
    trainer = trainer_for(model, letter_tokenizer, dataset, tmp_path / "plain", **settings)
    assert trainer.evaluate(dataset)["eval_loss"] == pytest.approx(plain, rel=1e-5)
    trainer = trainer_for(
        model, letter_tokenizer, dataset, tmp_path / "smoothed", label_smoothing_factor=0.2, **settings
    )
    assert trainer.evaluate(dataset)["eval_loss"] == pytest.approx(smoothed, rel=1e-5)
    with torch.no_grad():  # training: the Trainer's ε = 0.2, not the model's 0.1 (tiny_config has no dropout)
        assert trainer.compute_loss(model.train(), {**batch, "labels": labels}).item() == pytest.approx(
            smoothed, rel=1e-5
        )


def test_trainer_saves_carry_the_translation_pipeline(letter_tokenizer, tmp_path: Path) -> None:
    """Trainer.save_model (and so push_to_hub and checkpoints) writes the pipeline's code and
    declares it, as save_pretrained does."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    dataset = reversal_dataset(letter_tokenizer, 8, seed=4)
    trainer = trainer_for(
        model, letter_tokenizer, dataset, tmp_path / "run", max_steps=1, save_strategy="steps"
    )
    trainer.train()
    for folder in (tmp_path / "run" / "checkpoint-1", tmp_path / "saved"):
        if folder.name == "saved":
            trainer.save_model(str(folder))
        config = json.loads((folder / "config.json").read_text())
        assert (
            config["custom_pipelines"]["vaswani-translation"]["impl"]
            == "pipeline_vaswani_transformer.VaswaniTranslationPipeline"
        )
        assert {path.name for path in folder.glob("*.py")} == set(FOLDER_CODE)


def test_every_predicted_batch_gets_the_papers_output_limit(
    letter_tokenizer, tmp_path: Path, generation_warnings
) -> None:
    """Seq2SeqTrainer writes transformers' default max_length (20) into the model's generation
    config after its first generated batch, which capped every later batch at 20 tokens (instead of §6.1's
    longest source + 50) and made `max_new_tokens` warn that both were set. Now every batch gets the paper's
    limit, and `max_new_tokens` takes precedence without the warning."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    # no EOS ever: each output runs to its limit, so the lengths show the limit
    model.generation_config.update(num_beams=1, suppress_tokens=[model.config.eos_token_id])
    test = reversal_dataset(letter_tokenizer, 8, seed=1)
    trainer = trainer_for(model, letter_tokenizer, test, tmp_path, per_device_eval_batch_size=4)
    predictions = trainer.predict(test).predictions
    assert model.generation_config.max_length == 20  # what the Trainer wrote after the first batch
    generated = (predictions[:, 1:] > 0).sum(-1)  # tokens after <s> (pad 0, the Trainer's padding -100)
    assert generated.min() > 50 and predictions.shape[1] > 21  # batch 2 too, past 20
    short = trainer.predict(test, max_new_tokens=5).predictions
    assert ((short[:, 1:] > 0).sum(-1) == 5).all()
    assert not [message for message in generation_warnings if "seem to have been set" in message]
