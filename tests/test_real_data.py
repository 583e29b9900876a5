"""The README's test command on a fresh clone, without ../shared/data beside it: the real-data tests skip,
named and counted, and where CI requires them (VASWANI_REQUIRE_REAL_DATA=1) they fail."""

from pathlib import Path

import pytest

from tests.real_data import DIR_VARIABLE, REQUIRE

pytest_plugins = ["pytester"]
# the inner run's plugin: this module; already imported here, so pytest cannot rewrite its asserts (it has none)
PLUGIN = ("-p", "tests.real_data", "-W", "ignore::pytest.PytestAssertRewriteWarning")

READS_THE_CORPORA = """
def test_reads_multi30k(shared_data):
    assert (shared_data / "multi30k" / "val.en").is_file()

def test_reads_newstest(shared_data):
    assert (shared_data / "wmt14-newstest").is_dir()

def test_needs_no_corpus():
    pass
"""


@pytest.fixture
def without_the_corpora(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run of tests that read the corpora, with the corpora's folder pointed at one that does not exist."""
    missing = pytester.path / "nowhere" / "data"
    monkeypatch.setenv(DIR_VARIABLE, str(missing))
    pytester.makepyfile(READS_THE_CORPORA)
    return missing


def test_without_the_corpora_their_tests_skip_naming_the_folder_and_are_counted(
    pytester: pytest.Pytester, without_the_corpora: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REQUIRE, raising=False)
    result = pytester.runpytest_inprocess(*PLUGIN, "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    assert result.ret == 0
    skips = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert len(skips) == 2 and all(
        f"real-data test: {without_the_corpora} not found" in line for line in skips
    )
    result.stdout.fnmatch_lines([f"2 real-data tests skipped: {without_the_corpora} not found*"])


def test_where_required_missing_corpora_fail_their_tests(
    pytester: pytest.Pytester, without_the_corpora: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REQUIRE, "1")
    result = pytester.runpytest_inprocess(*PLUGIN)
    result.assert_outcomes(passed=1, errors=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*real-data test: {without_the_corpora} not found*{REQUIRE}=1*"])
    result.stdout.no_fnmatch_line("*real-data tests skipped*")


def test_with_the_corpora_their_tests_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    corpora = pytester.path / "data"
    (corpora / "multi30k").mkdir(parents=True)
    (corpora / "multi30k" / "val.en").write_text("A dog runs.\n", encoding="utf-8")
    (corpora / "wmt14-newstest").mkdir()
    monkeypatch.setenv(DIR_VARIABLE, str(corpora))
    monkeypatch.setenv(REQUIRE, "1")
    pytester.makepyfile(READS_THE_CORPORA)
    result = pytester.runpytest_inprocess(*PLUGIN)
    result.assert_outcomes(passed=3)
    result.stdout.no_fnmatch_line("*real-data tests skipped*")
