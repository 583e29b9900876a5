"""Training speed: our model's step against MarianMTModel's, and the training job against the model's step alone.

    python benchmarks/bench_training.py              # CPU, about a minute: "small" shapes, Multi30k from ../shared
    python benchmarks/bench_training.py --device cuda --dtype bfloat16 --preset base --vocab_size 37000 \\
        --batch 384 --length 64 --max_tokens 8192 --steps 300 --peak_tflops 989

(a) Model step. First the machine's own float32 and bfloat16 matrix-product peaks are measured (the roofline).
    Both models get identical shapes (layers, d_model, d_ff, heads, one tied vocabulary, ReLU, scaled embeddings),
    the same random batch of --batch sentences × --length source and --length target tokens, the §5.4
    label-smoothed loss and §5.3 Adam; one step is forward, backward and update. Ours steps in --dtype (auto: the
    package's default on this device, bf16 autocast where it is faster) and in float32; MarianMTModel in float32
    (what its users get by default) and in --dtype (like for like). The runs take turns of --steps_per_turn
    consecutive steps (as a training run takes them: with 1, each step follows another model's and starts with
    cold caches); figures are per step, medians of --repeats turns. MFU = training FLOPs per step / step time /
    the peak of the step's precision measured in the same turns (a run of square matrix products takes its turn
    with the models, its median beside theirs, so the machine's drift, 18% between runs a minute apart on a
    2-core CPU, hits both alike; the MFU against the roofline measured first is printed too), counting 2 FLOPs
    per multiply-add of every matrix product (projections, attention scores and weighted sums, the softmax
    layer) and training = 3 × forward (backward ≈ 2 × forward); `training_flops` is the formula. Marian's
    attention biases and our fused loss do not change the count. --peak_tflops adds MFU against a datasheet
    figure. --torch_compile compiles our model (and the job's, through the Trainer).
(c) Attention kernels: one causal attention call at the step's shapes, forward and backward, torch's sdpa kernel
    against the eager path's matrix products, in float32 and bfloat16 (why bf16 on a CPU attends with the eager
    kernels).
(b) Job. The training loop of `scripts/train.py` (`build_trainer` on `paper_training_arguments`, Multi30k with a
    joint BPE of --vocab_size, token-budget batches of --max_tokens) runs --steps updates; its logged target
    tokens/s after the first log window is compared with the same model's step alone on batches of that loader
    already on the device. The ratio is the share of the model's speed the job keeps; the rest is host overhead.
"""

import argparse
import copy
import itertools
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch
from peers import (
    add_device_arguments,
    alternating_medians,
    dtype_name,
    marian_twin,
    matmul_products,
    peak_memory_mb,
    peak_size,
    print_peaks,
    resolve_dtype,
    synchronize,
)
from torch.nn.functional import scaled_dot_product_attention
from transformers import PreTrainedModel

from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration
from vaswani_transformer.data import load_text_pair, tokenize_parallel
from vaswani_transformer.data.tokenization import train_bpe
from vaswani_transformer.modeling.modeling_vaswani_transformer import eager_attention_forward
from vaswani_transformer.training import ADAM_BETAS, ADAM_EPSILON, build_trainer, paper_training_arguments
from vaswani_transformer.training.fused_loss import use_fused_loss
from vaswani_transformer.training.monitoring import TrainingProgress
from vaswani_transformer.training.options import DEFAULTS
from vaswani_transformer.training.run_precision import decide_precision

# square matrix products in a turn of the peak runs (0.2 s in bfloat16 on 2 CPU cores)
PEAK_PRODUCTS_PER_TURN = 10
MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def training_flops(
    config: VaswaniTransformerConfig, batch: int, source_length: int, target_length: int
) -> float:
    """FLOPs of one training step on `batch` pairs: 3 × forward, 2 FLOPs per multiply-add."""
    d, qk, v = config.d_model, config.num_heads * config.head_dim_k, config.num_heads * config.head_dim_v
    source, target = batch * source_length, batch * target_length  # tokens per side
    attention_projections = 2 * d * qk + 2 * d * v  # W^Q, W^K, W^V, W^O per token
    feed_forward = 2 * d * config.d_ff
    encoder = config.num_encoder_layers * (
        source * (attention_projections + feed_forward) + batch * source_length**2 * (qk + v)
    )
    decoder = config.num_decoder_layers * (
        target * (attention_projections + d * qk + d * v + feed_forward)  # self-attention, cross W^Q/W^O, FFN
        + source * (d * qk + d * v)  # cross-attention W^K, W^V on the encoder output
        + batch * (target_length**2 + target_length * source_length) * (qk + v)  # QKᵀ and weights · V
    )
    softmax_layer = target * d * config.vocab_size
    return 3 * 2 * (encoder + decoder + softmax_layer)


def paper_adam(model: torch.nn.Module) -> torch.optim.Optimizer:
    """§5.3 Adam as the job runs it (`optim="adamw_torch_fused"`: fused kernels on a GPU and on a CPU, where the
    unfused one took 12.7 ms of a 185 ms `small` step and the fused 3.9 ms), for both models alike."""
    return torch.optim.AdamW(
        model.parameters(), lr=1e-4, betas=ADAM_BETAS, eps=ADAM_EPSILON, weight_decay=0.0, fused=True
    )


def step_loss(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The §5.4 loss (ε = 0.1) of either model: ours computes it itself, Marian's logits go through PyTorch's."""
    if isinstance(model, VaswaniTransformerForConditionalGeneration):
        return model(**batch).loss
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(batch["labels"])
    logits = model(input_ids=batch["input_ids"], decoder_input_ids=decoder_input_ids).logits
    return torch.nn.functional.cross_entropy(
        logits.float().flatten(0, 1), batch["labels"].flatten(), label_smoothing=0.1
    )


def train_step(
    model: PreTrainedModel,
    batch: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    dtype: torch.dtype,
) -> None:
    """One forward, backward and Adam update, in autocast when `dtype` is not float32."""
    with torch.autocast(batch["input_ids"].device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss = step_loss(model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def consecutive(step: Callable[[], None], count: int) -> None:
    """`count` steps in a row, one turn of (a)."""
    for _ in range(count):
        step()


def step_runs(args: argparse.Namespace, dtype: torch.dtype) -> dict[str, tuple[torch.nn.Module, torch.dtype]]:
    """The models of (a) and the precision each steps in: ours in `dtype` (the package's default with --dtype
    auto) and in float32, MarianMTModel in float32 (what its users get by default) and in `dtype` (like for like)."""
    torch.manual_seed(0)
    config = VaswaniTransformerConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    ours = VaswaniTransformerForConditionalGeneration(config)
    use_fused_loss(ours)  # as the package's training does
    runs = {
        f"ours {dtype_name(dtype)}": (ours, dtype),
        "Marian float32": (marian_twin(config), torch.float32),
    }
    if dtype != torch.float32:
        runs["ours float32"] = (copy.deepcopy(ours), torch.float32)
        runs[f"Marian {dtype_name(dtype)}"] = (copy.deepcopy(runs["Marian float32"][0]), dtype)
    return runs


def model_steps(args: argparse.Namespace, dtype: torch.dtype, peaks: dict[torch.dtype, float]) -> None:
    """(a): our step against Marian's on identical random batches, each as a share of the machine's peak."""
    models = step_runs(args, dtype)
    config = next(iter(models.values()))[0].config
    source = torch.randint(4, args.vocab_size, (args.batch, args.length), device=args.device)
    batch = {
        "input_ids": source,
        "labels": torch.randint(4, args.vocab_size, source.shape, device=args.device),
    }
    runs = {}
    for name, (model, precision) in models.items():
        model.to(args.device).train()
        step_model = torch.compile(model) if args.torch_compile and name.startswith("ours") else model
        step = partial(train_step, step_model, batch, paper_adam(model), precision)
        runs[name] = partial(consecutive, step, args.steps_per_turn)
        for _ in range(args.warmup):
            step()
    peak_runs = {
        precision: matmul_products(args.device, precision, PEAK_PRODUCTS_PER_TURN, peak_size(args))
        for precision in sorted({precision for _, precision in models.values()}, key=str)
    }
    for precision, (products, _) in peak_runs.items():
        runs[f"peak {dtype_name(precision)}"] = products
    turns = alternating_medians(runs, args.repeats, args.device)
    turn_peaks = {  # TFLOP/s of each precision's products, timed in the same turns as the steps
        precision: product_flops / turns[f"peak {dtype_name(precision)}"] / 1e12
        for precision, (_, product_flops) in peak_runs.items()
    }
    seconds = {name: turns[name] / args.steps_per_turn for name in models}
    memory = {name: peak_memory_mb(runs[name], args.device) for name in models}
    flops = training_flops(config, args.batch, args.length, args.length)
    tokens = args.batch * args.length
    print(
        f"(a) model step, preset {args.preset}, vocabulary {args.vocab_size}, {args.batch} × {args.length} + "
        f"{args.length} tokens on {args.device}{', ours compiled' if args.torch_compile else ''}; "
        f"{flops / 1e12:.3f} TFLOP per step; MFU = share of the peak in the step's precision, measured in the "
        "same turns"
    )
    for name, (model, precision) in models.items():
        achieved = flops / seconds[name] / 1e12
        mfu = f"MFU {achieved / turn_peaks[precision]:6.1%}"
        if args.peak_tflops:
            mfu += f" ({achieved / args.peak_tflops:6.1%} of {args.peak_tflops:g} TFLOP/s)"
        peak = f"peak {memory[name]:8.0f} MB" if memory[name] is not None else "peak n/a"
        print(
            f"    {name:16s} {sum(p.numel() for p in model.parameters()) / 1e6:7.2f}M params  "
            f"step {seconds[name] * 1e3:8.1f} ms  {tokens / seconds[name]:9.0f} target tokens/s  "
            f"{achieved:7.3f} TFLOP/s  {mfu}  {peak}"
        )
    ours_name = f"ours {dtype_name(dtype)}"
    ours_achieved = flops / seconds[ours_name] / 1e12
    print(
        "    peak in the same turns (median): "
        + ", ".join(f"{dtype_name(p)} {tflops:.3f} TFLOP/s" for p, tflops in turn_peaks.items())
        + f"; {ours_name} against the roofline measured first: MFU {ours_achieved / peaks[dtype]:.1%}"
    )
    ours = seconds[ours_name]
    ratios = [f"{seconds[name] / ours:.2f}× {name}" for name in seconds if not name.startswith("ours")]
    print(f"    ours ({dtype_name(dtype)}) target tokens/s: " + ", ".join(ratios))


def sdpa_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()


def eager_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    # the model's attention reads its config's fast_path (its dropout function); the default config's
    module = SimpleNamespace(is_causal=True, training=True, config=VaswaniTransformerConfig())
    eager_attention_forward(module, q, k, v, None, scaling=q.shape[-1] ** -0.5)[0].sum().backward()


def attention_kernels(args: argparse.Namespace) -> None:
    """(c): one attention call, forward and backward, at the step's shapes (causal, one row per sentence): torch's
    sdpa kernel against the eager path's two matrix products, in float32 and bfloat16. The model attends with the
    eager kernels in bfloat16 on a CPU (`VaswaniTransformerAttention._attention_function`) because of this."""
    config = VaswaniTransformerConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    shape = (args.batch, config.num_heads, args.length, config.head_dim_k)
    print(
        f"(c) attention kernels, {shape} (batch, heads, length, d_k), causal, forward + backward on {args.device}"
    )
    for dtype in (torch.float32, torch.bfloat16):
        qkv = [torch.randn(shape, device=args.device, dtype=dtype, requires_grad=True) for _ in range(3)]
        runs = {"sdpa": partial(sdpa_step, *qkv), "eager": partial(eager_step, *qkv)}
        seconds = alternating_medians(runs, args.repeats * 4, args.device)
        print(
            f"    {dtype_name(dtype):8s} sdpa {seconds['sdpa'] * 1e3:7.2f} ms  eager {seconds['eager'] * 1e3:7.2f} ms  "
            f"eager / sdpa speed {seconds['sdpa'] / seconds['eager']:.2f}×"
        )


def multi30k_training_set(args: argparse.Namespace):
    """Multi30k's training pairs with a joint BPE of --vocab_size, tokenised as the job does."""
    pairs, _ = load_text_pair(args.data / "train.en", args.data / "train.de")
    tokenizer = train_bpe(
        (text for column in ("source", "target") for text in pairs[column]), args.vocab_size
    )
    return tokenizer, tokenize_parallel(pairs, tokenizer)[0]


def job_against_model_step(args: argparse.Namespace, dtype: torch.dtype) -> None:
    """(b): the job's training loop against the model's step alone on the loop's own batches."""
    tokenizer, tokenized = multi30k_training_set(args)
    torch.manual_seed(0)
    config = VaswaniTransformerConfig.from_preset(args.preset, vocab_size=len(tokenizer))
    model = VaswaniTransformerForConditionalGeneration(config)
    log_every = max(1, args.steps // 3)
    with tempfile.TemporaryDirectory() as output_dir:
        recipe = {name: DEFAULTS[name] for name in ("warmup_steps", "lr_scale", "save_steps", "average_last")}
        training_args = paper_training_arguments(
            output_dir,
            config.d_model,
            max_steps=args.steps,
            **recipe,
            eval_steps=0,
            logging_steps=log_every,
            seed=0,
            save_strategy="no",
            torch_compile=args.torch_compile,
            use_cpu=args.device == "cpu",
        )
        training_args = decide_precision("bf16" if dtype == torch.bfloat16 else "no").applied_to(
            training_args
        )
        trainer = build_trainer(
            model, tokenizer, tokenized, training_args, args.max_tokens, callbacks=[TrainingProgress()]
        )
        started = time.perf_counter()
        trainer.train()
        job_seconds = time.perf_counter() - started
        windows = [log["target_tokens_per_second"] for log in trainer.state.log_history if "loss" in log]
        job_speed = sum(windows[1:]) / len(windows[1:])  # the first window holds start-up
        batches = list(itertools.islice(trainer.get_train_dataloader(), args.steps))
    tokens = sum(int((batch["labels"] != -100).sum()) for batch in batches)
    optimizer = paper_adam(model)
    for batch in batches[: args.warmup]:
        train_step(model, batch, optimizer, dtype)
    synchronize(args.device)
    started = time.perf_counter()
    for batch in batches:
        train_step(model, batch, optimizer, dtype)
    synchronize(args.device)
    model_speed = tokens / (time.perf_counter() - started)
    print(
        f"(b) job on Multi30k, preset {args.preset}, BPE {len(tokenizer)}, {args.max_tokens} tokens per batch, "
        f"{args.steps} steps in {job_seconds:.1f} s (start-up included)\n"
        f"    job loop {job_speed:9.0f} target tokens/s (log windows after the first)\n"
        f"    model step alone on the same loader's batches {model_speed:9.0f} target tokens/s\n"
        f"    job / model step: {job_speed / model_speed:.0%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab_size", type=int, default=8000, help="shared vocabulary; (b): of the BPE")
    parser.add_argument("--batch", type=int, default=64, help="(a): sentences per batch")
    parser.add_argument("--length", type=int, default=24, help="(a): source and target length in tokens")
    add_device_arguments(parser)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--steps_per_turn", type=int, default=5, help="(a): consecutive steps a turn, timed together (1: one)"
    )
    parser.add_argument(
        "--peak_tflops", type=float, default=0.0, help="a datasheet dense peak, for a second MFU figure"
    )
    parser.add_argument(
        "--data", type=Path, default=MULTI30K, help="(b): folder with Multi30k train.en/train.de"
    )
    parser.add_argument("--max_tokens", type=int, default=1536, help="(b): tokens per batch and side")
    parser.add_argument("--steps", type=int, default=24, help="(b): training steps of the job")
    parser.add_argument("--torch_compile", action="store_true", help="compile our model (Marian stays eager)")
    parser.add_argument("--skip_job", action="store_true", help="run (a) only")
    args = parser.parse_args()
    if args.steps_per_turn < 1 or args.repeats < 1:
        parser.error("--steps_per_turn and --repeats must be at least 1")
    if not args.skip_job and not (args.data / "train.en").is_file():
        parser.error(f"{args.data}/train.en not found: pass --data (Multi30k's folder) or --skip_job")
    dtype = resolve_dtype(args.dtype, args.device)
    peaks = print_peaks(args.device, peak_size(args))
    model_steps(args, dtype, peaks)
    attention_kernels(args)
    if not args.skip_job:
        job_against_model_step(args, dtype)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")


if __name__ == "__main__":
    main()
