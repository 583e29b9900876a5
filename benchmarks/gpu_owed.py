r"""The figures still owed from a GPU, in one command: runs the items below on a CUDA machine within a time budget
and prints one table (item, command, status, wall seconds, the figures read from its output, target, met?).

    python benchmarks/gpu_owed.py                          # CUDA: the decision run, 9 minutes (below)
    python benchmarks/gpu_owed.py --items main-job         # these items (still within --budget_minutes)
    python benchmarks/gpu_owed.py --dry_run                # anywhere: the plan, and what is still owed

The list is ITEMS in this file. What is owed lives here, not in benchmarks/RESULTS.md (which holds current figures
only): MEASURED names the RESULTS rows that hold each measured item's figures, and --dry_run ends with what is
still owed, the items RESULTS holds no figures of (with why), the commands that run them, and what is owed on
other machines (OWED_ELSEWHERE).
Every item has a budget, the most seconds it may run (stopped then, it counts as failed), and its place in the
list is its priority: a run takes the items, in order, whose budgets still fit in --budget_minutes, and prints for
each one left out its exact command and why. Items run one at a time, alone on the GPU, so that their timings do
not disturb each other. Without CUDA, or with --dry_run, nothing runs: the plan is printed (each item's command,
budget and whether the run takes it) with a few commands of at most --budget_minutes that cover the whole list.
Items needing more GPUs than the machine has, or a module it lacks (ctranslate2), are skipped with the reason.

The default run decides the CUDA defaults (docs/decisions/compiled-decoding.md): its items, first in the list, measure side by side with
MarianMTModel the `base` training step and a short job, eager and compiled, and decoding with plain generate(),
CUDA graphs and CTranslate2, beam 4 and greedy, at batch 64 and for one sentence; after the item table it prints
one side-by-side table and the defaults it recommends (gpu_decision.py), also written to decision.md.

Each item's output goes to ITEM.log in --log_dir (with the GPU utilisation samples of the main job), and the table
to table.md and results.json there; a figure not found in a log shows "see log". Multi30k is read from --data_dir
(default ../shared/data, the recipes' default); it is passed to the items that read it only when given.
Exit status: 0 when every item run succeeded (and for the plan), 1 when one failed or ran out of its budget, 2 for
bad options (unknown items, a --log_dir holding files, Multi30k missing), found before anything runs.
"""

import argparse
import importlib.util
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from gpu_decision import DECIDING, decision
from output_figures import (
    Figure,
    Target,
    busy_figures,
    decoding_figures,
    failure_reason,
    init_study_figures,
    pytest_figures,
    train_figures,
    training_speed_figures,
    verdict,
)

REPO = Path(__file__).resolve().parents[1]
# The recipes' default Multi30k folder, relative to the repository root, where the items run.
DEFAULT_DATA_DIR = "../shared/data"
RUNS = "runs/gpu-owed"
BUDGET_MINUTES = 9.0  # the default: one command on the lent GPU machine (10 minutes at most) and its start-up
TRAINING_PROGRESS = r"step \d+/\d+ "  # scripts/train.py's progress lines, printed during its training loop


@dataclass(frozen=True)
class Item:
    """One owed measurement: its command (run from the repository root), what it yields, its target and budget."""

    name: str
    command: str
    yields: str
    target: str
    budget_s: int
    read: Callable[[str], list[Figure]]
    targets: tuple[Target, ...] = ()
    data_flag: str | None = None  # how the command takes --data_dir ("{}": the folder) when it reads Multi30k
    modules: tuple[str, ...] = ()
    gpus: int = 1
    check: Callable[[], str | None] | None = None  # why this machine cannot run it (beyond modules), or None
    after: str | None = None  # an item that must succeed first, in the same run
    sample_gpu_busy: bool = False

    def command_line(self, data_dir: str) -> str:
        """The command as run: with the data folder added when it is not the default one."""
        if self.data_flag is None or data_dir == DEFAULT_DATA_DIR:
            return self.command
        return f"{self.command} {self.data_flag.format(shlex.quote(data_dir))}"


def speed_targets(mfu: float, job: bool) -> tuple[Target, ...]:
    """The training-speed targets on a GPU (ours against MarianMTModel in the same precision)."""
    targets = (
        Target("ours/Marian", at_least=3.0),
        Target("MFU (datasheet peak)", at_least=mfu),
        Target("peak memory ours/Marian", at_most=1.0),
    )
    return (*targets, Target("job/model step", at_least=85.0)) if job else targets


def bench_training(name: str, flags: str, budget_s: int, mfu_target: float | None) -> Item:
    """An item of benchmarks/bench_training.py on the GPU; `mfu_target` None: no target (a comparison run)."""
    job = "--skip_job" not in flags
    target = "–"
    if mfu_target is not None:
        target = f"≥ 3× Marian (same precision), MFU ≥ {mfu_target:.0f}% of 989 TFLOP/s, memory ≤ Marian's"
        target += ", job ≥ 85% of the step" if job else ""
    return Item(
        name,
        f"python benchmarks/bench_training.py --device cuda {flags}",
        "step: ours/Marian, MFU, peak memory" + ("; job/model step" if job else ""),
        target,
        budget_s,
        training_speed_figures,
        speed_targets(mfu_target, job) if mfu_target is not None else (),
        data_flag="--data {}/multi30k" if job else None,
    )


def ctranslate2_cuda_problem() -> str | None:
    """Why CTranslate2 cannot decode on this machine's GPU (no cuBLAS 12: docs/engines.md), or None; the plan
    without CUDA is for the lent machine, so nothing is checked there."""
    if not torch.cuda.is_available() or importlib.util.find_spec("ctranslate2") is None:
        return None
    from vaswani_transformer.engines.ctranslate2_cuda import cublas_12_problem

    return cublas_12_problem("cuda")


def bench_decoding(name: str, flags: str, budget_s: int, targets: bool) -> Item:
    """An item of benchmarks/bench_decoding.py on the GPU, with the GPU decoding targets or none."""
    return Item(
        name,
        f"python benchmarks/bench_decoding.py --device cuda {flags}",
        "beam 4 and greedy: ours/Marian sentences/s and latency"
        + (", CTranslate2" if "--ctranslate2" in flags else ""),
        "≥ 5× Marian's sentences/s and ≥ 3× lower latency, beam 4 and greedy" if targets else "–",
        budget_s,
        decoding_figures,
        tuple(
            Target(f"beam {beams}: {what}ours/Marian", at_least=bound)
            for beams in (4, 1)
            for what, bound in (("", 5.0), ("latency ", 3.0))
        )
        if targets
        else (),
        modules=("ctranslate2",) if "--ctranslate2" in flags else (),
        check=ctranslate2_cuda_problem if "--ctranslate2" in flags else None,
    )


def cuda_graph_decoding(name: str, flags: str, budget_s: int) -> Item:
    """benchmarks/bench_cuda_graphs.py: the `cuda_graphs` option (`translate(..., cuda_graphs=True)`, its kept
    static cache per bucket and compiled step) against plain generate() and MarianMTModel, with the
    targets for the CUDA decoding default (docs/decisions/compiled-decoding.md)."""
    return Item(
        name,
        f"python benchmarks/bench_cuda_graphs.py --device cuda {flags}",
        "beam 4 and greedy through CUDA graphs: ours/Marian sentences/s and latency, the plain path's tokens",
        "≥ 3× Marian's sentences/s at batch 64 beam 4 and ≥ 3× lower latency for one sentence",
        budget_s,
        decoding_figures,
        (Target("beam 4: ours/Marian", at_least=3.0), Target("beam 4: latency ours/Marian", at_least=3.0)),
    )


def training_run(
    name: str, command: str, yields: str, target: str, budget_s: int, targets: tuple[Target, ...], **extra
) -> Item:
    """An item of scripts/train.py (under Accelerate's launcher when the command starts with `accelerate`)."""
    reads_multi30k = "--recipe multi30k" in command
    return Item(
        name,
        command,
        yields,
        target,
        budget_s,
        train_figures,
        targets,
        data_flag="--data_dir {}" if reads_multi30k else None,
        **extra,
    )


def init_study(preset: str, init: str, peak_lr: str) -> Item:
    """One run of the initialisation study's GPU grid; the runs append to one JSON file and redraw one figure."""
    steps = {"base": 3000, "big": 2000}[preset]  # big: 2,000 steps fit one 10-minute command, by estimate
    learns = init.startswith("normal")
    return Item(
        f"init-{preset}-{init.replace(':', '')}-{peak_lr}",
        f"python benchmarks/init_study.py --device cuda --presets {preset} --inits {init} --peak-lrs {peak_lr} "
        f"--steps {steps} --warmup 1000 --max-tokens 8192 --output {RUNS}/init_study.json "
        f"--figure {RUNS}/init_study.png",
        f"{preset} {init} at peak {peak_lr}, {steps} steps: loss, source gain, cross-attention entropy",
        "learns to read the source: source gain ≥ 0.5 nats/token (CPU runs: healthy 0.9–2.4, collapsed ≤ 0.06)"
        if learns
        else "– (the old initialisation, for contrast)",
        {"base": 360, "big": 540}[preset],
        init_study_figures,
        (Target("source gain", at_least=0.5),) if learns else (),
        data_flag="--data-dir {}",
    )


MULTI30K_BLEU = (Target("test tokenised BLEU", at_least=41.0), Target("trained", at_most=10.0))
FSDP = "accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 1 scripts/train.py"
# The GPU shapes of the training-speed targets.
BASE_STEP = "--dtype bfloat16 --preset base --vocab_size 37000 --batch 384 --length 64"
BIG_STEP = "--dtype bfloat16 --preset big --vocab_size 37000 --batch 384 --length 64"
DECIDE_STEPS = "--max_tokens 8192 --steps 100 --peak_tflops 989"  # a short job: the decision run's 9 minutes
ITEMS: tuple[Item, ...] = (
    # The decision run (gpu_decision.py), 540 s of budgets: what fits 9 minutes, compiling included.
    bench_training("decide-training-eager", f"{BASE_STEP} {DECIDE_STEPS}", 90, mfu_target=None),
    bench_training(
        "decide-training-compiled", f"{BASE_STEP} {DECIDE_STEPS} --torch_compile", 165, mfu_target=None
    ),
    bench_decoding("decoding-base-bf16", "--dtype bfloat16 --vocab_size 37000 --batch 64", 75, targets=True),
    cuda_graph_decoding(  # 2 searches × 2 batch sizes, each compiled and recorded in its untimed first call
        "decoding-base-compiled-bf16", "--dtype bfloat16 --vocab_size 37000 --batch 64", 135
    ),
    # Its own item, so that the others run without ctranslate2 or cuBLAS 12 (docs/engines.md, "On a GPU").
    bench_decoding(
        "decoding-base-ctranslate2",
        "--dtype bfloat16 --vocab_size 37000 --batch 64 --ctranslate2",
        75,
        targets=True,
    ),
    Item(
        "gpu-tests",
        "python -m pytest -m gpu",
        "the CUDA-graph decoding recipe gives plain generate()'s tokens",
        "every gpu test passes",
        120,
        pytest_figures,
        (
            Target("passed", at_least=1),
            Target("failed", at_most=0),
            Target("skipped", at_most=0),
            Target("errors", at_most=0),
        ),
    ),
    bench_training(
        "training-base-bf16",
        f"{BASE_STEP} --max_tokens 8192 --steps 300 --peak_tflops 989",
        150,  # 101 s on an H200 (2026-11-26)
        mfu_target=40,
    ),
    bench_training("training-cpu-shapes-bf16", "--dtype bfloat16", 60, mfu_target=None),  # 35 s on an H200
    bench_decoding("decoding-cpu-shapes-bf16", "--dtype bfloat16 --repeats 5", 90, targets=False),
    bench_training("training-cpu-shapes-fp32", "--dtype float32", 60, mfu_target=None),
    bench_decoding("decoding-cpu-shapes-fp32", "--dtype float32 --repeats 5", 90, targets=False),
    training_run(
        "main-job",
        f"python scripts/train.py --output_dir {RUNS}/main-job",
        "test sacreBLEU (Tatoeba), training minutes, GPU busy share",
        "≥ 38 sacreBLEU, trained ≤ 10 min",
        540,  # 417 s on an H200 sharing it with the multi30k item (2026-11-27)
        (Target("test sacreBLEU", at_least=38.0), Target("trained", at_most=10.0)),
        sample_gpu_busy=True,
    ),
    training_run(
        "multi30k",
        f"python scripts/train.py --recipe multi30k --output_dir {RUNS}/multi30k",
        "tokenised BLEU on test_2016_flickr, training minutes",
        "≥ 41 tokenised BLEU, trained ≤ 10 min",
        540,  # 451 s on an H200 sharing it with the main-job item (2026-11-27)
        MULTI30K_BLEU,
    ),
    bench_training(
        "training-base-compiled-bf16",
        f"{BASE_STEP} --max_tokens 8192 --steps 300 --peak_tflops 989 --torch_compile",
        540,  # 300 s ran out on an H200 (2026-11-27): the compiled job printed nothing for 4 min after tokenising
        mfu_target=40,
    ),
    # 89 s on an H200 (2026-11-27)
    bench_training("training-big-bf16", f"{BIG_STEP} --peak_tflops 989 --skip_job", 150, mfu_target=45),
    bench_training(
        "training-big-compiled-bf16", f"{BIG_STEP} --peak_tflops 989 --skip_job --torch_compile", 300, 45
    ),
    training_run(
        "multi30k-base-peak-1e-3",
        "python scripts/train.py --recipe multi30k --preset base --lr_scale 0.72 --max_tokens 8192 "
        f"--max_steps 2000 --output_dir {RUNS}/multi30k-base",
        "base at peak 1.0e-3, warm-up 1,000 (the issue's H100 pair: 8,192 tokens, 2,000 steps, 38.1 BLEU)",
        "trains without collapse: finishes and is scored (the health checks stop a collapsed run, exit 3)",
        480,
        (Target("test tokenised BLEU", at_least=0.0),),
    ),
    training_run(
        "fsdp-multi30k",
        f"{FSDP} --recipe multi30k --max_steps 1000 --output_dir {RUNS}/fsdp",
        "FSDP (1 process): FULL_STATE_DICT checkpoints average into the final model",
        "2 checkpoints averaged",
        300,
        (Target("checkpoints averaged", at_least=2),),
    ),
    training_run(
        "fsdp-multi30k-resume",
        f"{FSDP} --recipe multi30k --max_steps 1000 --output_dir {RUNS}/fsdp --resume",
        "FSDP: the finished run resumes from its last checkpoint",
        "exit 0, scored again",
        180,
        (Target("test tokenised BLEU", at_least=0.0),),
        after="fsdp-multi30k",
    ),
    training_run(
        "launcher-fp16",
        "accelerate launch --config_file configs/accelerate/single_gpu.yaml --mixed_precision fp16 "
        f"scripts/train.py --recipe multi30k --max_steps 500 --output_dir {RUNS}/launcher-fp16",
        "the launcher's --mixed_precision sets the training precision",
        "trains in fp16 autocast",
        240,  # 175 s on an H200 (2026-11-27)
        (Target("precision", equals="fp16 autocast"),),
    ),
    training_run(
        "ddp-2-gpus",
        "accelerate launch --config_file configs/accelerate/multi_gpu.yaml --num_processes 2 scripts/train.py "
        f"--recipe multi30k --output_dir {RUNS}/ddp",
        "DDP on 2 GPUs trains the Multi30k recipe",
        "≥ 41 tokenised BLEU, trained ≤ 10 min",
        540,
        MULTI30K_BLEU,
        gpus=2,
    ),
    init_study("base", "normal", "1e-3"),
    init_study("base", "xavier", "1e-3"),
    init_study("base", "normal", "1.4e-3"),
    init_study("base", "normal", "7e-4"),
    init_study("big", "normal", "1e-3"),
    init_study("big", "normal:0.0141", "1e-3"),
    init_study("big", "xavier", "1e-3"),
    init_study("base", "xavier", "1.4e-3"),
    init_study("base", "xavier", "7e-4"),
    init_study("big", "normal", "1.4e-3"),
    init_study("big", "normal", "7e-4"),
    init_study("big", "xavier", "1.4e-3"),
    init_study("big", "xavier", "7e-4"),
)


# Where benchmarks/RESULTS.md holds each measured item's current figures (its rows); an item not named here is owed.
MEASURED: dict[str, str] = {
    "decide-training-eager": "G9",
    "decide-training-compiled": "G9",
    "decoding-base-bf16": "G7, G10",
    "decoding-base-compiled-bf16": "G10",
    "gpu-tests": "GPU, after G10",
    "training-base-bf16": "G1",
    "training-cpu-shapes-bf16": "G4",
    "decoding-cpu-shapes-bf16": "G8",
    "main-job": "Q3",
    "multi30k": "Q6",
    "training-base-compiled-bf16": "G2 (part a)",
    "training-big-bf16": "G3",
    "launcher-fp16": "GPU, after G8",
}
# What is still owed of a measured item, and why.
STILL_OWED: dict[str, str] = {
    "training-base-compiled-bf16": "its job figure: part b logged nothing for 4 minutes and was stopped at its "
    "budget on an H200 (2026-11-27)",
    "launcher-fp16": 'a rerun: its runner marked it "no" before the log\'s precision names were made alike '
    "(checked on the CPU only)",
}
WHY_OWED: dict[str, str] = {
    "decoding-base-ctranslate2": "CTranslate2's CUDA 12 wheels need cuBLAS 12 (`pip install nvidia-cublas-cu12`), "
    "which the lent GPU's image (CUDA 13) lacks",
    "training-cpu-shapes-fp32": "G4 printed its float32 rows, not run as an item",
    "multi30k-base-peak-1e-3": "`base` at peak 1e-3 without collapse: only issue 7's h100 pair shows it",
}
# Owed on other machines, mostly the CPU kinds of RESULTS.md's "Machines" that no session has had since the code
# changed: (machine, what, its commands as Markdown). A model trained there by the first command stands in for runs/tatoeba-en-de/final.
OWED_ELSEWHERE: tuple[tuple[str, str, str], ...] = (
    (
        "cpu-2x",
        "the main job, three seeds: ≥ 35 sacreBLEU within 10 minutes (34.19 on the code of 2026-11-27)",
        "`python scripts/train.py --seed 1 --output_dir runs/main-seed1` (and seeds 0, 2)",
    ),
    (
        "cpu-2x",
        "decoding after the two-at-once fix, the compiled path and CTranslate2 in the same run (D4 is older)",
        "`python benchmarks/bench_decoding.py --model runs/tatoeba-en-de/final --ctranslate2 --compile --profile 12`",
    ),
    (
        "cpu-2x",
        "the `small` and `tiny` training steps like for like in float32, eager and compiled (T2 and T3 rate the "
        "bf16 default)",
        "`python benchmarks/bench_training.py --skip_job --dtype float32`, `python benchmarks/bench_training.py "
        "--skip_job --dtype float32 --preset tiny --length 12 --batch 128 --torch_compile`",
    ),
    (
        "cpu-2",
        "nothing slower than Q1 and D3",
        "`python scripts/train.py`, `python benchmarks/bench_decoding.py --model runs/tatoeba-en-de/final "
        "--ctranslate2 --compile`",
    ),
    ("cpu-2i", "every figure on current code", "the commands above"),
    (
        "a GPU",
        "not an item: tuning Q6's `cuda:` section on val (its dev NLL is lowest at step 5,000 of 8,000)",
        "–",
    ),
)


def owed(item: Item) -> str | None:
    """What is owed of the item (all of it when RESULTS.md holds none of its figures), or None."""
    if item.name not in MEASURED:
        return WHY_OWED.get(item.name, "not measured yet")
    return STILL_OWED.get(item.name)


@dataclass
class Outcome:
    """What became of an item: its status, wall seconds and figures (none unless it ran)."""

    status: str
    seconds: float | None = None
    figures: list[Figure] = field(default_factory=list)
    log: Path | None = None


def units(items: Sequence[Item]) -> list[list[Item]]:
    """The items in order, each with the items that must run right after it in the same command (`after`)."""
    groups: list[list[Item]] = []
    for item in items:
        owner = next((group for group in groups if item.after in {member.name for member in group}), None)
        if owner is not None:
            owner.append(item)
        else:
            groups.append([item])
    return groups


def unrunnable(item: Item, gpus: int) -> str | None:
    """Why the item cannot run on this machine at all (GPUs, modules), or None."""
    if item.gpus > gpus:
        return f"skipped: needs {item.gpus} GPUs ({gpus} here)"
    missing = [module for module in item.modules if importlib.util.find_spec(module) is None]
    if missing:
        return f"skipped: needs {', '.join(missing)} (pip install {' '.join(missing)})"
    problem = item.check() if item.check is not None else None
    return f"skipped: {problem}" if problem else None


def plan(items: Sequence[Item], budget_s: float, gpus: int) -> dict[str, str | None]:
    """Each item's fate before anything runs: None to run it, else why not. In order, an item (with the items
    that must follow it) is taken when its budget still fits in what is left; later, smaller ones may still fit."""
    fates: dict[str, str | None] = {}
    left = budget_s
    names = {item.name for item in items}
    for unit in units(items):
        reasons = [unrunnable(item, gpus) for item in unit]
        if unit[0].after is not None and unit[0].after not in names:
            reasons[0] = f"skipped: needs {unit[0].after} in the same run"
        if reasons[0] is not None:
            fates |= {item.name: reasons[0] for item in unit}
            continue
        cost = sum(item.budget_s for item in unit)
        if cost <= left:
            left -= cost
            fates |= {item.name: reason for item, reason in zip(unit, reasons, strict=True)}
        else:
            fates |= {item.name: "skipped: budget" for item in unit}
    return fates


def covering_commands(
    items: Sequence[Item], budget_s: float, gpus: int, plain: Sequence[Item] | None = None
) -> list[tuple[list[Item], str]]:
    """Commands of this script that together run every item that can run here, each within the budget: the items,
    in order, go into the first command with room (a unit larger than the budget gets a command of its own).
    `plain`: the items a command without --items plans from (default `items`)."""
    bins: list[list[Item]] = []
    for unit in units(items):
        if unrunnable(unit[0], gpus) is not None:
            continue
        cost = sum(item.budget_s for item in unit)
        room = next((b for b in bins if sum(item.budget_s for item in b) + cost <= budget_s), None)
        if room is None:
            bins.append(list(unit))
        else:
            room.extend(unit)
    whole = items if plain is None else plain
    default = [item.name for item in whole if plan(whole, budget_s, gpus)[item.name] is None]
    commands = []
    for members in bins:
        command = "python benchmarks/gpu_owed.py"
        if [item.name for item in members] != default:
            command += f" --items {','.join(item.name for item in members)}"
        total = sum(item.budget_s for item in members)
        minutes = math.ceil(total / 60) if total > budget_s else budget_s / 60
        if minutes != BUDGET_MINUTES:
            command += f" --budget_minutes {minutes:g}"
        commands.append((members, command))
    return commands


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options, with the chosen items as `selected`; bad ones end the program with exit 2 and the reason."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--items", help=f"comma-separated items to run, of: {', '.join(item.name for item in ITEMS)}"
    )
    parser.add_argument(
        "--budget_minutes", type=float, default=BUDGET_MINUTES, help="the items' budgets must fit in this"
    )
    parser.add_argument("--log_dir", type=Path, help=f"where logs go (default: a new folder under {RUNS}/)")
    parser.add_argument(
        "--data_dir", default=DEFAULT_DATA_DIR, help="the folder holding multi30k/, multi30k-tok/"
    )
    parser.add_argument(
        "--dry_run", action="store_true", help="print the plan and run nothing (also without CUDA)"
    )
    args = parser.parse_args(argv)
    if args.budget_minutes <= 0:
        parser.error(f"--budget_minutes must be positive, not {args.budget_minutes:g}")
    known = [item.name for item in ITEMS]
    if args.items is not None:
        wanted = [name.strip() for name in args.items.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in known]
        if unknown or not wanted:
            parser.error(
                f"unknown item(s) {', '.join(unknown) or repr(args.items)}: choose from {', '.join(known)}"
            )
        args.selected = [item for item in ITEMS if item.name in wanted]
    else:
        args.selected = list(ITEMS)
    args.dry_run = args.dry_run or not torch.cuda.is_available()
    if not args.dry_run:
        problem = input_problem(args)
        if problem:
            parser.error(problem)
    return args


def input_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with a real run's log folder or data, before anything runs; None when all is well."""
    if args.log_dir is not None and args.log_dir.is_dir() and any(args.log_dir.iterdir()):
        return f"--log_dir {args.log_dir} already holds files: give a new or empty folder (nothing is overwritten)"
    readers = [item.name for item in args.selected if item.data_flag is not None]
    data = REPO / args.data_dir / "multi30k" / "train.en"
    if readers and not data.is_file():
        return (
            f"{data} not found, which {', '.join(readers)} read: pass --data_dir (the folder holding multi30k/) "
            "or leave those items out with --items"
        )
    return None


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (RESULTS.md's format)."""
    cells = [[str(cell).replace("|", "\\|") for cell in row] for row in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def plan_table(items: Sequence[Item], fates: dict[str, str | None], data_dir: str) -> str:
    """The plan: each item's command, what it yields, its target and budget, and whether this run takes it."""
    rows = [
        [
            item.name,
            f"`{item.command_line(data_dir)}`",
            item.yields,
            item.target,
            f"{item.budget_s / 60:g} min",
            "yes" if fates[item.name] is None else fates[item.name].removeprefix("skipped: "),
        ]
        for item in items
    ]
    return markdown_table(["item", "command", "yields", "target", "budget", "this run"], rows)


def met(item: Item, outcome: Outcome) -> str:
    """The table's "met?": "–" for an item not run or without targets; a failed run with a target's figure
    missing has not met it."""
    if outcome.log is None:
        return "–"
    answer = verdict(item.targets, outcome.figures)
    return "no" if answer == "?" and outcome.status.startswith("failed") else answer


def results_table(items: Sequence[Item], outcomes: dict[str, Outcome], data_dir: str) -> str:
    """One row per item: command, status, wall seconds, figures read from its log, target, met?."""
    rows = []
    for item in items:
        outcome = outcomes[item.name]
        figures = "; ".join(str(figure) for figure in outcome.figures)
        unread = not outcome.figures or verdict(item.targets, outcome.figures) == "?"
        if outcome.log is not None and unread:
            figures = f"{figures}; see log {outcome.log}" if figures else f"see log {outcome.log}"
        rows.append(
            [
                item.name,
                f"`{item.command_line(data_dir)}`",
                outcome.status,
                f"{outcome.seconds:.0f}" if outcome.seconds is not None else "–",
                figures or "–",
                item.target,
                met(item, outcome),
            ]
        )
    return markdown_table(["item", "command", "status", "wall s", "figures", "target", "met?"], rows)


def item_argv(command: str) -> list[str]:
    """The command's argv with this interpreter for `python` (and for Accelerate's launcher)."""
    argv = shlex.split(command)
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    if argv[0] == "accelerate":
        return [sys.executable, "-m", "accelerate.commands.accelerate_cli", *argv[1:]]
    return argv


def item_environment() -> dict[str, str]:
    """The items import the package from this checkout (installed or not) and print their lines as they go."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def stop(process: subprocess.Popen) -> None:
    """End the item's process group (it started its own session): politely, then for good."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_command(
    argv: list[str], log: Path, timeout_s: float, env: dict[str, str]
) -> tuple[int | None, list[tuple[float, str]]]:
    """Run argv from the repository root with output (stdout and stderr) to `log`; its exit status (None when it
    ran out of time and was stopped) and its output lines with the time each arrived."""
    lines: list[tuple[float, str]] = []
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )

        def copy() -> None:
            for raw in process.stdout:
                sink.write(raw)
                sink.flush()
                lines.append((time.monotonic(), raw.decode("utf-8", "replace")))

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        try:
            status = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop(process)
            status = None
        reader.join(timeout=30)
    return status, lines


@contextmanager
def gpu_busy_samples(every_ms: int = 500) -> Iterator[list[tuple[float, float]]]:
    """nvidia-smi's GPU utilisation (% of time a kernel ran), sampled while the block runs, with arrival times;
    no samples where nvidia-smi is missing."""
    samples: list[tuple[float, float]] = []
    query = [
        "nvidia-smi",
        "--query-gpu=utilization.gpu",
        "--format=csv,noheader,nounits",
        f"--loop-ms={every_ms}",
    ]
    try:
        sampler = subprocess.Popen(query, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except FileNotFoundError:
        yield samples
        return

    def collect() -> None:
        for line in sampler.stdout:
            if line.strip().isdigit():
                samples.append((time.monotonic(), float(line)))

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    try:
        yield samples
    finally:
        sampler.terminate()
        sampler.wait()
        reader.join(timeout=5)


def nvidia_smi(query: str) -> list[str]:
    """nvidia-smi's answer to a --query-... option, one line per GPU or process; none where it is missing."""
    try:
        answer = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True, timeout=60
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in answer.stdout.splitlines() if line.strip()]


def run_item(item: Item, command: str, log: Path) -> Outcome:
    """Run one item within its budget, its output going to `log`, and read its figures from that output."""
    started = time.monotonic()
    samples: list[tuple[float, float]] = []
    if item.sample_gpu_busy:
        with gpu_busy_samples() as samples:
            status, lines = run_command(item_argv(command), log, item.budget_s, item_environment())
        write_atomically(log.with_suffix(".gpu-busy.csv"), "".join(f"{t:.2f},{v:g}\n" for t, v in samples))
    else:
        status, lines = run_command(item_argv(command), log, item.budget_s, item_environment())
    seconds = time.monotonic() - started
    output = "".join(line for _, line in lines)
    figures = read_figures(item, output) + busy_figures(samples, lines, TRAINING_PROGRESS)
    if status is None:
        state = f"failed: out of its budget, stopped after {item.budget_s} s"
    elif status != 0:
        reason = failure_reason(output)
        state = f"failed: exit {status}" + (f": {reason}" if reason else "")
    else:
        state = "ran"
    return Outcome(state, seconds, figures, log)


def read_figures(item: Item, output: str) -> list[Figure]:
    """The item's figures from its output; none when its reader fails on an unforeseen format (the table then
    points to the log: a run's figures must never be lost to a crash of the table)."""
    try:
        return item.read(output)
    except Exception:  # any error of a reader means "not read", which the table reports
        return []


def write_atomically(path: Path, text: str) -> None:
    """Write under a temporary name, then rename: a reader never sees half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def run_plan(
    items: Sequence[Item], fates: dict[str, str | None], data_dir: str, log_dir: Path
) -> dict[str, Outcome]:
    """Run the planned items one after the other, printing progress; the others keep their reasons."""
    outcomes = {item.name: Outcome(fates[item.name] or "") for item in items}
    chosen = [item for item in items if fates[item.name] is None]
    for index, item in enumerate(chosen, 1):
        if item.after is not None and outcomes[item.after].status != "ran":  # planned together: it ran first
            outcomes[item.name] = Outcome(f"skipped: needs {item.after} to succeed first")
            print(f"[{index}/{len(chosen)}] {item.name}: {outcomes[item.name].status}", flush=True)
            continue
        log = log_dir / f"{item.name}.log"
        print(
            f"[{index}/{len(chosen)}] {item.name}: running, budget {item.budget_s} s, log {log}", flush=True
        )
        outcomes[item.name] = run_item(item, item.command_line(data_dir), log)
        outcome = outcomes[item.name]
        print(f"[{index}/{len(chosen)}] {item.name}: {outcome.status} ({outcome.seconds:.0f} s)", flush=True)
    return outcomes


def print_plan(
    items: Sequence[Item], fates: dict[str, str | None], args: argparse.Namespace, gpus: int
) -> None:
    """The plan table, the commands that cover every item, and the items this machine cannot run."""
    budget_s = args.budget_minutes * 60
    taken = [item for item in items if fates[item.name] is None]
    print(
        f"{len(taken)} of {len(items)} items fit the {args.budget_minutes:g}-minute budget "
        f"({sum(item.budget_s for item in taken)} s of budgets), in order:\n"
    )
    print(plan_table(items, fates, args.data_dir))
    print(
        f"\nEvery item, in commands of at most {args.budget_minutes:g} minutes (on a machine with {gpus} GPU):\n"
    )
    print("```bash")
    for _, command in covering_commands(ITEMS, budget_s, gpus):
        print(command)
    print("```")
    beyond = [item for item in ITEMS if item.gpus > gpus]
    for item in beyond:
        print(f"\nNeeds a machine with {item.gpus} GPUs: `{item.command}` ({item.name})")
    print("\n" + owed_text(args.data_dir, budget_s, gpus))


def owed_text(data_dir: str, budget_s: float, gpus: int) -> str:
    """What is still owed: the items (with what RESULTS.md already holds of them and why the rest is owed), the
    commands of this script that run them, and what is owed on the CPU kinds."""
    items = [item for item in ITEMS if owed(item) is not None]
    rows = [
        [item.name, MEASURED.get(item.name, "–"), owed(item), f"`{item.command_line(data_dir)}`"]
        for item in items
    ]
    commands = "\n".join(command for _, command in covering_commands(items, budget_s, gpus, plain=ITEMS))
    cpus = markdown_table(["machine", "owed", "command"], [list(row) for row in OWED_ELSEWHERE])
    return "\n\n".join(
        [
            f"Owed: {len(items)} of {len(ITEMS)} items (RESULTS.md holds the figures of the others):",
            markdown_table(["item", "RESULTS.md rows", "owed", "command"], rows),
            f"The owed items, in commands of at most {budget_s / 60:g} minutes:",
            f"```bash\n{commands}\n```",
            "Owed on other machines:",
            cpus,
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the plan (without CUDA or with --dry_run), or run it and print the table; returns the exit status."""
    args = parse_arguments(argv)
    gpus = max(1, torch.cuda.device_count())  # the plan without CUDA is for the lent machine: one GPU
    fates = plan(args.selected, args.budget_minutes * 60, gpus)
    if args.dry_run:
        why = "--dry_run" if torch.cuda.is_available() else "no CUDA device here"
        print(f"{why}: nothing runs; the plan for a CUDA machine follows.\n")
        print_plan(args.selected, fates, args, gpus)
        return 0
    log_dir = args.log_dir or REPO / RUNS / time.strftime("%Y%m%d-%H%M%S")
    log_dir.mkdir(parents=True, exist_ok=True)
    # nvidia-smi, not torch: a CUDA context in this process would hold GPU memory while the items run
    print(f"GPUs: {', '.join(nvidia_smi('--query-gpu=name')) or '?'}; logs in {log_dir}", flush=True)
    if others := nvidia_smi("--query-compute-apps=pid,process_name"):
        print(f"warning: other processes use the GPU and will disturb the timings: {'; '.join(others)}")
    outcomes = run_plan(args.selected, fates, args.data_dir, log_dir)
    table = results_table(args.selected, outcomes, args.data_dir)
    print("\n" + table)
    for item in args.selected:
        if (status := outcomes[item.name].status).startswith("skipped"):
            print(f"not run ({status.removeprefix('skipped: ')}): {item.command_line(args.data_dir)}")
    write_atomically(log_dir / "table.md", table + "\n")
    records = {
        name: {"status": o.status, "seconds": o.seconds, "figures": {f.label: f.value for f in o.figures}}
        for name, o in outcomes.items()
    }
    write_atomically(log_dir / "results.json", json.dumps(records, indent=1))
    deciding = {item.name: outcomes[item.name] for item in args.selected if item.name in DECIDING}
    if deciding:
        text = decision(
            {name: o.log.read_text(encoding="utf-8") for name, o in deciding.items() if o.log is not None},
            {name: o.status for name, o in deciding.items()},
        )
        print("\nSide by side with MarianMTModel (bfloat16):\n\n" + text)
        write_atomically(log_dir / "decision.md", text + "\n")
    return 1 if any(o.status.startswith("failed") for o in outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
