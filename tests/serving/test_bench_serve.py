"""benchmarks/bench_serve.py end to end in miniature: the real servers (torch and CTranslate2) under a few
seconds of load from wrk's clients, on the small sample model in float32; its printed rows parse and hold what
the serving targets need (sentences/s, p50/p95/p99, errors, the ratios to offline `translate()`,
`translate_batch` and offline decoding at the batch each load can form, one client's p95 against one-sentence
calls' p95, the RSS growth, the soak), and the served translations are offline decoding's. The figures themselves
are measured on a quiet machine (benchmarks/RESULTS.md)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serving.server_process import ENV, REPO, sample_folder

NUMBER = r"(\d+(?:\.\d+)?(?:e[+-]\d+)?)"
LOAD_ROW = re.compile(
    rf"^\| (torch|ctranslate2) \| (sentences|paragraphs) \| (\d+) \| {NUMBER} \| {NUMBER} \| {NUMBER} \| "
    rf"{NUMBER} \| (\d+) \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER}? \|$"
)
RSS_LINE = re.compile(
    rf"^(torch|ctranslate2): server RSS {NUMBER} MB after its warm-up, {NUMBER} MB after the loads "
    rf"\(([+-]\d+\.\d)%\), peak {NUMBER} MB \(both processes\)$"
)
SOAK_ROW = re.compile(
    rf"^\| (torch|ctranslate2) \| 0\.05 \| 2 \| {NUMBER} \| (\d+) \| {NUMBER} \| {NUMBER} \| ([+-]\d+\.\d)% \|$"
)
OFFLINE_LINE = re.compile(
    rf"^(torch|ctranslate2): offline {NUMBER} sentences/s, one sentence p50 {NUMBER} s p95 {NUMBER} s; in "
    rf"batches of 1: {NUMBER}, 2: {NUMBER}, 3: {NUMBER}, 6: {NUMBER}$"
)
CHECKED = re.compile(
    r"^(torch|ctranslate2) (sentences|paragraphs): (\d+) of (\d+) served translations identical"
)


@pytest.mark.slow
def test_the_serving_benchmark_runs_in_miniature_and_prints_what_its_targets_need(tmp_path: Path) -> None:
    folder = sample_folder(tmp_path / "model")
    command = [sys.executable, "benchmarks/bench_serve.py", "--model", str(folder), "--engines", "torch"]
    command += [
        "ctranslate2",
        "--clients",
        "1",
        "2",
        "--seconds",
        "2",
        "--sentences",
        "12",
    ]
    command += ["--dtype", "float32", "--device", "cpu", "--soak_minutes", "0.05", "--soak_clients", "2"]
    env = {**ENV, "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # conversions cached there
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    print(completed.stdout)  # shown when an assertion fails
    assert lines[0].startswith("12 Tatoeba sentences (random, ")
    checked = [match.groups() for line in lines if (match := CHECKED.match(line))]
    assert len(checked) == 4  # each engine, each workload
    for _, _, same, total in checked:
        assert int(total) > 0 and int(same) >= int(total) - 1  # a near-tie may round the other way
    offline = {
        match[1]: [float(value) for value in match.groups()[1:]]
        for line in lines
        if (match := OFFLINE_LINE.match(line))
    }
    assert set(offline) == {"torch", "ctranslate2"}
    assert all(value > 0 for values in offline.values() for value in values)
    assert all(p50 <= p95 for _, p50, p95, *_ in offline.values())

    rows = [match.groups() for line in lines if (match := LOAD_ROW.match(line))]
    assert sorted((engine, workload, int(clients)) for engine, workload, clients, *_ in rows) == sorted(
        (engine, workload, clients)
        for engine in ("torch", "ctranslate2")
        for workload in ("sentences", "paragraphs")
        for clients in (1, 2)
    )
    for _, _, clients, rate, p50, p95, p99, errors, to_translate, to_batch, at_batch, to_single in rows:
        assert float(rate) > 0 and float(p50) <= float(p95) <= float(p99)
        assert int(errors) == 0  # nothing refused, nothing lost
        assert float(to_translate) > 0 and float(to_batch) > 0 and float(at_batch) > 0
        assert (to_single is not None) == (clients == "1")

    rss = {match[1]: match.groups()[1:] for line in lines if (match := RSS_LINE.match(line))}
    assert set(rss) == {"torch", "ctranslate2"}
    for start, end, change, peak in rss.values():
        assert 0 < float(start) <= float(peak) and float(end) <= float(peak)
        growth = 100 * (float(end) - float(start)) / float(start)  # of the printed MB, each rounded to 1
        assert float(change) == pytest.approx(growth, abs=100 / float(start) + 0.06)
    soaks = [match.groups() for line in lines if (match := SOAK_ROW.match(line))]
    assert sorted(soak[0] for soak in soaks) == ["ctranslate2", "torch"]
    assert all(float(soak[1]) > 0 and int(soak[2]) == 0 for soak in soaks), soaks
