"""Training-step and decoding speed of VaswaniTransformer against MarianMTModel of the same size, same run.

    python benchmarks/bench_vs_marian.py                       # CPU-sized: the "small" preset shapes
    python benchmarks/bench_vs_marian.py --preset base --batch 128 --device cuda --dtype bfloat16

Both models get identical shapes (layers, d_model, d_ff, heads, shared tied vocabulary, ReLU, scaled
embeddings), identical random batches and the same label-smoothed loss; figures are medians over --repeats
after --warmup runs.
"""

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from transformers import MarianConfig, MarianMTModel

from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration


def marian_twin(config: VaswaniTransformerConfig) -> MarianMTModel:
    """A MarianMTModel with the same architecture and size as `config`."""
    return MarianMTModel(
        MarianConfig(
            vocab_size=config.vocab_size,
            d_model=config.d_model,
            encoder_layers=config.num_encoder_layers,
            decoder_layers=config.num_decoder_layers,
            encoder_attention_heads=config.num_heads,
            decoder_attention_heads=config.num_heads,
            encoder_ffn_dim=config.d_ff,
            decoder_ffn_dim=config.d_ff,
            activation_function="relu",
            dropout=config.dropout,
            scale_embedding=True,
            max_position_embeddings=1024,
            pad_token_id=config.pad_token_id,
            eos_token_id=config.eos_token_id,
            decoder_start_token_id=config.decoder_start_token_id,
            forced_eos_token_id=None,
        )
    )


def median_seconds(run: Callable[[], object], warmup: int, repeats: int, device: str) -> float:
    """Median wall time of `run` after `warmup` untimed calls."""
    times = []
    for i in range(warmup + repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def label_smoothed_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """The paper's training loss (§5.4, ε = 0.1) for either model, so both steps do the same work."""
    if isinstance(model, VaswaniTransformerForConditionalGeneration):
        return model(**batch).loss  # computes it internally
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(batch["labels"])
    logits = model(input_ids=batch["input_ids"], decoder_input_ids=decoder_input_ids).logits
    return torch.nn.functional.cross_entropy(
        logits.float().flatten(0, 1), batch["labels"].flatten(), label_smoothing=0.1
    )


def train_step(
    model: torch.nn.Module, batch: dict, optimizer: torch.optim.Optimizer, dtype: torch.dtype
) -> None:
    """One forward, backward and Adam update."""
    with torch.autocast(batch["input_ids"].device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss = label_smoothed_loss(model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=64, help="sentences per batch")
    parser.add_argument("--length", type=int, default=24, help="source and target length in tokens")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    config = VaswaniTransformerConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    models = {"vaswani": VaswaniTransformerForConditionalGeneration(config), "marian": marian_twin(config)}
    source = torch.randint(4, args.vocab_size, (args.batch, args.length), device=args.device)
    batch = {
        "input_ids": source,
        "labels": torch.randint(4, args.vocab_size, source.shape, device=args.device),
    }
    results: dict[str, dict[str, float]] = {}
    for name, model in models.items():
        model.to(args.device).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        train = median_seconds(
            lambda m=model, o=optimizer: train_step(m, batch, o, dtype),
            args.warmup,
            args.repeats,
            args.device,
        )
        model.eval()
        paper = models["vaswani"].generation_config  # beam 4, α 0.6 (§6.1), given to both models
        decode_kwargs = {
            "num_beams": paper.num_beams,
            "max_new_tokens": args.length,
            "min_new_tokens": args.length,
            "length_penalty": paper.length_penalty,
        }
        with torch.inference_mode(), torch.autocast(args.device, dtype=dtype, enabled=dtype != torch.float32):
            decode = median_seconds(
                lambda m=model, k=decode_kwargs: m.generate(input_ids=source, **k),
                1,
                max(2, args.repeats // 2),
                args.device,
            )
        params = sum(p.numel() for p in model.parameters())
        results[name] = {"train_step_s": train, "decode_s": decode, "params": params}
        tokens = args.batch * args.length
        print(
            f"{name:8s} params {params / 1e6:6.2f}M  train step {train * 1e3:8.1f} ms ({tokens / train:8.0f} tgt tok/s)  "
            f"beam-4 decode {decode * 1e3:8.1f} ms ({args.batch * args.length / decode:7.0f} tok/s)"
        )
    ratio_train = results["marian"]["train_step_s"] / results["vaswani"]["train_step_s"]
    ratio_decode = results["marian"]["decode_s"] / results["vaswani"]["decode_s"]
    print(
        f"speed-up over MarianMTModel: training {ratio_train:.2f}x, beam decoding {ratio_decode:.2f}x "
        f"(device {args.device}, dtype {args.dtype}, torch {torch.__version__})"
    )


if __name__ == "__main__":
    main()
