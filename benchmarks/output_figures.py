"""Figures read back from what the benchmarks, the training command and pytest print, for gpu_owed.py's table.

Each reader takes a command's whole output and returns the figures it recognises; lines it does not recognise are
passed over, so a changed output format loses figures (the table then says "see log"), never raises. The readers
accept both the fixed-precision output of bench_training.py / bench_decoding.py (one MarianMTModel, named
"vaswani" / "ours" and "marian" / "Marian") and the --dtype auto output (rows named by precision, "ours bfloat16",
"Marian float32", ...): "ours/Marian" is always against MarianMTModel in ours's precision (like for like).
"""

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One figure: a label, its value (a number, or a word such as a precision) and how the table shows it."""

    label: str
    value: float | str
    shown: str

    def __str__(self) -> str:
        return f"{self.label} {self.shown}"


@dataclass(frozen=True)
class Target:
    """A bound on one figure, by label: at least, at most, or equal to a word."""

    label: str
    at_least: float | None = None
    at_most: float | None = None
    equals: str | None = None

    def met_by(self, figures: Sequence[Figure]) -> bool | None:
        """Whether the figure meets the bound; None when the figure is not among `figures`."""
        value = next((figure.value for figure in figures if figure.label == self.label), None)
        if value is None:
            return None
        if self.equals is not None:
            return value == self.equals
        if isinstance(value, str):
            return False
        return (self.at_least is None or value >= self.at_least) and (
            self.at_most is None or value <= self.at_most
        )


def verdict(targets: Sequence[Target], figures: Sequence[Figure]) -> str:
    """ "yes" when every target is met, "no" when one is missed, "?" when one's figure is missing, "–" for none."""
    if not targets:
        return "–"
    results = [target.met_by(figures) for target in targets]
    if False in results:
        return "no"
    return "?" if None in results else "yes"


def ratio(label: str, value: float) -> Figure:
    return Figure(label, value, f"{value:.2f}×")


def percent(label: str, value: float) -> Figure:
    return Figure(label, value, f"{value:.1f}%")


def count(label: str, value: int) -> Figure:
    return Figure(label, value, str(value))


PYTEST_SUMMARY = re.compile(
    r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|deselected|xfailed|xpassed|warnings?)(?:, )?)+) in [\d.]+s"
)


def pytest_figures(output: str) -> list[Figure]:
    """Counts of pytest's last summary line: passed, failed, skipped, errors (0 when the line omits them)."""
    summaries = [match.group(1) for line in output.splitlines() if (match := PYTEST_SUMMARY.match(line))]
    if not summaries:
        return []
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (\w+)", summaries[-1])}
    counts["errors"] = counts.pop("error", 0) + counts.get("errors", 0)
    return [count(word, counts.get(word, 0)) for word in ("passed", "failed", "skipped", "errors")]


TRAINING_ROW = re.compile(
    r"^\s+(?P<name>(?:ours|Marian)(?: \w+)?)\s+[\d.]+M params\s+step\s+(?P<ms>[\d.]+) ms.*?"
    r"MFU\s+(?P<mfu>n/a|[\d.]+%)(?:\s*\(\s*(?P<datasheet>[\d.]+)% of [\d.]+ TFLOP/s\))?\s+"
    r"peak\s+(?:n/a|(?P<peak>[\d.]+) MB)"
)
TRAINING_RATIOS = re.compile(
    r"^\s+ours (?:/ Marian: (?P<single>[\d.]+)×|\((?P<dtype>\w+)\) target tokens/s: )"
)


def training_speed_figures(output: str) -> list[Figure]:
    """bench_training.py: ours/Marian (like for like, and against Marian float32 when ours is not float32), ours's
    MFU against the --peak_tflops datasheet figure and against the measured peak, peak memory ours/Marian, and the
    job's share of the model step."""
    rows = {match["name"]: match for line in output.splitlines() if (match := TRAINING_ROW.match(line))}
    measured_peak = "roofline on " in output  # the --dtype auto version: MFU against the measured matmul peak
    figures = []
    for line in output.splitlines():
        if not (match := TRAINING_RATIOS.match(line)):
            continue
        if match["single"] is not None:
            figures.append(ratio("ours/Marian", float(match["single"])))
            continue
        speedups = {name: float(value) for value, name in re.findall(r"([\d.]+)× (Marian \w+)", line)}
        if f"Marian {match['dtype']}" in speedups:
            figures.append(ratio("ours/Marian", speedups[f"Marian {match['dtype']}"]))
        if match["dtype"] != "float32" and "Marian float32" in speedups:
            figures.append(ratio("ours/Marian float32", speedups["Marian float32"]))
    ours = next((name for name in rows if name.startswith("ours")), None)
    if ours is not None:
        datasheet = rows[ours]["datasheet"] if measured_peak else rows[ours]["mfu"]
        if datasheet is not None and datasheet != "n/a":
            figures.append(percent("MFU (datasheet peak)", float(datasheet.rstrip("%"))))
        if measured_peak and rows[ours]["mfu"] != "n/a":
            figures.append(percent("MFU (measured peak)", float(rows[ours]["mfu"].rstrip("%"))))
        marian = rows.get("Marian" + ours.removeprefix("ours"))
        if marian is not None and marian["peak"] is not None and rows[ours]["peak"] is not None:
            figures.append(
                ratio("peak memory ours/Marian", float(rows[ours]["peak"]) / float(marian["peak"]))
            )
    if match := re.search(r"^\s+job / model step: (\d+)%", output, flags=re.M):
        figures.append(percent("job/model step", float(match[1])))
    return figures


DECODING_ROW = re.compile(
    r"^(?P<name>\S.*?)\s+beam (?P<beams>\d+):\s+(?P<ms>[\d.]+) ms\s+[\d.]+ sentences/s\s+[\d.]+ output tokens/s"
    r"\s+latency \(1 sentence\)\s+(?P<latency>[\d.]+) ms"
)


def decoding_figures(output: str) -> list[Figure]:
    """bench_decoding.py's fixed-length run, per beam: ours/Marian sentences/s and single-sentence latency (like
    for like), ours against Marian float32 when ours is not float32, and each CTranslate2 run against Marian."""
    rows: dict[str, dict[str, tuple[float, float]]] = {}
    for line in output.splitlines():
        if match := DECODING_ROW.match(line):
            rows.setdefault(match["beams"], {})[match["name"]] = (float(match["ms"]), float(match["latency"]))
    figures = []
    for beams, runs in rows.items():
        ours = next((name for name in runs if name.startswith(("ours", "vaswani"))), None)
        precision = ours.partition(" ")[2] if ours else ""
        marian = f"marian {precision}" if f"marian {precision}" in runs else "marian"
        if ours is None or marian not in runs:
            continue
        (ours_ms, ours_latency), (marian_ms, marian_latency) = runs[ours], runs[marian]
        figures += [
            ratio(f"beam {beams}: ours/Marian", marian_ms / ours_ms),
            ratio(f"beam {beams}: latency ours/Marian", marian_latency / ours_latency),
        ]
        if marian != "marian float32" and "marian float32" in runs:
            figures.append(ratio(f"beam {beams}: ours/Marian float32", runs["marian float32"][0] / ours_ms))
        for name, (ms, _) in runs.items():
            if name.startswith("ct2"):
                figures.append(ratio(f"beam {beams}: {name.replace('-', ' ')}/Marian", marian_ms / ms))
    return figures


def train_figures(output: str) -> list[Figure]:
    """scripts/train.py: test sacreBLEU and tokenised BLEU, training minutes, checkpoints averaged, precision."""
    patterns: dict[str, tuple[str, Callable[[str, str], Figure]]] = {
        "test sacreBLEU": (r"^test sacreBLEU: ([\d.]+)", lambda label, v: Figure(label, float(v), v)),
        "test tokenised BLEU": (
            r"^test tokenised BLEU: ([\d.]+)",
            lambda label, v: Figure(label, float(v), v),
        ),
        "trained": (r"^trained in ([\d.]+) min", lambda label, v: Figure(label, float(v), f"{v} min")),
        "checkpoints averaged": (
            r"^final model: average of (.+)$",
            lambda label, v: count(label, len(v.split(", "))),
        ),
        "precision": (r"^model: .*; ([^;(]+?) \(.*\)$", lambda label, v: Figure(label, v, v)),
    }
    figures = []
    for label, (pattern, make) in patterns.items():
        if found := re.findall(pattern, output, flags=re.M):
            figures.append(make(label, found[-1]))
    return figures


INIT_STUDY_PROBE = re.compile(
    r"^\S+ \S+ \S+ step (?P<step>\d+): loss (?P<loss>\S+) \(floor [\d.]+\) src-gain (?P<gain>\S+) "
    r"cross-ent (?P<cross>\S+)"
)


def init_study_figures(output: str) -> list[Figure]:
    """init_study.py: the last probe's step, training loss, source gain and cross-attention entropy."""
    probes = [match for line in output.splitlines() if (match := INIT_STUDY_PROBE.match(line))]
    if not probes:
        return []
    last = probes[-1]
    return [
        count("step", int(last["step"])),
        Figure("loss", float(last["loss"]), last["loss"]),
        Figure("source gain", float(last["gain"]), last["gain"]),
        Figure("cross-attention entropy", float(last["cross"]), last["cross"]),
    ]


FAILURE_LINE = re.compile(r"^(?:error: |\S+: error: |(?:\w+\.)*\w*(?:Error|Exception)\b)")


def failure_reason(output: str, limit: int = 160) -> str:
    """The last error message in a failed command's output (an `error:` line, argparse's, or the last line of a
    Python traceback), cut to `limit` characters; empty when there is none."""
    lines = [line.strip() for line in output.splitlines() if FAILURE_LINE.match(line.strip())]
    if not lines:
        return ""
    return lines[-1] if len(lines[-1]) <= limit else lines[-1][: limit - 1] + "…"


def busy_figures(
    samples: Sequence[tuple[float, float]], lines: Sequence[tuple[float, str]], window: str | None
) -> list[Figure]:
    """GPU busy percentages from (time, utilisation %) samples: over the whole command, and over the span between
    the first and the last output line matching `window` (the training loop's progress lines)."""
    if not samples:
        return []
    figures = [percent("GPU busy (command)", statistics.fmean(value for _, value in samples))]
    if window is None:
        return figures
    stamps = [stamp for stamp, line in lines if re.match(window, line)]
    inside = [value for stamp, value in samples if stamps and stamps[0] <= stamp <= stamps[-1]]
    if inside:
        figures.append(percent("GPU busy (training)", statistics.fmean(inside)))
    return figures


# Absolute speeds, for gpu_decision.py's side-by-side table (paths measured in different commands).
DECODING_SPEED_ROW = re.compile(
    r"^(?P<name>\S.*?)\s+beam (?P<beams>\d+):\s+[\d.]+ ms\s+(?P<sps>[\d.]+) sentences/s\s+[\d.]+ output tokens/s"
    r"\s+latency \(1 sentence\)\s+(?P<latency>[\d.]+) ms"
)


def decoding_speeds(output: str) -> dict[tuple[str, int], tuple[float, float]]:
    """bench_decoding.py's rows: (run name, beams) → (sentences/s at --batch, single-sentence latency in ms)."""
    return {
        (match["name"], int(match["beams"])): (float(match["sps"]), float(match["latency"]))
        for line in output.splitlines()
        if (match := DECODING_SPEED_ROW.match(line))
    }


TRAINING_SPEED_ROW = re.compile(
    r"^\s+(?P<name>(?:ours|Marian)(?: \w+)?)\s+[\d.]+M params\s+step\s+[\d.]+ ms\s+(?P<tps>[\d.]+) target tokens/s"
)


@dataclass(frozen=True)
class TrainingSpeeds:
    """bench_training.py's figures: each model step's target tokens/s by row name, and the job's token budget per
    batch, steps, wall seconds (start-up and compiling included), loop tokens/s and share of the model step
    (None: not printed)."""

    step: dict[str, float]
    job_batch_tokens: int | None = None
    job_steps: int | None = None
    job_seconds: float | None = None
    job_tokens_per_s: float | None = None
    job_share: float | None = None


def training_speeds(output: str) -> TrainingSpeeds:
    """bench_training.py's step rows and job lines, read as numbers."""
    step = {
        match["name"]: float(match["tps"])
        for line in output.splitlines()
        if (match := TRAINING_SPEED_ROW.match(line))
    }
    job = re.search(r"^\(b\) job .*?, (\d+) tokens per batch, (\d+) steps in ([\d.]+) s", output, flags=re.M)
    loop = re.search(r"^\s+job loop\s+([\d.]+) target tokens/s", output, flags=re.M)
    share = re.search(r"^\s+job / model step: (\d+)%", output, flags=re.M)
    return TrainingSpeeds(
        step,
        int(job[1]) if job else None,
        int(job[2]) if job else None,
        float(job[3]) if job else None,
        float(loop[1]) if loop else None,
        float(share[1]) if share else None,
    )
