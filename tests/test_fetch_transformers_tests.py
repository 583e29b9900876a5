"""tests/fetch_transformers_tests.py: transformers' tests extracted from an sdist as their own package, with our
stand-ins, written whole and reused only when whole; and tests/test_transformers_common.py without them."""

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests import fetch_transformers_tests as fetcher

REPO = Path(__file__).resolve().parents[1]
VERSION = "9.9.9"  # no transformers has it: nothing here can be the real cache's entry
SDIST_FILES = {
    "tests/test_modeling_common.py": "from .exporters.test_export import ExportTesterMixin\n"
    "from .generation.test_utils import GenerationTesterMixin\n",
    "tests/test_configuration_common.py": "from .utils.test_configuration_utils import config_common_kwargs\n",
    "tests/models/marian/test_modeling_marian.py": "MARIAN = True\n",
    "src/transformers/__init__.py": "NOT_A_TEST = True\n",
}


def write_sdist(path: Path, files: dict[str, str]) -> Path:
    """A .tar.gz laid out as transformers' sdist: every file under transformers-VERSION/."""
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(f"transformers-{VERSION}/{name}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return path


@pytest.fixture
def downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The cache in tmp_path/cache, and pip's download replaced by a copy of tmp_path/sdist.tar.gz (written by
    the test); the list collects each download's folder."""
    monkeypatch.setenv(fetcher.CACHE_VARIABLE, str(tmp_path / "cache"))
    folders: list[Path] = []

    def download(version: str, folder: Path) -> Path:
        folders.append(folder)
        sdist = folder / f"transformers-{version}.tar.gz"
        sdist.write_bytes((tmp_path / "sdist.tar.gz").read_bytes())
        return sdist

    monkeypatch.setattr(fetcher, "download_sdist", download)
    return folders


@pytest.mark.slow  # a fresh interpreter that imports transformers' tests
def test_the_sdists_tests_become_their_own_package_with_our_stand_ins_reused_only_while_whole(
    tmp_path: Path, downloads: list[Path]
) -> None:
    write_sdist(tmp_path / "sdist.tar.gz", SDIST_FILES)
    entry = fetcher.fetch(VERSION)
    assert entry == tmp_path / "cache" / VERSION
    package = entry / fetcher.PACKAGE
    assert (package / "models/marian/test_modeling_marian.py").read_text() == "MARIAN = True\n"
    assert not (package / "src").exists() and not (entry / "src").exists()  # only tests/
    assert all(
        (folder / "__init__.py").is_file() for folder in (package, *package.rglob("*")) if folder.is_dir()
    )
    assert fetcher.entry_problem(entry) is None
    assert [path.name for path in (tmp_path / "cache").iterdir() if "partial" in path.name] == []

    # The fetched modules import (their relative imports reach the stand-ins), under their own package name;
    # ConfigTester's copy of the uncopied values raises, naming why.
    probe = (
        "import copy, transformers_tests.test_modeling_common as m, transformers_tests.test_configuration_common as c\n"
        "assert m.GenerationTesterMixin.__module__ == 'transformers_tests.generation.test_utils'\n"
        "copy.deepcopy(c.config_common_kwargs)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], cwd=entry, capture_output=True, text=True, timeout=60, check=False
    )
    assert "NotImplementedError: config_common_kwargs is a stand-in" in completed.stderr

    assert fetcher.fetch(VERSION) == entry and len(downloads) == 1  # whole: reused, nothing downloaded

    damaged = package / "test_modeling_common.py"
    damaged.write_text(damaged.read_text().upper())  # the same size: found by its SHA-256
    assert "test_modeling_common.py is damaged" in fetcher.entry_problem(entry)
    fetcher.fetch(VERSION)  # rebuilt
    assert len(downloads) == 2 and fetcher.entry_problem(entry) is None
    assert (package / "test_modeling_common.py").read_text() == SDIST_FILES["tests/test_modeling_common.py"]

    stand_in = package / "generation/test_utils.py"
    stand_in.write_text(stand_in.read_text() + "# an older stand-in\n")
    fetcher.write_manifest(entry)  # whole by its manifest, but not what the script writes now
    assert fetcher.entry_problem(entry) == f"{stand_in} is an older stand-in than this script writes"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({**SDIST_FILES, "tests/../../outside.py": "x = 1\n"}, "a path outside its tests/: not extracted"),
        ({"tests/test_modeling_common.py": "\n"}, "holds no tests/test_configuration_common.py"),
    ],
    ids=["a member outside tests/", "a needed module missing"],
)
def test_an_sdist_that_cannot_serve_is_refused_and_leaves_nothing(
    tmp_path: Path, downloads: list[Path], files: dict[str, str], message: str
) -> None:
    write_sdist(tmp_path / "sdist.tar.gz", files)
    with pytest.raises(fetcher.FetchError, match=message):
        fetcher.fetch(VERSION)
    assert [path.name for path in (tmp_path / "cache").iterdir()] == [f".{VERSION}.lock"]
    assert not (tmp_path / "outside.py").exists() and not downloads[0].exists()


@pytest.mark.slow  # a fresh interpreter that imports the package
def test_without_a_package_index_the_command_says_so_and_writes_nothing(tmp_path: Path) -> None:
    environment = {**os.environ, fetcher.CACHE_VARIABLE: str(tmp_path / "cache"), "PIP_NO_INDEX": "1"}
    completed = subprocess.run(
        [sys.executable, "tests/fetch_transformers_tests.py"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert "error: pip could not download the sdist of transformers" in completed.stderr
    assert "run this where pip reaches a package index" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert [path.name for path in (tmp_path / "cache").iterdir() if not path.name.endswith(".lock")] == []


@pytest.mark.slow  # two pytest runs in fresh interpreters
@pytest.mark.parametrize(("required", "returncode", "outcome"), [("", 0, "1 skipped"), ("1", 1, "1 failed")])
def test_without_the_fetched_tests_the_common_tests_skip_naming_the_fix_or_fail_where_required(
    tmp_path: Path, required: str, returncode: int, outcome: str
) -> None:
    environment = {
        **os.environ,
        fetcher.CACHE_VARIABLE: str(tmp_path / "empty"),
        "VASWANI_REQUIRE_TRANSFORMERS_TESTS": required,
    }
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_transformers_common.py"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == returncode, completed.stdout[-3000:]
    assert outcome in completed.stdout.splitlines()[-1]
    assert f"fetch them with `{fetcher.FETCH_COMMAND}`" in completed.stdout
