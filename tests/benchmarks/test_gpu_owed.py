"""benchmarks/gpu_owed.py, the one command for the figures owed from a GPU: its plan without CUDA, the items it
takes within the budget, what it lists as owed, real runs of items (subprocesses: budgets, failures,
logs), and the figures it reads from the real output of the commands it runs.

The samples in tests/samples/gpu_owed/ are real output captured on cpu-2 (2026-11-25) with small flags:
bench_decoding.txt / bench_training.txt from this checkout's benchmarks (`--preset tiny --vocab_size 1000` ...),
*_auto.txt from their --dtype auto version (rows named by precision, a roofline line; bench_training_auto.txt
re-captured 2026-11-26 with one thread, when its MFU became a share of the peak measured in the same turns),
train.txt from a 20-step `scripts/train.py --recipe multi30k`, init_study.txt from a 4-step tiny run, pytest_*.txt from pytest, and
failure_*.txt from failed commands (the tail of a traceback, train.py's and argparse's error lines).
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vaswani_transformer.cli.train import parse_options
from vaswani_transformer.training import check_inputs

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_owed  # noqa: E402
from gpu_decision import COMPILED, CT2, DECIDING, EAGER, GRAPHS, PLAIN, decision  # noqa: E402
from gpu_owed import ITEMS, Item, covering_commands, plan, results_table, run_plan  # noqa: E402
from output_figures import (  # noqa: E402
    Target,
    busy_figures,
    decoding_figures,
    decoding_speeds,
    failure_reason,
    init_study_figures,
    pytest_figures,
    train_figures,
    training_speed_figures,
    training_speeds,
    verdict,
)

# A benchmark planner's tests: out of the fast set, run with the slow set (RUN_SLOW=1 or -m slow).
pytestmark = pytest.mark.slow

SAMPLES = REPO / "tests" / "samples" / "gpu_owed"
BUDGET_S = int(gpu_owed.BUDGET_MINUTES * 60)  # the default run: 9 minutes
BY_NAME = {item.name: item for item in ITEMS}


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def values(figures) -> dict[str, float | str]:
    return {figure.label: figure.value for figure in figures}


def run_main(argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """gpu_owed.main in this process, as on a machine without CUDA (whatever runs the tests)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    try:
        status = gpu_owed.main(argv)
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


# The plan, without CUDA


def test_without_cuda_the_plan_lists_every_item_and_runs_nothing(monkeypatch, capsys, tmp_path) -> None:
    status, out, _ = run_main(["--log_dir", str(tmp_path / "logs")], monkeypatch, capsys)
    assert status == 0
    assert "no CUDA device here: nothing runs" in out
    assert not (tmp_path / "logs").exists()
    for item in ITEMS:
        row = next(line for line in out.splitlines() if line.startswith(f"| {item.name} |"))
        assert f"`{item.command}`" in row
        assert f"{item.budget_s / 60:g} min" in row
    fates = plan(ITEMS, BUDGET_S, gpus=1)
    taken = [item.name for item in ITEMS if fates[item.name] is None]
    assert f"{len(taken)} of {len(ITEMS)} items fit the 9-minute budget" in out
    for item in ITEMS:
        row = next(line for line in out.splitlines() if line.startswith(f"| {item.name} |"))
        assert row.endswith("| yes |" if item.name in taken else f"| {fates[item.name][9:]} |")


def test_the_default_run_takes_items_in_order_while_their_budgets_fit() -> None:
    fates = plan(ITEMS, BUDGET_S, gpus=1)
    taken = [item for item in ITEMS if fates[item.name] is None]
    assert [item.name for item in taken] == list(DECIDING)  # the decision run
    assert sum(item.budget_s for item in taken) <= BUDGET_S
    left = BUDGET_S
    for item in ITEMS:  # greedy in list order: an item is left out only when it no longer fits
        if fates[item.name] is None:
            left -= item.budget_s
        elif fates[item.name] == "skipped: budget":
            assert item.budget_s > left, item.name
    assert fates["ddp-2-gpus"] == "skipped: needs 2 GPUs (1 here)"
    assert plan(ITEMS, BUDGET_S, gpus=2)["ddp-2-gpus"] in (None, "skipped: budget")
    wider = plan(ITEMS, 3 * BUDGET_S, gpus=1)
    assert {name for name, fate in fates.items() if fate is None} < {n for n, f in wider.items() if f is None}


def test_an_item_that_does_not_fit_leaves_room_for_later_smaller_ones() -> None:
    items = [
        python_item(name, "pass", budget_s, train_figures)
        for name, budget_s in (("a", 300), ("b", 400), ("c", 200))
    ]
    assert plan(items, BUDGET_S, gpus=1) == {"a": None, "b": "skipped: budget", "c": None}
    commands = covering_commands(items, BUDGET_S, gpus=1)
    assert [command for _, command in commands] == [
        "python benchmarks/gpu_owed.py",
        "python benchmarks/gpu_owed.py --items b",
    ]
    assert [command for _, command in covering_commands(items, 240, gpus=1)] == [
        "python benchmarks/gpu_owed.py --items a --budget_minutes 5",  # larger than the budget: alone
        "python benchmarks/gpu_owed.py --items b --budget_minutes 7",
        "python benchmarks/gpu_owed.py --budget_minutes 4",  # c alone is what a 4-minute run takes
    ]


def test_items_select_and_the_budget_still_applies(monkeypatch, capsys) -> None:
    status, out, _ = run_main(["--dry_run", "--items", "multi30k, main-job"], monkeypatch, capsys)
    assert status == 0
    planned = out.split("\nOwed: ")[0]  # the plan's table, not the owed list after it
    rows = [line for line in planned.splitlines() if line.startswith("| ") and "`" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| main-job", "| multi30k"]  # in the list's order
    assert rows[0].endswith("| yes |") and rows[1].endswith("| budget |")  # 9 + 9 minutes > 9
    assert "1 of 2 items fit" in out


def test_a_dependent_item_needs_its_predecessor_in_the_same_run() -> None:
    resume = BY_NAME["fsdp-multi30k-resume"]
    assert plan([resume], BUDGET_S, gpus=1)[resume.name] == "skipped: needs fsdp-multi30k in the same run"
    both = [BY_NAME["fsdp-multi30k"], resume]
    assert plan(both, BUDGET_S, gpus=1) == {"fsdp-multi30k": None, resume.name: None}
    too_small = plan(both, BY_NAME["fsdp-multi30k"].budget_s, gpus=1)  # the pair is taken whole or not at all
    assert set(too_small.values()) == {"skipped: budget"}


def test_unknown_items_are_refused_with_the_choices(monkeypatch, capsys) -> None:
    status, _, err = run_main(["--items", "main-job,no-such-item"], monkeypatch, capsys)
    assert status == 2
    assert "unknown item(s) no-such-item: choose from decide-training-eager, decide-training-compiled" in err
    status, _, err = run_main(["--budget_minutes", "0"], monkeypatch, capsys)
    assert status == 2 and "--budget_minutes must be positive" in err


@pytest.mark.slow  # two fresh interpreters
def test_the_script_runs_as_a_command() -> None:
    """As a subprocess: the plan exits 0, a bad item exits 2 with the message and no traceback."""
    plan_run = subprocess.run(
        [sys.executable, "benchmarks/gpu_owed.py", "--dry_run"], cwd=REPO, capture_output=True, text=True
    )
    assert plan_run.returncode == 0, plan_run.stderr
    assert "`python -m pytest -m gpu`" in plan_run.stdout
    bad = subprocess.run(
        [sys.executable, "benchmarks/gpu_owed.py", "--items", "nope"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert "unknown item(s) nope" in bad.stderr and "Traceback" not in bad.stderr


def test_the_covering_commands_run_every_item_once_within_the_budget(monkeypatch) -> None:
    commands = covering_commands(ITEMS, BUDGET_S, gpus=1)
    covered = [item.name for members, _ in commands for item in members]
    assert sorted(covered) == sorted(item.name for item in ITEMS if item.gpus == 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for members, command in commands:
        argv = shlex.split(command)
        assert argv[:2] == ["python", "benchmarks/gpu_owed.py"]
        args = gpu_owed.parse_arguments(argv[2:])
        fates = plan(args.selected, args.budget_minutes * 60, gpus=1)
        taken = [item.name for item in args.selected if fates[item.name] is None]
        assert taken == [item.name for item in members], command  # the command runs exactly its items
    assert commands[0][1] == "python benchmarks/gpu_owed.py"  # the default run comes first
    assert "ddp-2-gpus" in [
        item.name for members, _ in covering_commands(ITEMS, BUDGET_S, 2) for item in members
    ]


def test_the_dry_run_ends_with_what_is_owed(monkeypatch, capsys) -> None:
    """What is owed lives in the script: every item RESULTS.md holds no figures of, with its command, and the
    runner commands that cover them name real items."""
    assert set(gpu_owed.MEASURED) | set(gpu_owed.STILL_OWED) | set(gpu_owed.WHY_OWED) <= set(BY_NAME)
    assert set(gpu_owed.STILL_OWED) <= set(gpu_owed.MEASURED)
    assert not set(gpu_owed.WHY_OWED) & set(gpu_owed.MEASURED)
    status, out, _ = run_main(["--dry_run"], monkeypatch, capsys)
    assert status == 0
    owed = out[out.index("Owed: ") :]
    for item in ITEMS:
        rows = [line for line in owed.splitlines() if line.startswith(f"| {item.name} |")]
        if item.name in gpu_owed.MEASURED and item.name not in gpu_owed.STILL_OWED:
            assert not rows, item.name
        else:
            (row,) = rows
            assert f"`{item.command}`" in row
    runners = re.findall(r"^python benchmarks/gpu_owed\.py.*$", owed.split("Owed on other machines")[0], re.M)
    covered = set()
    for command in runners:
        covered |= {
            item.name for item in gpu_owed.parse_arguments([*shlex.split(command)[2:], "--dry_run"]).selected
        }
    assert covered == {item.name for item in ITEMS if gpu_owed.owed(item) and item.gpus == 1}


# The items' commands are real


def test_the_training_items_parse_and_find_their_data(shared_data: Path, tmp_path: Path) -> None:
    for item in ITEMS:
        argv = shlex.split(item.command_line(str(shared_data)))
        if "scripts/train.py" not in argv:
            continue
        if "--config_file" in argv:
            assert (REPO / argv[argv.index("--config_file") + 1]).is_file(), item.name
        arguments = argv[argv.index("scripts/train.py") + 1 :]
        options = parse_options([*arguments, "--output_dir", str(tmp_path / item.name)])
        check_inputs(options)
        assert str(options.data_dir) == str(shared_data) or "--recipe" not in arguments


@pytest.mark.slow
def test_the_benchmark_items_use_flags_their_scripts_have() -> None:
    scripts: dict[str, set[str]] = {}
    for item in ITEMS:
        argv = shlex.split(item.command)
        if argv[0] == "python" and argv[1].startswith("benchmarks/"):
            scripts.setdefault(argv[1], set()).update(part for part in argv[2:] if part.startswith("--"))
    assert set(scripts) == {
        "benchmarks/bench_training.py",
        "benchmarks/bench_decoding.py",
        "benchmarks/bench_cuda_graphs.py",
        "benchmarks/init_study.py",
    }
    for script, flags in scripts.items():
        help_text = subprocess.run(
            [sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
        assert {flag for flag in flags if not re.search(rf"{flag}\b", help_text)} == set(), script
    markers = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"gpu: ' in markers  # the marker `python -m pytest -m gpu` selects


def test_a_data_folder_given_reaches_the_items_that_read_multi30k() -> None:
    assert BY_NAME["multi30k"].command_line("/data") == BY_NAME["multi30k"].command + " --data_dir /data"
    assert BY_NAME["training-base-bf16"].command_line("/d a").endswith("--data '/d a'/multi30k")
    assert BY_NAME["init-base-normal-1e-3"].command_line("/data").endswith("--data-dir /data")
    assert BY_NAME["main-job"].command_line("/data") == BY_NAME["main-job"].command  # Tatoeba is embedded
    assert BY_NAME["training-big-bf16"].command_line("/data") == BY_NAME["training-big-bf16"].command


# Real runs of items (small commands standing in for the GPU ones)


def python_item(name: str, code: str, budget_s: int, read, targets=(), after=None) -> Item:
    return Item(name, f"python -c {shlex.quote(code)}", "test", "test", budget_s, read, targets, after=after)


RUNNABLE = [
    python_item(
        "scores",
        "print('step 50/100  loss 4.1'); print('trained in 5.1 min'); print('test sacreBLEU: 38.40  (sig)')",
        60,
        train_figures,
        (Target("test sacreBLEU", at_least=38.0),),
    ),
    python_item("stuck", "import time; print('step 1/9', flush=True); time.sleep(120)", 2, train_figures, ()),
    python_item(
        "collapses",
        "import sys; print('error: Training collapsed: at step 600 ...', file=sys.stderr); sys.exit(3)",
        60,
        train_figures,
        (Target("test sacreBLEU", at_least=38.0),),
    ),
    python_item("after-collapse", "print('never')", 60, train_figures, after="collapses"),
]


def test_items_run_alone_within_their_budgets_and_their_logs_are_read(tmp_path: Path) -> None:
    fates = plan(RUNNABLE, BUDGET_S, gpus=1)
    outcomes = run_plan(RUNNABLE, fates, gpu_owed.DEFAULT_DATA_DIR, tmp_path)
    scores, stuck, collapses, after = (outcomes[item.name] for item in RUNNABLE)
    assert scores.status == "ran"
    assert values(scores.figures) == {"test sacreBLEU": 38.4, "trained": 5.1}
    assert stuck.status == "failed: out of its budget, stopped after 2 s"
    assert 2 <= stuck.seconds < 30  # stopped, not waited for
    assert (tmp_path / "stuck.log").read_text() == "step 1/9\n"
    assert collapses.status == "failed: exit 3: error: Training collapsed: at step 600 ..."
    assert after.status == "skipped: needs collapses to succeed first"
    table = results_table(RUNNABLE, outcomes, gpu_owed.DEFAULT_DATA_DIR)
    rows = {line.split(" | ")[0][2:]: line for line in table.splitlines()[2:]}
    assert rows["scores"].endswith("test sacreBLEU 38.40; trained 5.1 min | test | yes |")
    assert f"see log {tmp_path / 'stuck.log'}" in rows["stuck"]
    assert f"see log {tmp_path / 'collapses.log'}" in rows["collapses"] and rows["collapses"].endswith(
        "| no |"
    )
    assert rows["after-collapse"].endswith("| – | test | – |")


def test_a_real_run_writes_its_table_and_exits_1_on_a_failure(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(gpu_owed, "ITEMS", tuple(RUNNABLE[:1] + RUNNABLE[2:]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    status = gpu_owed.main(["--log_dir", str(tmp_path), "--data_dir", "/nowhere"])  # no item reads data
    out = capsys.readouterr().out
    assert status == 1
    assert "[1/3] scores: ran" in out and "[2/3] collapses: failed: exit 3" in out
    assert "[3/3] after-collapse: skipped: needs collapses to succeed first" in out
    assert (tmp_path / "table.md").read_text().strip() in out
    assert '"status": "ran"' in (tmp_path / "results.json").read_text()
    with pytest.raises(SystemExit) as refused:  # the folder now holds files: nothing is overwritten
        gpu_owed.main(["--log_dir", str(tmp_path)])
    assert refused.value.code == 2
    assert "already holds files" in capsys.readouterr().err


def test_a_real_run_needs_multi30k_before_anything_runs(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(SystemExit) as refused:
        gpu_owed.main(["--items", "multi30k", "--data_dir", str(tmp_path), "--log_dir", str(tmp_path / "l")])
    assert refused.value.code == 2
    assert "multi30k/train.en not found, which multi30k read: pass --data_dir" in capsys.readouterr().err
    assert not (tmp_path / "l").exists()


# Figures from the commands' real output


def test_decoding_figures_agree_with_the_scripts_own_ratios() -> None:
    """Ours/Marian read from the rows equals the ratio the script printed from unrounded times (to rounding)."""
    figures = values(decoding_figures(sample("bench_decoding.txt")))
    printed = {  # "beam 4: sentences/s relative to MarianMTModel: vaswani 0.62x (latency 0.87x), ..."
        "beam 4: ours/Marian": 0.62,
        "beam 4: latency ours/Marian": 0.87,
        "beam 4: ct2 float32/Marian": 2.15,
        "beam 4: ct2 int8/Marian": 1.53,
        "beam 1: ours/Marian": 0.95,
        "beam 1: latency ours/Marian": 1.27,
        "beam 1: ct2 float32/Marian": 3.03,
        "beam 1: ct2 int8/Marian": 1.61,
    }
    assert figures.keys() == printed.keys()
    for label, value in printed.items():
        assert figures[label] == pytest.approx(value, rel=0.02), label


def test_decoding_figures_of_the_auto_precision_output_compare_like_for_like() -> None:
    """Rows named by precision: ours bfloat16 against Marian bfloat16 (its printed ratios are against Marian
    float32, so like for like is ours's printed ratio over Marian bfloat16's)."""
    figures = values(decoding_figures(sample("bench_decoding_auto.txt")))
    assert figures["beam 4: ours/Marian"] == pytest.approx(0.59 / 0.86, abs=0.02)
    assert figures["beam 4: latency ours/Marian"] == pytest.approx(1.06 / 1.14, abs=0.02)
    assert figures["beam 4: ours/Marian float32"] == pytest.approx(0.59, abs=0.02)
    assert figures["beam 1: ours/Marian"] == pytest.approx(0.77 / 0.79, abs=0.02)
    assert figures["beam 4: ct2 int8/Marian"] == pytest.approx(12.92 / 0.86, rel=0.05)  # 1.0 ms, rounded


def test_decoding_rows_on_a_gpu_keep_their_figures() -> None:
    """On CUDA the rows end with peak memory (and MFU): the same figures are read."""
    text = sample("bench_decoding_auto.txt")
    gpu = re.sub(r"(latency \(1 sentence\)\s+[\d.]+ ms)", r"\1  peak     812 MB", text)
    assert gpu != text
    assert decoding_figures(gpu) == decoding_figures(text)


def test_a_decoding_run_cut_short_shows_what_it_reached_and_points_to_the_log() -> None:
    text = sample("bench_decoding.txt")
    cut = text[: text.index("vaswani      beam 1")]  # stopped at its budget during greedy decoding
    figures = decoding_figures(cut)
    assert {figure.label for figure in figures} == {
        "beam 4: ours/Marian",
        "beam 4: latency ours/Marian",
        "beam 4: ct2 float32/Marian",
        "beam 4: ct2 int8/Marian",
    }
    assert verdict(BY_NAME["decoding-base-bf16"].targets, figures) == "no"  # 0.63× is below 5× already
    assert verdict(BY_NAME["decoding-base-bf16"].targets[2:], figures) == "?"  # greedy's figures are missing


def test_training_speed_figures_of_both_output_versions() -> None:
    assert values(training_speed_figures(sample("bench_training.txt"))) == {
        "ours/Marian": 1.11,  # "ours / Marian: 1.11× target tokens/s"
        "job/model step": 300.0,
    }
    assert values(training_speed_figures(sample("bench_training_auto.txt"))) == {
        "ours/Marian": 0.64,  # "0.66× Marian float32, 0.64× Marian bfloat16"
        "ours/Marian float32": 0.66,
        "MFU (datasheet peak)": 1.5,  # "MFU   2.7% (  1.5% of 0.5 TFLOP/s)"
        "MFU (measured peak)": 2.7,  # not the line of the peaks measured in the same turns below the rows
        "job/model step": 77.0,
    }


def test_training_speed_on_a_gpu_reads_mfu_and_memory() -> None:
    """On CUDA each row ends with its peak memory (`peak {MB:8.0f} MB`) and, with --peak_tflops, the fixed-
    precision version's only MFU is against that datasheet figure."""
    text = sample("bench_training.txt")
    gpu = text.replace("MFU n/a  peak n/a", "MFU  41.5%  peak     9000 MB", 1)
    gpu = gpu.replace("MFU n/a  peak n/a", "MFU  20.0%  peak    12000 MB", 1)
    figures = values(training_speed_figures(gpu))
    assert figures["MFU (datasheet peak)"] == 41.5
    assert figures["peak memory ours/Marian"] == pytest.approx(0.75)
    targets = BY_NAME["training-base-bf16"].targets
    assert verdict(targets, training_speed_figures(gpu)) == "no"  # 1.11× < 3×, job 300% ≥ 85%
    assert [target.met_by(training_speed_figures(gpu)) for target in targets] == [False, True, True, True]


def test_train_figures() -> None:
    figures = values(train_figures(sample("train.txt")))
    assert figures == {
        "test sacreBLEU": 0.0,
        "test tokenised BLEU": 0.0,
        "trained": 2.3,
        "checkpoints averaged": 2,
        "precision": "bf16 autocast",
    }
    assert verdict(BY_NAME["multi30k"].targets, train_figures(sample("train.txt"))) == "no"
    assert verdict(BY_NAME["launcher-fp16"].targets, train_figures(sample("train.txt"))) == "no"


def test_init_study_figures_are_the_last_probe() -> None:
    figures = init_study_figures(sample("init_study.txt"))
    assert values(figures) == {"step": 4, "loss": 8.85, "source gain": 0.0, "cross-attention entropy": 1.0}
    assert verdict(BY_NAME["init-base-normal-1e-3"].targets, figures) == "no"
    assert verdict(BY_NAME["init-base-xavier-1e-3"].targets, figures) == "–"


def test_pytest_figures() -> None:
    skipped = pytest_figures(sample("pytest_gpu_skipped.txt"))
    assert values(skipped) == {"passed": 0, "failed": 0, "skipped": 2, "errors": 0}
    assert verdict(BY_NAME["gpu-tests"].targets, skipped) == "no"  # skipped on a GPU machine is not a pass
    failed = pytest_figures(sample("pytest_failed.txt"))
    assert values(failed) == {"passed": 1, "failed": 1, "skipped": 0, "errors": 0}


def test_failure_reasons_are_the_commands_last_error_line() -> None:
    assert (
        failure_reason(sample("failure_traceback.txt"))
        == "AssertionError: Torch not compiled with CUDA enabled"
    )
    assert failure_reason(sample("failure_output_dir.txt")).startswith(
        "error: --output_dir /tmp/gpuowed/t1 already holds a run."
    )
    assert failure_reason(sample("failure_argparse.txt")) == (
        "bench_training.py: error: /nonexistent/multi30k/train.en not found: pass --data (Multi30k's folder) "
        "or --skip_job"
    )
    assert failure_reason(sample("failure_output_dir.txt"), limit=20) == "error: --output_dir…"
    assert failure_reason(sample("pytest_failed.txt")) == ""  # pytest's own summary says what failed


@pytest.mark.parametrize("name", sorted(path.name for path in SAMPLES.iterdir()))
def test_every_reader_survives_every_output(name: str) -> None:
    """A reader given another command's output (or an empty one) finds nothing of its own, and never raises."""
    readers = {
        decoding_figures: ("bench_decoding", "bench_cuda_graphs"),  # the CUDA-graph item's reader too
        training_speed_figures: "bench_training",
        train_figures: "train.txt",
        init_study_figures: "init_study",
        pytest_figures: "pytest",
    }
    for reader, own in readers.items():
        assert reader("") == []
        if not name.startswith(own):
            assert reader(sample(name)) == [], (reader.__name__, name)


def test_gpu_busy_over_the_command_and_over_the_training_loop() -> None:
    samples = [(float(t), busy) for t, busy in enumerate([0, 0, 90, 100, 95, 85, 0, 0])]  # (time s, %)
    lines = [(0.5, "joint BPE: ...\n"), (2.0, "step 50/100  loss 4.1\n"), (5.0, "step 100/100  loss 3.9\n")]
    figures = values(busy_figures(samples, lines, gpu_owed.TRAINING_PROGRESS))
    assert figures == {"GPU busy (command)": pytest.approx(370 / 8), "GPU busy (training)": 92.5}
    assert busy_figures([], lines, gpu_owed.TRAINING_PROGRESS) == []  # no nvidia-smi: no figure


# The decision run: side by side with MarianMTModel, and the defaults it recommends


def decoding_output(speeds: dict[str, tuple[float, float, float, float]]) -> str:
    """bench_decoding.py's rows, printed by its own `report`: run → (beam 4 sentences/s, beam 4 latency ms,
    greedy sentences/s, greedy latency ms), batch 64, 20 tokens."""
    import contextlib
    import io

    from bench_decoding import report

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for beams, (rate, latency) in ((4, (0, 1)), (1, (2, 3))):
            for name, figures in speeds.items():
                seconds = 64 / figures[rate]
                report(name, beams, 64, 20, seconds, figures[latency] / 1e3, 900.0, 0.2)
    return printed.getvalue()


def training_output(ours: float, marian: float, steps: int, seconds: float, loop: float, share: int) -> str:
    """bench_training.py's step rows and job lines (the format of tests/samples/gpu_owed/bench_training_auto.txt)."""
    rows = [
        ("ours bfloat16", 60.5, ours),
        ("Marian float32", 61.2, marian / 2),
        ("Marian bfloat16", 61.2, marian),
    ]
    lines = [
        f"    {name:16s} {params:7.2f}M params  step {24576 / rate * 1e3:8.1f} ms  {rate:9.0f} target tokens/s  "
        f"{100.0:7.3f} TFLOP/s  MFU  20.0% ( 10.0% of 989 TFLOP/s)  peak     9000 MB"
        for name, params, rate in rows
    ]
    lines += [
        f"(b) job on Multi30k, preset base, BPE 37000, 8192 tokens per batch, {steps} steps in {seconds:.1f} s "
        "(start-up included)",
        f"    job loop {loop:9.0f} target tokens/s (log windows after the first)",
        f"    model step alone on the same loader's batches {loop * 100 / share:9.0f} target tokens/s",
        f"    job / model step: {share}%",
    ]
    return "\n".join(lines) + "\n"


FAST_GRAPHS = {
    PLAIN: decoding_output({"ours bfloat16": (1000, 120, 1500, 90), "marian bfloat16": (900, 110, 1400, 80)}),
    GRAPHS: decoding_output({"ours bfloat16": (3000, 30, 4000, 25), "marian bfloat16": (2500, 35, 3000, 30)}),
    CT2: decoding_output(
        {
            "ours bfloat16": (1000, 120, 1500, 90),
            "marian bfloat16": (900, 110, 1400, 80),
            "ct2 bfloat16": (6000, 15, 8000, 10),
            "ct2 int8": (5000, 18, 7000, 12),
        }
    ),
    EAGER: training_output(300_000, 250_000, 100, 60.0, 230_000, 77),
    COMPILED: training_output(390_000, 250_000, 100, 80.0, 380_000, 95),
}


def test_the_decision_readers_read_the_benchmarks_real_output() -> None:
    speeds = decoding_speeds(sample("bench_decoding_auto.txt"))
    assert speeds[("ours bfloat16", 4)] == (94.8, 14.6) and speeds[("ct2 int8", 1)] == (2616.4, 0.5)
    assert len(speeds) == 10
    auto = training_speeds(sample("bench_training_auto.txt"))
    assert auto.step == {
        "ours bfloat16": 855,
        "Marian float32": 1286,
        "ours float32": 1185,
        "Marian bfloat16": 1339,
    }
    job = (auto.job_batch_tokens, auto.job_steps, auto.job_seconds, auto.job_tokens_per_s, auto.job_share)
    assert job == (512, 6, 0.9, 5126, 77)
    assert training_speeds(training_output(3e5, 2.5e5, 100, 60.0, 2.3e5, 77)).step["Marian bfloat16"] == 2.5e5


def test_the_side_by_side_table_has_a_row_per_path_and_measure() -> None:
    text = decision(FAST_GRAPHS, dict.fromkeys(DECIDING, "ran"))
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ") and "---" not in line][
        1:
    ]
    table = {(row[0][2:], row[1]): (row[2], row[3], row[4].rstrip(" |")) for row in rows}
    assert table[("decoding beam 4, batch (sentences/s)", "ours, plain generate()")] == (
        "1000",
        "900",
        "1.11×",
    )
    # each path against MarianMTModel of its own run (the CUDA-graph item's: 2500 sentences/s, 35 ms)
    assert table[("decoding beam 4, batch (sentences/s)", "ours, CUDA graphs")] == ("3000", "2500", "1.20×")
    assert table[("decoding beam 4, 1 sentence (ms)", "ours, CUDA graphs")] == ("30", "35", "1.17×")  # lower
    assert table[("decoding greedy, batch (sentences/s)", "CTranslate2 bfloat16")] == (
        "8000",
        "1400",
        "5.71×",
    )
    assert table[("training step (target tokens/s)", "compiled (--torch_compile)")] == (
        "390000",
        "250000",
        "1.56×",
    )
    assert table[("training job loop (target tokens/s)", "eager")] == (
        "230000 (77% of the step alone)",
        "250000",
        "0.92×",
    )
    assert table[("training job, 100 steps, compiling included (s)", "compiled (--torch_compile)")][0] == "80"
    paths = {"ours, plain generate()", "ours, CUDA graphs", "CTranslate2 bfloat16", "CTranslate2 int8"}
    for measure in ("beam 4, batch", "beam 4, 1 sentence", "greedy, batch", "greedy, 1 sentence"):
        assert {path for found, path in table if found.startswith(f"decoding {measure}")} == paths
    assert len(rows) == 4 * 4 + 3 * 2


def test_the_recommendations_follow_the_timings() -> None:
    text = decision(FAST_GRAPHS, dict.fromkeys(DECIDING, "ran"))
    assert (
        "- training job on CUDA: eager (100 steps in 60 s eager, 80 s compiled, compiling included)" in text
    )
    # 8192 / 230k s a step eager, 8192 / 380k compiled; compiled's fixed seconds are 21.4 more: about 1,523 steps
    assert (
        "\n  the compiled loop is 1.65× eager's: --torch_compile pays in jobs longer than about 1,523 steps"
        in text
    )
    assert "- decoding default on CUDA: CUDA graphs (beam 4: 1000 → 3000 sentences/s" in text
    assert "- engine: CTranslate2 bfloat16 is faster than the default PyTorch path (2.00× at beam 4" in text
    assert "target: decoding ≥ 3× Marian's sentences/s at batch 64, beam 4: 1.20 (missed)" in text
    assert "one sentence, beam 4: 1.17 (missed)" in text
    assert "CTranslate2 (float) ≥ 5× Marian at batch 64, beam 4: 6.67 (met)" in text
    assert "the base job ≥ 1.5× Marian's step rate: 1.52 (met)" in text  # the compiled loop, 380k / 250k
    assert "the job at ≥ 90% of the step alone: 95.00 (met)" in text
    # Compiling that pays within the job; CUDA graphs slower for one sentence; no CTranslate2 run.
    slower_single = decoding_output(
        {"ours bfloat16": (3000, 150, 4000, 25), "marian bfloat16": (2500, 35, 3000, 30)}
    )
    changed = FAST_GRAPHS | {
        COMPILED: training_output(390_000, 250_000, 100, 50.0, 380_000, 95),
        GRAPHS: slower_single,
    }
    del changed[CT2]
    statuses = dict.fromkeys(DECIDING, "ran") | {CT2: "skipped: needs ctranslate2"}
    text = decision(changed, statuses)
    assert "- training job on CUDA: --torch_compile (100 steps in 60 s eager, 50 s compiled" in text
    assert "pays in jobs longer" not in text  # it paid within the measured job
    assert (
        "- decoding default on CUDA: plain generate() (beam 4: 1000 → 3000 sentences/s at batch 64, 120 → 150 ms"
        in text
    )
    assert (
        "engine:" not in text
        and "not measured: decoding-base-ctranslate2 (skipped: needs ctranslate2)" in text
    )
    assert "CTranslate2 (float) ≥ 5× Marian at batch 64, beam 4: not measured" in text
    assert "target: decoding ≥ 3× Marian's sentences/s at batch 64, beam 4: 1.11 (missed)" in text  # plain's
    # Nothing measured: nothing decided.
    nothing = decision({}, dict.fromkeys(DECIDING, "failed: out of its budget, stopped after 90 s"))
    assert "(nothing measured)" in nothing and "training job: not decided (decide-training-eager" in nothing
    assert "decoding default: not decided (decoding-base-bf16 has no figures)" in nothing


def test_cuda_graphs_become_the_default_only_where_they_pay_for_their_compiling() -> None:
    """The H200's CUDA-graph run (tests/samples/gpu_owed/bench_cuda_graphs_h200.txt): faster than its own plain
    path at beam 4 for batches and for one sentence, but its 38.1 s of compiling pay only after about 39,000
    sentences, so plain generate() stays the default; the same timings with compiling of 0.5 s make them it."""
    measured = sample("bench_cuda_graphs_h200.txt")
    outputs = {PLAIN: FAST_GRAPHS[PLAIN], GRAPHS: measured}
    text = decision(outputs, dict.fromkeys(DECIDING, "ran"))
    # against its own run's plain path (449.4 sentences/s, 118.5 ms), not the plain item's 1000 and 120
    assert "- decoding default on CUDA: plain generate() (beam 4: 449.4 → 794.7 sentences/s" in text
    assert (
        "compiling took 38.1 s, 0.97 s saved per 1,000 sentences: --cuda_graphs pays after about 39,407"
        in text
    )
    assert "| decoding beam 4, batch (sentences/s) | ours, CUDA graphs | 794.7 | 474.1 | 1.68× |" in text
    cheap = re.sub(r"\| [\d.]+ \| yes \|$", "| 0.1 | yes |", measured, flags=re.M)
    assert cheap != measured
    text = decision({PLAIN: FAST_GRAPHS[PLAIN], GRAPHS: cheap}, dict.fromkeys(DECIDING, "ran"))
    assert (
        "- decoding default on CUDA: CUDA graphs (beam 4: 449.4 → 794.7" in text and "pays after" not in text
    )


def test_the_default_run_prints_the_decision_in_a_tiny_mode(monkeypatch, capsys, tmp_path) -> None:
    """The decision run end to end with small commands standing in for the GPU ones (printing synthetic figures
    in the benchmarks' formats): the item table, then the side-by-side table and the recommendations."""
    stand_ins = tuple(
        python_item(name, f"import sys; sys.stdout.write({FAST_GRAPHS[name]!r})", 60, decoding_figures)
        for name in DECIDING
    )
    monkeypatch.setattr(gpu_owed, "ITEMS", stand_ins)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert gpu_owed.main(["--log_dir", str(tmp_path), "--data_dir", "/nowhere"]) == 0
    out = capsys.readouterr().out
    assert all(f"[{index}/5] {name}: ran" in out for index, name in enumerate(DECIDING, 1))
    decided = out[out.index("Side by side with MarianMTModel") :]
    assert "| decoding beam 4, batch (sentences/s) | ours, CUDA graphs | 3000 | 2500 | 1.20× |" in decided
    assert "- decoding default on CUDA: CUDA graphs" in decided
    assert (tmp_path / "decision.md").read_text().strip() in decided


@pytest.mark.slow
def test_the_decision_reads_the_benchmarks_as_they_print_now(tmp_path) -> None:
    """The deciding benchmarks run for real in miniature on the CPU (decoding with CTranslate2, the training step
    without the job): the decision table gets their rows, so a changed or broken benchmark shows here."""
    # a small roofline product: a CPU without bfloat16 instructions takes a minute for one of the default 2048
    tiny = [
        "--preset",
        "tiny",
        "--vocab_size",
        "1000",
        "--dtype",
        "bfloat16",
        "--repeats",
        "1",
        "--peak_size",
        "64",
    ]
    commands = {
        PLAIN: ["benchmarks/bench_decoding.py", *tiny, "--batch", "4", "--new_tokens", "4", "--ctranslate2"],
        EAGER: ["benchmarks/bench_training.py", *tiny, "--batch", "4", "--length", "8", "--skip_job"],
    }
    outputs = {}
    for item, argv in commands.items():
        run = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        outputs[item] = run.stdout
    outputs[CT2] = outputs[PLAIN]  # its CTranslate2 rows
    text = decision(outputs, dict.fromkeys(DECIDING, "ran"))
    measures = {tuple(line.split(" | ")[:2]) for line in text.splitlines() if line.startswith("| ")}
    assert ("| training step (target tokens/s)", "eager") in measures
    for path in ("ours, plain generate()", "CTranslate2 float32", "CTranslate2 int8"):
        for cell in ("beam 4, batch (sentences/s)", "greedy, 1 sentence (ms)"):
            assert (f"| decoding {cell}", path) in measures, (cell, path)
    assert "decoding default: not decided (decoding-base-compiled-bf16 has no figures)" in text
