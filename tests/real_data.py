"""Where the tests find the real corpora (Multi30k, WMT14 newstest), and what their absence means: the one place
that decides it (tests/conftest.py re-exports this module's fixture and hook).

A fresh clone has no ../shared/data beside it: the tests that read it skip, each naming the missing path, and the
run ends with one line counting them. CI sets VASWANI_REQUIRE_REAL_DATA=1 (.ci/run), which turns the absence into
a failure of each of those tests: there a skip would hide untested code.
"""

import os
from pathlib import Path

import pytest

# ../shared/data beside the checkout, as the recipes' data_dir default reads it (recipes/defaults.yaml)
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
DIR_VARIABLE = "VASWANI_REAL_DATA_DIR"  # the corpora elsewhere
REQUIRE = "VASWANI_REQUIRE_REAL_DATA"
SKIP_REASON = "real-data test"  # starts every skip's reason: the summary counts the skips by it


def real_data_dir() -> Path:
    return Path(os.environ.get(DIR_VARIABLE) or DEFAULT_DIR)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real corpora (research-only: read, never copied into the repo); a skip, or where required a failure,
    naming the missing folder."""
    folder = real_data_dir()
    if folder.is_dir():
        return folder
    message = (
        f"{SKIP_REASON}: {folder} not found (the Multi30k and WMT14 corpora; {DIR_VARIABLE} points elsewhere)"
    )
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{message} ({REQUIRE}=1)", pytrace=False)
    pytest.skip(message)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line at the end of the run: how many tests skipped for want of the corpora, and where they were
    looked for."""
    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple) and SKIP_REASON in report.longrepr[2]
    ]
    if skipped:
        terminalreporter.write_line(
            f"{len(skipped)} real-data tests skipped: {real_data_dir()} not found "
            f"(put the corpora there or set {DIR_VARIABLE}; CI sets {REQUIRE}=1)",
            yellow=True,
        )
