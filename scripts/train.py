r"""Train the paper's Transformer, average the last checkpoints, and report BLEU on a held-out test set.

With no arguments: a small model on the embedded Tatoeba English-German corpus (CPU, about 10-15 minutes):
    python scripts/train.py

Multi30k En-De from ../shared/data (lowercased tokenised BLEU comparable to published numbers), on a GPU:
    python scripts/train.py --preset base --output runs/multi30k \
        --train-source ../shared/data/multi30k/train.en --train-target ../shared/data/multi30k/train.de \
        --test-source ../shared/data/multi30k/test_2016_flickr.en \
        --test-target ../shared/data/multi30k/test_2016_flickr.de \
        --test-references-tokenized ../shared/data/multi30k-tok/test_2016_flickr.lc.norm.tok.de \
        --dropout 0.3 --vocab-size 8000 --lowercase --max-tokens 8192 --max-steps 3000 --warmup 1000
"""

import argparse
import json
from pathlib import Path

from vaswani_transformer.configuration_vaswani_transformer import PRESETS
from vaswani_transformer.training import TrainOptions, train_and_evaluate

DEFAULTS = TrainOptions()


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the docstring's layout and shows every default."""


def parse_args() -> TrainOptions:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    data = parser.add_argument_group(
        "data (default: embedded Tatoeba en-de with a fixed held-out test split)"
    )
    data.add_argument(
        "--train-source", help="source text file (one sentence a line), a TSV file, or a Hub id"
    )
    data.add_argument("--train-target", help="target text file, line-aligned with --train-source")
    data.add_argument("--test-source", help="test source file / TSV / Hub id (required with --train-source)")
    data.add_argument("--test-target", help="test target (reference) file")
    data.add_argument("--test-references-tokenized", help="tokenised references for tokenised BLEU")
    data.add_argument("--source-lang", default=DEFAULTS.source_lang, help="source language code")
    data.add_argument("--target-lang", default=DEFAULTS.target_lang, help="target language code")
    data.add_argument("--test-size", type=int, default=DEFAULTS.test_size, help="Tatoeba held-out pairs")
    data.add_argument("--max-test-sentences", type=int, help="score only the first N test sentences")
    model = parser.add_argument_group("model and vocabulary")
    model.add_argument(
        "--preset", default=DEFAULTS.preset, choices=sorted(PRESETS), help="paper configuration"
    )
    model.add_argument("--dropout", type=float, help="override the preset's residual dropout")
    model.add_argument(
        "--vocab-size", type=int, default=DEFAULTS.vocab_size, help="joint BPE vocabulary size"
    )
    model.add_argument("--lowercase", action="store_true", help="lowercase text before BPE")
    train = parser.add_argument_group("training (§5: Adam 0.9/0.98/1e-9, inverse-sqrt schedule)")
    train.add_argument("--output", type=Path, default=DEFAULTS.output_dir, help="run folder")
    train.add_argument(
        "--max-tokens",
        type=int,
        default=DEFAULTS.max_tokens,
        help="padded tokens per batch, side and process",
    )
    train.add_argument(
        "--grad-accumulation",
        type=int,
        default=DEFAULTS.gradient_accumulation_steps,
        help="batches per update",
    )
    train.add_argument("--max-length", type=int, default=DEFAULTS.max_length, help="drop longer pairs")
    train.add_argument("--max-steps", type=int, default=DEFAULTS.max_steps, help="optimiser updates")
    train.add_argument(
        "--warmup", type=int, default=DEFAULTS.warmup_steps, help="warm-up steps (paper: 4000)"
    )
    train.add_argument("--lr-scale", type=float, default=DEFAULTS.lr_scale, help="multiplies eq. (3)")
    train.add_argument("--save-steps", type=int, default=DEFAULTS.save_steps, help="checkpoint interval")
    train.add_argument(
        "--average-last", type=int, default=DEFAULTS.average_last, help="checkpoints to average"
    )
    train.add_argument("--seed", type=int, default=DEFAULTS.seed, help="seed for init, batches, test split")
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output")
    decode = parser.add_argument_group("evaluation (§6.1: beam 4, GNMT length penalty 0.6, max = input + 50)")
    decode.add_argument("--num-beams", type=int, default=DEFAULTS.num_beams, help="beam size")
    decode.add_argument("--length-penalty", type=float, default=DEFAULTS.length_penalty, help="GNMT α")
    decode.add_argument(
        "--eval-batch-size", type=int, default=DEFAULTS.eval_batch_size, help="sentences per batch"
    )
    decode.add_argument("--split-compounds", action="store_true", help="WMT14 ##AT## compound splitting")
    a = parser.parse_args()
    return TrainOptions(
        output_dir=a.output,
        train_source=a.train_source,
        train_target=a.train_target,
        test_source=a.test_source,
        test_target=a.test_target,
        test_references_tokenized=a.test_references_tokenized,
        source_lang=a.source_lang,
        target_lang=a.target_lang,
        test_size=a.test_size,
        max_test_sentences=a.max_test_sentences,
        preset=a.preset,
        config_overrides={} if a.dropout is None else {"dropout": a.dropout},
        vocab_size=a.vocab_size,
        lowercase=a.lowercase,
        max_tokens=a.max_tokens,
        gradient_accumulation_steps=a.grad_accumulation,
        max_length=a.max_length,
        max_steps=a.max_steps,
        warmup_steps=a.warmup,
        lr_scale=a.lr_scale,
        save_steps=a.save_steps,
        average_last=a.average_last,
        seed=a.seed,
        resume=a.resume,
        num_beams=a.num_beams,
        length_penalty=a.length_penalty,
        eval_batch_size=a.eval_batch_size,
        split_compounds=a.split_compounds,
    )


def main() -> None:
    result = train_and_evaluate(parse_args())
    if result is None:  # not the main process of a multi-process (accelerate launch) run
        return
    for stats in result.load_stats:
        print(stats.summary())
    print(result.filter_stats.summary())
    print(f"trained in {result.train_seconds / 60:.1f} min")
    print(
        f"sacreBLEU: {result.scores['sacrebleu']['score']:.2f}  ({result.scores['sacrebleu']['signature']})"
    )
    print(f"tokenised BLEU: {result.scores['tokenized_bleu']['score']:.2f}")
    for source, translation in result.example_translations.items():
        print(f"  {source}  ->  {translation}")
    print(json.dumps({"model_dir": str(result.model_dir), "scores": str(result.model_dir / "scores.json")}))
    print(
        f"model saved to {result.model_dir}: AutoModelForSeq2SeqLM / AutoTokenizer.from_pretrained(...) after "
        "`import vaswani_transformer`, or with trust_remote_code=True"
    )


if __name__ == "__main__":
    main()
