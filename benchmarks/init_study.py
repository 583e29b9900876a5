r"""Why post-norm models collapse with one initialisation and not another: instrumented short trainings.

For each (preset, init_scheme, peak learning rate) this trains on Multi30k En→De (lowercased, joint BPE 8k, from
../shared/data) with the paper's optimiser and warm-up/inverse-sqrt schedule, and records at fixed steps:

- the training loss against the unigram floor (the label-smoothed loss of the best input-independent predictor,
  `unigram_loss`);
- the source gain: validation loss with every sentence paired with another sentence's source, minus the loss with
  its own source (nats per token). It is 0 for a model that ignores the source, whatever its loss;
- on a fixed batch of validation pairs, in eval mode: the mean attention entropy of encoder self-attention,
  decoder self-attention and encoder-decoder attention (as a fraction of the uniform entropy, 1 = uniform), the
  gain of each residual branch (RMS of the sub-layer's output / RMS of its input, averaged over layers), the
  standard deviation of the logits, and the validation loss;
- how alike the encoder's outputs at different positions of a sentence are (mean cosine similarity; 1 means the
  encoder no longer tells its tokens apart, so encoder-decoder attention has nothing to choose between), and how
  alike the rows of the tied embedding table are (mean cosine of 500 frequent tokens' rows);
- at the end, greedy translations of validation sentences and the share that are degenerate (empty or one
  repeated token).

    python benchmarks/init_study.py --presets tiny small --inits normal xavier --peak-lrs 1e-3 2e-3 \
        --steps 400 --warmup 200 --max-tokens 1024 --output benchmarks/init_study.json
    python benchmarks/init_study.py --plot benchmarks/init_study.json --figure benchmarks/init_study.png
    python benchmarks/init_study.py --at-init --presets tiny small base big

Models train on --device (a GPU when there is one; the figures above are from a CPU, in float32 either way).

`--at-init` trains nothing: it prints, for freshly initialised models, how alike the encoder's outputs at different
positions are after each layer, with the attention entropies and branch gains.

Runs are appended to the JSON file, so one study can be spread over several invocations.
"""

import argparse
import json
import math
import time
from collections import defaultdict
from pathlib import Path

import torch
from transformers import DataCollatorForSeq2Seq, get_inverse_sqrt_schedule

from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration
from vaswani_transformer.data import TokenBudgetBatchSampler, load_parallel, tokenize_parallel
from vaswani_transformer.data.token_arrays import TokenizedPairs
from vaswani_transformer.data.tokenization import train_bpe
from vaswani_transformer.decoding.translate import translate
from vaswani_transformer.training import ADAM_BETAS, ADAM_EPSILON
from vaswani_transformer.training.monitoring import is_degenerate, unigram_loss

SUBLAYERS = ("self_attn", "encoder_attn", "feed_forward")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"), help="holds multi30k/")
    parser.add_argument("--presets", nargs="+", default=["tiny"])
    parser.add_argument(
        "--inits", nargs="+", default=["normal", "xavier"], help='init schemes; "normal:0.014" sets init_std'
    )
    parser.add_argument("--peak-lrs", nargs="+", type=float, default=[1e-3])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=1024, help="padded tokens per side and batch")
    parser.add_argument("--probe-every", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="where the models train"
    )
    parser.add_argument("--output", type=Path, default=Path("benchmarks/init_study.json"))
    parser.add_argument("--plot", type=Path, nargs="+", help="only draw the figure of these JSON files")
    parser.add_argument("--at-init", action="store_true", help="only analyse freshly initialised models")
    parser.add_argument("--figure", type=Path, default=Path("benchmarks/init_study.png"))
    return parser.parse_args()


def load_data(data_dir: Path, max_tokens: int, seed: int):
    """Tokenizer, training batches (loader) and the unigram floor; probe pairs from val."""
    train, _ = load_parallel(str(data_dir / "multi30k/train.en"), str(data_dir / "multi30k/train.de"))
    val, _ = load_parallel(str(data_dir / "multi30k/val.en"), str(data_dir / "multi30k/val.de"))
    tokenizer = train_bpe((t for c in ("source", "target") for t in train[c]), 8000, lowercase=True)
    tokenized, _ = tokenize_parallel(train, tokenizer, max_length=128)
    sampler = TokenBudgetBatchSampler.from_dataset(tokenized, max_tokens, seed=seed)
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    loader = torch.utils.data.DataLoader(
        tokenized.remove_columns(["src_len", "tgt_len"]), batch_sampler=sampler, collate_fn=collator
    )
    return tokenizer, loader, tokenized, val


def batches_forever(loader):
    epoch = 0
    while True:
        loader.batch_sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


class BranchGains:
    """Forward hooks that record RMS(sub-layer output) / RMS(sub-layer input) for every residual branch."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.values: dict[str, list[float]] = defaultdict(list)
        self.handles = []
        for stack in ("encoder", "decoder"):
            for index, layer in enumerate(getattr(model.model, stack).layers):
                for name in SUBLAYERS:
                    if hasattr(layer, name):
                        key = f"{stack}.{name}"
                        self.handles.append(
                            getattr(layer, name).register_forward_hook(self._hook(key, index))
                        )

    def _hook(self, key: str, index: int):
        def hook(module, args, output):
            out = output[0] if isinstance(output, tuple) else output
            self.values[key].append((out.pow(2).mean() / args[0].pow(2).mean()).sqrt().item())

        return hook

    def pop(self) -> dict[str, float]:
        means = {key: sum(v) / len(v) for key, v in self.values.items()}
        self.values.clear()
        return means


def mean_pairwise_cosine(vectors: torch.Tensor) -> float:
    """Mean cosine similarity between distinct rows of a (n, d) matrix."""
    unit = torch.nn.functional.normalize(vectors.float(), dim=-1)
    similarity = unit @ unit.T
    n = len(unit)
    return ((similarity.sum() - similarity.diagonal().sum()) / (n * (n - 1))).item()


def encoder_position_similarity(states: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over sentences of the mean cosine similarity between the encoder outputs at its real positions."""
    values = [mean_pairwise_cosine(s[m.bool()]) for s, m in zip(states, mask, strict=True) if m.sum() > 1]
    return sum(values) / len(values)


def attention_entropy(
    weights: tuple[torch.Tensor, ...], query_mask: torch.Tensor, key_mask: torch.Tensor, causal: bool = False
) -> float:
    """Mean entropy of the attention rows of real queries, each divided by the log of the number of keys it may
    see (the uniform entropy): 1 is uniform attention, 0 attention to one key. Rows with one key are left out."""
    keys = key_mask.sum(-1, keepdim=True).float()  # (batch, 1)
    if causal:  # query i sees keys 0 … i
        keys = torch.minimum(keys, torch.arange(1, key_mask.shape[-1] + 1, device=keys.device).float())
    keys = keys.expand_as(query_mask.float())  # (batch, queries)
    rows = query_mask.bool() & (keys > 1)
    fractions = []
    for layer in weights:  # (batch, heads, queries, keys)
        entropy = -(layer.clamp_min(1e-12).log() * layer).sum(-1)  # (batch, heads, queries)
        fraction = entropy / keys.log().clamp_min(1e-9)[:, None, :]
        fractions.append(fraction.mean(1)[rows].mean().item())
    return sum(fractions) / len(fractions)


@torch.no_grad()
def probe(model, probe_batch, gains: BranchGains, frequent: torch.Tensor) -> dict[str, float]:
    """Validation loss, attention entropies, branch gains and logit scale on a fixed batch, eval mode."""
    model.eval()
    model.set_attn_implementation("eager")
    out = model(**probe_batch, output_attentions=True)
    model.set_attn_implementation("sdpa")
    branch_gains = gains.pop()
    shuffled = {
        **probe_batch,
        "input_ids": probe_batch["input_ids"].roll(1, 0),
        "attention_mask": probe_batch["attention_mask"].roll(1, 0),
    }
    shuffled_loss = model(**shuffled).loss.item()
    gains.pop()  # only the true-source pass is recorded
    model.train()
    src_mask = probe_batch["attention_mask"]
    tgt_mask = (probe_batch["labels"] != -100).long()
    real = probe_batch["labels"] != -100
    return {
        "val_loss": out.loss.item(),
        "source_gain": shuffled_loss - out.loss.item(),
        "entropy_encoder_self": attention_entropy(out.encoder_attentions, src_mask, src_mask),
        "entropy_decoder_self": attention_entropy(out.decoder_attentions, tgt_mask, tgt_mask, causal=True),
        "entropy_cross": attention_entropy(out.cross_attentions, tgt_mask, src_mask),
        "logit_std": out.logits[real].std().item(),
        "encoder_similarity": encoder_position_similarity(out.encoder_last_hidden_state, src_mask),
        "embedding_similarity": mean_pairwise_cosine(model.model.encoder.embed_tokens.weight[frequent]),
        **{f"gain.{key}": value for key, value in branch_gains.items()},
    }


def init_settings(spec: str) -> dict:
    """Config values of an `--inits` entry: a scheme ("normal", "xavier"), or "normal:STD" for another std."""
    scheme, _, std = spec.partition(":")
    return {"init_scheme": scheme, **({"init_std": float(std)} if std else {})}


def run_one(preset, init, peak_lr, args, tokenizer, loader, unigram, probe_batch, val, frequent) -> dict:
    torch.manual_seed(args.seed)
    config = VaswaniTransformerConfig.from_preset(preset, vocab_size=len(tokenizer), **init_settings(init))
    model = VaswaniTransformerForConditionalGeneration(config).to(args.device)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=peak_lr, betas=ADAM_BETAS, eps=ADAM_EPSILON, weight_decay=0.0
    )
    schedule = get_inverse_sqrt_schedule(optimizer, num_warmup_steps=args.warmup)
    gains = BranchGains(model)
    record = {
        "preset": preset,
        "init": init,
        "peak_lr": peak_lr,
        "warmup": args.warmup,
        "max_tokens": args.max_tokens,
        "unigram_loss": unigram,
        "steps": [],
    }
    window: list[float] = []
    started = time.perf_counter()
    batches = batches_forever(loader)
    record["steps"].append({"step": 0, "loss": float("nan"), **probe(model, probe_batch, gains, frequent)})
    for step in range(1, args.steps + 1):
        batch = next(batches).to(args.device)
        loss = model(**batch).loss
        loss.backward()
        grad_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        window.append(loss.item())
        if not math.isfinite(window[-1]):
            record["diverged_at"] = step
            break
        if step % args.probe_every == 0:
            entry = {
                "step": step,
                "loss": sum(window) / len(window),
                "lr": schedule.get_last_lr()[0],
                "grad_norm": grad_norm.item(),
                **probe(model, probe_batch, gains, frequent),
            }
            window.clear()
            record["steps"].append(entry)
            print(
                f"{preset} {init} {peak_lr:g} step {step}: loss {entry['loss']:.3f} (floor {unigram:.3f}) "
                f"src-gain {entry['source_gain']:.2f} cross-ent {entry['entropy_cross']:.2f} enc-ent {entry['entropy_encoder_self']:.2f} "
                f"gains ffn {entry['gain.encoder.feed_forward']:.2f} "
                f"logit-std {entry['logit_std']:.2f} {time.perf_counter() - started:.0f}s",
                flush=True,
            )
    for handle in gains.handles:
        handle.remove()
    sources = list(val["source"][:32])
    hypotheses = translate(sources, model, tokenizer, num_beams=1, batch_size=32)
    record["degenerate_fraction"] = sum(is_degenerate(h) for h in hypotheses) / len(hypotheses)
    record["samples"] = list(zip(sources[:4], hypotheses[:4], strict=True))
    record["seconds"] = time.perf_counter() - started
    return record


def at_init(
    presets: list[str], inits: list[str], tokenizer, probe_batch, frequent: torch.Tensor, device: str
) -> None:
    """Print the layer-by-layer encoder position similarity and the probe of untrained models."""
    print(
        "preset init   | encoder outputs, cosine between positions: embeddings, layer 1 … N | "
        "cross-attn entropy | gains: enc self-attn, enc FFN, cross-attn"
    )
    for preset in presets:
        for init in inits:
            torch.manual_seed(0)
            config = VaswaniTransformerConfig.from_preset(
                preset, vocab_size=len(tokenizer), **init_settings(init)
            )
            model = VaswaniTransformerForConditionalGeneration(config).to(device).eval()
            with torch.no_grad():
                states = model.model.encoder(
                    input_ids=probe_batch["input_ids"],
                    attention_mask=probe_batch["attention_mask"],
                    output_hidden_states=True,
                ).hidden_states
            mask = probe_batch["attention_mask"]
            similarity = " ".join(f"{encoder_position_similarity(h, mask):.2f}" for h in states)
            result = probe(model, probe_batch, BranchGains(model), frequent)
            print(
                f"{preset:6s} {init:6s} | {similarity:42s} | {result['entropy_cross']:.3f} | "
                f"{result['gain.encoder.self_attn']:.2f} {result['gain.encoder.feed_forward']:.2f} "
                f"{result['gain.decoder.encoder_attn']:.2f}"
            )


def plot(records: list[dict], path: Path) -> None:
    from matplotlib.figure import Figure

    presets = list(dict.fromkeys(r["preset"] for r in records))
    metrics = [
        ("loss", "training loss"),
        ("source_gain", "source gain (nats/token)"),
        ("encoder_similarity", "encoder position similarity"),
        ("entropy_cross", "cross-attention entropy / uniform"),
    ]
    figure = Figure(figsize=(4.2 * len(presets), 3.2 * len(metrics)))
    axes = figure.subplots(len(metrics), len(presets), squeeze=False)
    styles = {"normal": "-", "xavier": "--"}
    lrs = sorted({r["peak_lr"] for r in records})
    colours = {lr: f"C{i}" for i, lr in enumerate(lrs)}
    for column, preset in enumerate(presets):
        for record in (r for r in records if r["preset"] == preset):
            steps = [s for s in record["steps"] if s["step"] > 0 or s is record["steps"][0]]
            label = f"{record['init']}, peak {record['peak_lr']:g}"
            for row, (key, _) in enumerate(metrics):
                xs = [s["step"] for s in steps if key in s and math.isfinite(s[key])]
                ys = [s[key] for s in steps if key in s and math.isfinite(s[key])]
                axes[row][column].plot(
                    xs,
                    ys,
                    styles.get(record["init"], ":"),
                    color=colours[record["peak_lr"]],
                    label=label,
                )
        floor = next(r["unigram_loss"] for r in records if r["preset"] == preset)
        axes[0][column].axhline(floor, color="grey", lw=0.8, label="unigram floor")
        axes[0][column].set_title(f"preset {preset}")
        for row, (_, ylabel) in enumerate(metrics):
            axes[row][column].set_ylabel(ylabel)
            axes[row][column].set_xlabel("step")
        axes[0][column].legend(fontsize=7)
    figure.suptitle(
        "Multi30k En→De, post-norm. Solid: normal 0.02, dashed: xavier; colour: peak learning rate"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    args = parse_args()
    if args.plot:
        plot([record for path in args.plot for record in json.loads(path.read_text())], args.figure)
        print(f"wrote {args.figure}")
        return
    tokenizer, loader, tokenized, val = load_data(args.data_dir, args.max_tokens, args.seed)
    counts = TokenizedPairs.from_dataset(tokenized).target_counts(len(tokenizer))
    unigram = unigram_loss(counts, label_smoothing=0.1)
    counts = torch.from_numpy(counts)
    frequent = counts.topk(500).indices.to(args.device)  # the 500 commonest tokens
    probe_pairs = val.select(range(64))
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    encoded = tokenizer(list(probe_pairs["source"]), text_target=list(probe_pairs["target"]))
    probe_batch = collator(
        [
            {k: encoded[k][i] for k in ("input_ids", "attention_mask", "labels")}
            for i in range(len(probe_pairs))
        ]
    ).to(args.device)
    if args.at_init:
        at_init(args.presets, args.inits, tokenizer, probe_batch, frequent, args.device)
        return
    records = json.loads(args.output.read_text()) if args.output.exists() else []
    for preset in args.presets:
        for peak_lr in args.peak_lrs:
            for init in args.inits:
                records.append(
                    run_one(
                        preset, init, peak_lr, args, tokenizer, loader, unigram, probe_batch, val, frequent
                    )
                )
                args.output.write_text(json.dumps(records, indent=1))
    plot(records, args.figure)


if __name__ == "__main__":
    main()
