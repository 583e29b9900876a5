"""The paper's training recipe (§5) on Seq2SeqTrainer, and the end-to-end train → average → evaluate job."""

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from datasets import Dataset, load_from_disk
from torch.utils.data import DataLoader
from transformers import (
    DataCollatorForSeq2Seq,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)

from .checkpoints import average_checkpoints, find_checkpoints
from .configuration_vaswani_transformer import VaswaniTransformerConfig
from .data import (
    TATOEBA_FILE,
    FilterStats,
    LoadStats,
    TokenBudgetBatchSampler,
    load_parallel,
    load_tatoeba,
    tokenize_parallel,
    train_test_split_fixed,
)
from .evaluation import evaluate_model, load_for_decoding
from .modeling_vaswani_transformer import VaswaniTransformerForConditionalGeneration
from .plotting import plot_training_curve
from .tokenization import load_tokenizer, train_bpe
from .translate import translate

# §5.3 Optimizer: Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 (AdamW with no weight decay is exactly Adam).
ADAM_BETAS = (0.9, 0.98)
ADAM_EPSILON = 1e-9


def paper_learning_rate(d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Peak-setting base rate d_model^-0.5 · warmup^-0.5, which makes `inverse_sqrt` equal eq. (3).

    transformers' inverse_sqrt multiplies it by step/warmup during warm-up and by sqrt(warmup/step) after,
    giving lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5).
    """
    return scale * d_model**-0.5 * warmup_steps**-0.5


def bf16_available() -> bool:
    """Whether this machine trains in bfloat16 (a CUDA GPU that supports it)."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def paper_training_arguments(
    output_dir: str | Path,
    d_model: int,
    *,
    max_steps: int,
    warmup_steps: int = 4000,
    lr_scale: float = 1.0,
    save_steps: int = 1000,
    save_total_limit: int | None = 5,
    logging_steps: int = 20,
    seed: int = 0,
    **overrides: object,
) -> Seq2SeqTrainingArguments:
    """Seq2SeqTrainingArguments with §5.3's optimiser and schedule; label smoothing lives in the model's loss."""
    values: dict[str, object] = {
        "output_dir": str(output_dir),
        "max_steps": max_steps,
        "learning_rate": paper_learning_rate(d_model, warmup_steps, lr_scale),
        "lr_scheduler_type": "inverse_sqrt",
        "warmup_steps": warmup_steps,
        "optim": "adamw_torch",
        "adam_beta1": ADAM_BETAS[0],
        "adam_beta2": ADAM_BETAS[1],
        "adam_epsilon": ADAM_EPSILON,
        "weight_decay": 0.0,
        "max_grad_norm": 0.0,  # the paper does not clip gradients
        "bf16": bf16_available(),
        # Explicit on accelerator-less machines: it also lets torchrun run CPU processes as gloo DDP.
        "use_cpu": not (torch.cuda.is_available() or torch.backends.mps.is_available()),
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": save_total_limit,
        "logging_steps": logging_steps,
        "report_to": [],
        "seed": seed,
        "per_device_train_batch_size": 1,  # unused: batches come from the token-budget sampler
        "dataloader_drop_last": False,
    }
    values.update(overrides)
    return Seq2SeqTrainingArguments(**values)


class TokenBudgetSeq2SeqTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer that trains on §5.1 batches of about `max_tokens` source and target tokens."""

    def __init__(self, *args: object, max_tokens: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.max_tokens = max_tokens

    def get_train_dataloader(self) -> DataLoader:
        sampler = TokenBudgetBatchSampler.from_dataset(
            self.train_dataset, self.max_tokens, seed=self.args.seed
        )
        dataset = self.train_dataset.remove_columns(["src_len", "tgt_len"])
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory and torch.cuda.is_available(),
        )
        return self.accelerator.prepare(loader)


@dataclass
class TrainOptions:
    """Everything the training job needs; the defaults are the embedded Tatoeba CPU job."""

    output_dir: Path = Path("runs/tatoeba-en-de")
    train_source: str | None = None  # None: the embedded Tatoeba corpus, minus a held-out test split
    train_target: str | None = None
    test_source: str | None = None
    test_target: str | None = None
    test_references_tokenized: str | None = None
    source_lang: str = "en"
    target_lang: str = "de"
    test_size: int = 1000
    preset: str = "small"
    config_overrides: dict = field(default_factory=dict)
    vocab_size: int = 8000
    lowercase: bool = False
    max_length: int = 128
    max_tokens: int = 1536  # per process and step; the batch is max_tokens × processes × accumulation
    gradient_accumulation_steps: int = 1
    max_steps: int = 900
    warmup_steps: int = 300
    lr_scale: float = 0.5
    save_steps: int = 50
    average_last: int = 3
    logging_steps: int = 20
    seed: int = 0
    resume: bool = False
    eval_batch_size: int = 128
    num_beams: int = 4
    length_penalty: float = 0.6
    split_compounds: bool = False
    max_test_sentences: int | None = None
    examples: tuple[str, ...] = ("I love you.", "Where is the train station?", "Tom is reading a book.")


@dataclass
class TrainResult:
    """Where things were written and what was measured."""

    model_dir: Path
    scores: dict
    train_seconds: float
    load_stats: list[LoadStats]
    filter_stats: FilterStats
    example_translations: dict[str, str]


def _load_corpora(options: TrainOptions) -> tuple[Dataset, Dataset, list[LoadStats]]:
    """Training pairs and test pairs: given files, or the embedded Tatoeba corpus with a fixed test split."""
    if options.train_source is None:
        pairs, stats = load_tatoeba()
        split = train_test_split_fixed(pairs, options.test_size, seed=options.seed)
        return split["train"], split["test"], [stats]
    train, train_stats = load_parallel(
        options.train_source,
        options.train_target,
        source_lang=options.source_lang,
        target_lang=options.target_lang,
    )
    if options.test_source is None:
        raise ValueError("--test-source is required with --train-source (and --test-target for text pairs).")
    test, test_stats = load_parallel(
        options.test_source,
        options.test_target,
        source_lang=options.source_lang,
        target_lang=options.target_lang,
        split="test",
    )
    return train, test, [train_stats, test_stats]


def _tokenizer_for(
    options: TrainOptions, train: Dataset, output_dir: Path, is_main_process: bool
) -> PreTrainedTokenizerBase:
    """A joint BPE vocabulary trained on both sides of the training pairs by the main process.

    Other processes (and `--resume`) load the one the main process saved, so every rank shares one vocabulary.
    """
    tokenizer_dir = output_dir / "tokenizer"
    if tokenizer_dir.is_dir() and (options.resume or not is_main_process):
        return load_tokenizer(str(tokenizer_dir))
    tokenizer = train_bpe(
        (text for column in ("source", "target") for text in train[column]),
        options.vocab_size,
        lowercase=options.lowercase,
    )
    tokenizer.save_pretrained(tokenizer_dir)
    return tokenizer


def _training_set_key(options: TrainOptions, tokenizer: PreTrainedTokenizerBase) -> str:
    """Identifies a tokenised training set: corpus files (path, size, mtime), vocabulary, split and length limit."""
    parts = [
        tokenizer.backend_tokenizer.to_str(),
        str(options.max_length),
        str(options.test_size),
        str(options.seed),
    ]
    for name in (
        (options.train_source, options.train_target) if options.train_source else (str(TATOEBA_FILE),)
    ):
        path = Path(name) if name else None
        if path is not None and path.exists():
            parts += [str(path.resolve()), str(path.stat().st_size), str(path.stat().st_mtime_ns)]
        else:
            parts.append(str(name))  # a Hub id, or no target file
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _tokenized_training_set(
    options: TrainOptions, train: Dataset, tokenizer: PreTrainedTokenizerBase, output_dir: Path
) -> tuple[Dataset, FilterStats]:
    """`tokenize_parallel` once per corpus and vocabulary: the result is kept on disk under the run folder."""
    cache = output_dir / "tokenized" / _training_set_key(options, tokenizer)
    stats_file = cache / "filter_stats.json"
    if stats_file.exists():
        return load_from_disk(str(cache)), FilterStats(**json.loads(stats_file.read_text()))
    tokenized, stats = tokenize_parallel(train, tokenizer, max_length=options.max_length)
    tokenized.save_to_disk(str(cache))
    stats_file.write_text(json.dumps(asdict(stats)))
    return load_from_disk(str(cache)), stats


def _model_for(options: TrainOptions, vocab_size: int) -> VaswaniTransformerForConditionalGeneration:
    """A freshly initialised model of the chosen preset over the trained vocabulary."""
    config = VaswaniTransformerConfig.from_preset(
        options.preset, vocab_size=vocab_size, **options.config_overrides
    )
    return VaswaniTransformerForConditionalGeneration(config)


def build_trainer(
    model: VaswaniTransformerForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    train_dataset: Dataset,
    args: Seq2SeqTrainingArguments,
    max_tokens: int,
) -> TokenBudgetSeq2SeqTrainer:
    """A Seq2SeqTrainer over token-budget batches, padding with DataCollatorForSeq2Seq."""
    return TokenBudgetSeq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        processing_class=tokenizer,
        max_tokens=max_tokens,
    )


def _final_model_dir(options: TrainOptions, trainer: TokenBudgetSeq2SeqTrainer) -> Path:
    """The averaged last checkpoints (§6.1) when there are enough of them, else the final weights."""
    checkpoints = find_checkpoints(options.output_dir)
    final_dir = options.output_dir / "final"
    if options.average_last > 1 and len(checkpoints) >= 2:
        return average_checkpoints(checkpoints[-options.average_last :], final_dir)
    trainer.save_model(str(final_dir))
    return final_dir


def train_and_evaluate(options: TrainOptions) -> TrainResult | None:
    """Load data, train BPE, train the model with the paper's recipe, average checkpoints, decode, score.

    Under `torchrun` / `accelerate launch` every process trains on its shard of the token batches; only the
    main process trains the vocabulary, averages, evaluates and returns a result (the others return None).
    """
    output_dir = Path(options.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    args = paper_training_arguments(
        output_dir,
        VaswaniTransformerConfig.from_preset(options.preset, **options.config_overrides).d_model,
        max_steps=options.max_steps,
        warmup_steps=options.warmup_steps,
        lr_scale=options.lr_scale,
        save_steps=options.save_steps,
        save_total_limit=max(options.average_last, 1),
        logging_steps=min(options.logging_steps, options.max_steps),  # a short run still logs its loss
        seed=options.seed,
        gradient_accumulation_steps=options.gradient_accumulation_steps,
    )
    is_main_process = args.process_index == 0
    train, test, load_stats = _load_corpora(options)
    with args.main_process_first(desc="joint BPE vocabulary"):
        tokenizer = _tokenizer_for(options, train, output_dir, is_main_process)
    with args.main_process_first(desc="tokenising"):
        tokenized, filter_stats = _tokenized_training_set(options, train, tokenizer, output_dir)
    torch.manual_seed(options.seed)
    model = _model_for(options, len(tokenizer))
    trainer = build_trainer(model, tokenizer, tokenized, args, options.max_tokens)
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=options.resume and bool(find_checkpoints(output_dir)))
    train_seconds = time.perf_counter() - started
    if not is_main_process:
        return None
    model_dir = _final_model_dir(options, trainer)
    tokenizer.save_pretrained(model_dir)
    plot_training_curve(trainer.state.log_history, model_dir / "training_curve.png")
    test = test.select(range(min(len(test), options.max_test_sentences or len(test))))
    scores = evaluate_model(
        model_dir,
        test["source"],
        test["target"],
        references_tokenized=_read_lines(options.test_references_tokenized, len(test)),
        target_lang=options.target_lang,
        batch_size=options.eval_batch_size,
        num_beams=options.num_beams,
        length_penalty=options.length_penalty,
        split_compounds=options.split_compounds,
        show_progress=True,
    )
    examples = _translate_examples(model_dir, options.examples)
    (model_dir / "train_options.json").write_text(json.dumps(asdict(options), default=str, indent=2) + "\n")
    return TrainResult(model_dir, scores, train_seconds, load_stats, filter_stats, examples)


def _read_lines(path: str | None, limit: int) -> list[str] | None:
    """The first `limit` lines of a text file, or None when no file is given."""
    if path is None:
        return None
    return Path(path).read_text(encoding="utf-8").splitlines()[:limit]


def _translate_examples(model_dir: Path, sentences: tuple[str, ...]) -> dict[str, str]:
    """Translations of a few sentences by the saved model."""
    model, tokenizer = load_for_decoding(model_dir)
    return dict(zip(sentences, translate(list(sentences), model, tokenizer), strict=True))
