"""The decision of gpu_owed.py's default run: which CUDA paths are faster, side by side with
MarianMTModel, read from its items' output, in one table, with the defaults it recommends.

The default run's items (`DECIDING`, in gpu_owed.ITEMS' order) measure, on one GPU in bfloat16: the `base` training
step and a short job, eager and compiled; decoding (`base`, vocabulary 37k, 20 output tokens) with plain
generate(), with CUDA graphs (the `cuda_graphs` option: bench_cuda_graphs.py times `bucketed_generate`, one kept
static cache per bucket and a step compiled with mode="reduce-overhead") and in CTranslate2, beam 4 and greedy,
at batch 64 and for one sentence. MarianMTModel's figures are its plain, eager ones in the same precision (as its
users run it), from the items' own rows: every path is compared with MarianMTModel of its own run (and CUDA
graphs with the plain path of theirs), never with another item's, since two runs of one model differ by 15% on one
GPU (measured).

CUDA graphs become the decoding default only where they pay for their compiling within a job of `JOB_SENTENCES`
sentences (the size of the main job's test split): the seconds they save at batch 64, beam 4, must exceed the
seconds their shapes took to compile and record.

A recommendation compares only what was measured: an item that failed, ran out of its budget or was skipped is
named, and nothing is recommended from it. The job's recommendation counts its whole wall time, compiling
included, over the measured steps.
"""

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from output_figures import TrainingSpeeds, decoding_speeds, training_speeds

PLAIN = "decoding-base-bf16"
GRAPHS = "decoding-base-compiled-bf16"
CT2 = "decoding-base-ctranslate2"
EAGER = "decide-training-eager"
COMPILED = "decide-training-compiled"
DECIDING = (EAGER, COMPILED, PLAIN, GRAPHS, CT2)
PRECISION = "bfloat16"  # the items' --dtype: ours and Marian compared like for like
# The CUDA paths' targets (docs/decisions/compiled-decoding.md), against MarianMTModel in the same precision.
DECODING_TARGET = 3.0  # the CUDA default: sentences/s at batch 64 beam 4, and one sentence's latency
CTRANSLATE2_TARGET = 5.0
STEP_RATE_TARGET = 1.5  # the base job's target tokens/s over Marian's step
JOB_SHARE_TARGET = 90.0  # % of the model step alone
CELLS = ((4, False), (4, True), (1, False), (1, True))  # (beams, one sentence?)
JOB_SENTENCES = 1000  # a decoding job the default must serve well: the main job's test split
MARIAN = "MarianMTModel"
GRAPH_ROW = re.compile(
    r"^\| (?:beam 4|greedy) \| \d+ \|(?: [\d.]+ \|){3} [\d,.]+ \|.*\| (?P<compile>[\d.]+) \| (?:yes|no) \|$"
)


@dataclass(frozen=True)
class Row:
    """One line of the table: what is measured, by which path, its value, Marian's, and ours/Marian."""

    measure: str
    path: str
    value: str
    marian: str
    times: float | None

    def cells(self) -> list[str]:
        return [self.measure, self.path, self.value, self.marian, f"{self.times:.2f}×" if self.times else "–"]


def cell_name(beams: int, single: bool) -> str:
    return f"{'beam 4' if beams == 4 else 'greedy'}, {'1 sentence (ms)' if single else 'batch (sentences/s)'}"


def speedup(ours: float, marian: float, single: bool) -> float:
    """Ours over Marian: sentences/s ratio, or how many times lower the latency is."""
    return marian / ours if single else ours / marian


@dataclass(frozen=True)
class DecodingPath:
    """One decoding path's cells, (beams, one sentence?) → value, with its run's own MarianMTModel cells and, for
    CUDA graphs, its run's own plain generate() cells (the peers it is compared with)."""

    cells: dict[tuple[int, bool], float]
    marian: dict[tuple[int, bool], float]
    plain: dict[tuple[int, bool], float] | None = None


def decoding_paths(outputs: Mapping[str, str]) -> dict[str, DecodingPath]:
    """Each decoding path that ran: ours plain (the plain item, else the CTranslate2 item's own row), ours with
    CUDA graphs, and each CTranslate2 compute type, each with its own run's peers."""
    paths: dict[str, DecodingPath] = {}
    for item in (PLAIN, CT2):
        speeds = decoding_speeds(outputs.get(item, ""))
        if "ours, plain generate()" not in paths and has_run(speeds, f"ours {PRECISION}"):
            paths["ours, plain generate()"] = DecodingPath(
                cells(speeds, f"ours {PRECISION}"), cells(speeds, f"marian {PRECISION}")
            )
    graphs = decoding_speeds(outputs.get(GRAPHS, ""))
    if has_run(graphs, f"ours {PRECISION}"):
        own_plain = cells(graphs, f"plain {PRECISION}") if has_run(graphs, f"plain {PRECISION}") else None
        paths["ours, CUDA graphs"] = DecodingPath(
            cells(graphs, f"ours {PRECISION}"), cells(graphs, f"marian {PRECISION}"), own_plain
        )
    ct2_speeds = decoding_speeds(outputs.get(CT2, ""))
    for name in dict.fromkeys(name for name, _ in ct2_speeds if name.startswith("ct2 ")):
        paths[f"CTranslate2 {name.removeprefix('ct2 ')}"] = DecodingPath(
            cells(ct2_speeds, name), cells(ct2_speeds, f"marian {PRECISION}")
        )
    return paths


def has_run(speeds: Mapping[tuple[str, int], tuple[float, float]], run: str) -> bool:
    return any(name == run for name, _ in speeds)


def cells(speeds: Mapping[tuple[str, int], tuple[float, float]], run: str) -> dict[tuple[int, bool], float]:
    return {
        (beams, single): speeds[(run, beams)][1 if single else 0]
        for beams, single in CELLS
        if (run, beams) in speeds
    }


def compile_seconds(output: str) -> float | None:
    """bench_cuda_graphs.py's compile seconds over all its shapes (each shape's first call), None if not printed."""
    seconds = [float(match["compile"]) for line in output.splitlines() if (match := GRAPH_ROW.match(line))]
    return sum(seconds) if seconds else None


def decoding_rows(paths: Mapping[str, DecodingPath]) -> list[Row]:
    rows = []
    for beams, single in CELLS:
        for path, found in paths.items():
            if (beams, single) not in found.cells:
                continue
            value, baseline = found.cells[(beams, single)], found.marian.get((beams, single))
            rows.append(
                Row(
                    f"decoding {cell_name(beams, single)}",
                    path,
                    f"{value:g}",
                    f"{baseline:g}" if baseline else "–",
                    speedup(value, baseline, single) if baseline else None,
                )
            )
    return rows


def marian_step(speeds: TrainingSpeeds) -> float | None:
    return speeds.step.get(f"Marian {PRECISION}")


def training_rows(runs: Mapping[str, TrainingSpeeds]) -> list[Row]:
    rows = []
    for item, path in ((EAGER, "eager"), (COMPILED, "compiled (--torch_compile)")):
        speeds = runs.get(item)
        if speeds is None:
            continue
        marian = marian_step(speeds)
        ours = speeds.step.get(f"ours {PRECISION}")
        shown = f"{marian:g}" if marian else "–"
        if ours is not None:
            rows.append(
                Row(
                    "training step (target tokens/s)",
                    path,
                    f"{ours:g}",
                    shown,
                    ours / marian if marian else None,
                )
            )
        if speeds.job_tokens_per_s is not None:
            loop = speeds.job_tokens_per_s
            share = f" ({speeds.job_share:g}% of the step alone)" if speeds.job_share is not None else ""
            rows.append(
                Row(
                    "training job loop (target tokens/s)",
                    path,
                    f"{loop:g}{share}",
                    shown,
                    loop / marian if marian else None,
                )
            )
        if speeds.job_seconds is not None:
            rows.append(
                Row(
                    f"training job, {speeds.job_steps} steps, compiling included (s)",
                    path,
                    f"{speeds.job_seconds:g}",
                    "–",
                    None,
                )
            )
    return rows


def markdown(rows: Sequence[Row]) -> str:
    header = ["measure", "path", "value", "MarianMTModel", "ours/Marian"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row.cells()) + " |" for row in rows])


def graph_peer(paths: Mapping[str, DecodingPath]) -> dict[tuple[int, bool], float]:
    """The plain path CUDA graphs are compared with: their own run's, else the plain item's."""
    graphs = paths["ours, CUDA graphs"]
    return graphs.plain if graphs.plain is not None else paths["ours, plain generate()"].cells


def graph_wins(paths: Mapping[str, DecodingPath]) -> dict[tuple[int, bool], bool]:
    """Per cell measured on both paths: whether CUDA graphs beat plain generate() there."""
    graphs, plain = paths["ours, CUDA graphs"].cells, graph_peer(paths)
    return {
        cell: (graphs[cell] < plain[cell]) if cell[1] else (graphs[cell] > plain[cell])
        for cell in CELLS
        if cell in plain and cell in graphs
    }


def seconds_saved(paths: Mapping[str, DecodingPath], sentences: int) -> float:
    """What CUDA graphs save over the plain path decoding `sentences` at batch 64, beam 4."""
    plain, graphs = graph_peer(paths)[(4, False)], paths["ours, CUDA graphs"].cells[(4, False)]
    return sentences / plain - sentences / graphs


def default_decoding_path(paths: Mapping[str, DecodingPath], compiling: float | None) -> str | None:
    """The torch engine's CUDA default: CUDA graphs where they beat plain generate() at beam 4 (the model's
    decoding) both at batch 64 and for one sentence, and save more than their `compiling` seconds within a job of
    JOB_SENTENCES sentences; else plain. None when either path has no figures."""
    if "ours, plain generate()" not in paths or "ours, CUDA graphs" not in paths:
        return None
    wins = graph_wins(paths)
    faster = wins.get((4, False)) and wins.get((4, True))
    pays = faster and seconds_saved(paths, JOB_SENTENCES) > (compiling or 0.0)
    return "ours, CUDA graphs" if pays else "ours, plain generate()"


def decoding_recommendation(paths: Mapping[str, DecodingPath], compiling: float | None) -> list[str]:
    """The torch engine's CUDA default (`default_decoding_path`), and whether CTranslate2 beats it."""
    best = default_decoding_path(paths, compiling)
    if best is None:
        missing = PLAIN if "ours, plain generate()" not in paths else GRAPHS
        return [f"decoding default: not decided ({missing} has no figures)"]
    plain, graphs = graph_peer(paths), paths["ours, CUDA graphs"].cells
    default = best == "ours, CUDA graphs"
    lines = [
        f"decoding default on CUDA: {'CUDA graphs' if default else 'plain generate()'} "
        f"(beam 4: {plain.get((4, False), math.nan):g} → {graphs.get((4, False), math.nan):g} sentences/s at "
        f"batch 64, {plain.get((4, True), math.nan):g} → {graphs.get((4, True), math.nan):g} ms for one sentence)"
    ]
    losses = [cell_name(*cell) for cell, won in graph_wins(paths).items() if not won]
    if losses:
        lines.append(f"  CUDA graphs are slower at: {', '.join(losses)}")
    saved = seconds_saved(paths, 1) if (4, False) in plain and (4, False) in graphs else 0.0
    if not default and compiling and saved > 0:
        lines.append(
            f"  compiling took {compiling:g} s, {saved * JOB_SENTENCES:.2f} s saved per {JOB_SENTENCES:,} "
            f"sentences: --cuda_graphs pays after about {math.ceil(compiling / saved):,} sentences"
        )
    engines = {path: found.cells for path, found in paths.items() if path.startswith("CTranslate2")}
    best_cells = plain if best == "ours, plain generate()" else graphs
    if engines and (4, False) in best_cells:
        fastest = max(engines, key=lambda path: engines[path].get((4, False), 0.0))
        times = engines[fastest].get((4, False), 0.0) / best_cells[(4, False)]
        verb = "is" if times > 1 else "is not"
        lines.append(
            f"engine: {fastest} {verb} faster than the default PyTorch path ({times:.2f}× at beam 4, batch 64); "
            "its length penalty is |Y|^α, not GNMT's: --engine ctranslate2 for serving"
        )
    return lines


def training_recommendation(runs: Mapping[str, TrainingSpeeds]) -> list[str]:
    """The CUDA training job: compiled when its whole wall time over the same steps, compiling included, is
    shorter than eager's."""
    eager, compiled = runs.get(EAGER), runs.get(COMPILED)
    if eager is None or compiled is None or None in (eager.job_seconds, compiled.job_seconds):
        missing = EAGER if eager is None or eager.job_seconds is None else COMPILED
        return [f"training job: not decided ({missing} has no job figures)"]
    faster = compiled.job_seconds < eager.job_seconds
    lines = [
        f"training job on CUDA: {'--torch_compile' if faster else 'eager'} ({eager.job_steps} steps in "
        f"{eager.job_seconds:g} s eager, {compiled.job_seconds:g} s compiled, compiling included)"
    ]
    steps = break_even_steps(eager, compiled)
    if not faster and steps is not None:
        lines.append(
            f"  the compiled loop is {compiled.job_tokens_per_s / eager.job_tokens_per_s:.2f}× eager's: "
            f"--torch_compile pays in jobs longer than about {steps:,} steps (full batches assumed)"
        )
    return lines


def break_even_steps(eager: TrainingSpeeds, compiled: TrainingSpeeds) -> int | None:
    """About how many steps a job needs before compiling pays: the compiled job's extra fixed seconds (its wall
    time less its steps at the loop's speed, against eager's) over the seconds it saves per step, with each step
    taken as a full batch of the token budget (an upper bound on its tokens, so the estimate leans early). None
    when the compiled loop is not faster or a figure is missing."""
    figures = (eager.job_tokens_per_s, compiled.job_tokens_per_s, eager.job_batch_tokens, eager.job_steps)
    if None in figures or compiled.job_tokens_per_s <= eager.job_tokens_per_s:
        return None
    eager_step = eager.job_batch_tokens / eager.job_tokens_per_s
    compiled_step = eager.job_batch_tokens / compiled.job_tokens_per_s
    extra = (compiled.job_seconds - eager.job_steps * compiled_step) - (
        eager.job_seconds - eager.job_steps * eager_step
    )
    return max(eager.job_steps, math.ceil(extra / (eager_step - compiled_step)))


def verdict(value: float | None, bound: float) -> str:
    return "not measured" if value is None else f"{value:.2f} ({'met' if value >= bound else 'missed'})"


def target_lines(
    paths: Mapping[str, DecodingPath], runs: Mapping[str, TrainingSpeeds], compiling: float | None
) -> list[str]:
    """The CUDA paths' targets, each against the path that would be the default (the best CTranslate2 float
    type, and the training job with the higher step rate)."""
    default = default_decoding_path(paths, compiling)
    torch_paths = [paths[default]] if default else []
    engines = [
        found for path, found in paths.items() if path.startswith("CTranslate2") and "int8" not in path
    ]

    def best(candidates: Sequence[DecodingPath], cell: tuple[int, bool]) -> float | None:
        found = [
            speedup(path.cells[cell], path.marian[cell], cell[1])
            for path in candidates
            if cell in path.cells and cell in path.marian
        ]
        return max(found, default=None)

    step_rates = [
        (speeds.job_tokens_per_s / marian_step(speeds), speeds.job_share)
        for speeds in runs.values()
        if speeds.job_tokens_per_s and marian_step(speeds)
    ]
    rate, share = max(step_rates, default=(None, None))
    return [
        f"target: decoding ≥ {DECODING_TARGET:g}× Marian's sentences/s at batch 64, beam 4: "
        + verdict(best(torch_paths, (4, False)), DECODING_TARGET),
        f"target: ≥ {DECODING_TARGET:g}× lower latency for one sentence, beam 4: "
        + verdict(best(torch_paths, (4, True)), DECODING_TARGET),
        f"target: CTranslate2 (float) ≥ {CTRANSLATE2_TARGET:g}× Marian at batch 64, beam 4: "
        + verdict(best(engines, (4, False)), CTRANSLATE2_TARGET),
        f"target: the base job ≥ {STEP_RATE_TARGET:g}× Marian's step rate: "
        + verdict(rate, STEP_RATE_TARGET),
        f"target: the job at ≥ {JOB_SHARE_TARGET:g}% of the step alone: " + verdict(share, JOB_SHARE_TARGET),
    ]


def decision(outputs: Mapping[str, str], statuses: Mapping[str, str]) -> str:
    """The side-by-side table and the recommendations, from the output of the deciding items that ran (by item
    name) and every deciding item's status."""
    paths = decoding_paths(outputs)
    compiling = compile_seconds(outputs.get(GRAPHS, ""))
    runs = {item: training_speeds(outputs[item]) for item in (EAGER, COMPILED) if item in outputs}
    rows = training_rows(runs) + decoding_rows(paths)
    lines = [markdown(rows) if rows else "(nothing measured)", ""]
    lines += [f"not measured: {item} ({status})" for item, status in statuses.items() if status != "ran"]
    recommended = (
        training_recommendation(runs)
        + decoding_recommendation(paths, compiling)
        + target_lines(paths, runs, compiling)
    )
    lines += ["recommended:"] + [line if line.startswith("  ") else f"- {line}" for line in recommended]
    return "\n".join(lines)
