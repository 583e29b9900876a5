"""Fetch transformers' own common model tests for tests/test_transformers_common.py.

    python tests/fetch_transformers_tests.py

transformers' wheel ships no tests; its sdist on PyPI holds tests/test_modeling_common.py,
tests/test_configuration_common.py and their siblings, but not three modules they import. This downloads the sdist
of the installed transformers version with pip (a package index is needed, nothing else), extracts its tests/ as
the package `transformers_tests` (under its own name, so that it cannot be taken for this repository's `tests`)
into .cache/transformers-tests/VERSION/ (VASWANI_TRANSFORMERS_TESTS_CACHE names another folder for VERSION/), adds
stand-ins of this repository's own for the three missing modules, and writes the folder whole with a manifest. A
later run reuses the folder only when the manifest proves it whole.

Exit status: 0 when the tests are in place (their folder is printed), 2 when they cannot be fetched or written.
"""

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from filelock import FileLock

from vaswani_transformer.cli.command import command
from vaswani_transformer.files.manifests import discard_damaged_entry, manifest_problem, write_manifest
from vaswani_transformer.files.partials import remove_stale_partials
from vaswani_transformer.files.paths import check_cache_folder
from vaswani_transformer.files.writing import folder_written_whole

CACHE_VARIABLE = "VASWANI_TRANSFORMERS_TESTS_CACHE"
DEFAULT_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "transformers-tests"
PACKAGE = "transformers_tests"  # the import name of the fetched tests/ (in CACHE/VERSION/)
FETCH_COMMAND = "python tests/fetch_transformers_tests.py"
# The top-level modules tests/test_transformers_common.py imports: the sdist must hold them.
NEEDED = ("test_modeling_common.py", "test_configuration_common.py")

# Modules the sdist lacks but its tests import, each replaced by a stand-in of our own (never upstream's text).
STAND_INS = {
    "generation/test_utils.py": '''"""Stand-in written by tests/fetch_transformers_tests.py (not transformers' file, which the sdist lacks).

test_modeling_common.py imports GenerationTesterMixin from here, and checks only that a generative model's tester
inherits it. Empty: transformers' generate() tests do not run (the package's own tests cover its decoding).
"""


class GenerationTesterMixin:
    """No tests: transformers' generate() tests are not in its sdist."""
''',
    "exporters/test_export.py": '''"""Stand-in written by tests/fetch_transformers_tests.py (not transformers' file, which the sdist lacks).

test_modeling_common.py's ModelTesterMixin inherits ExportTesterMixin from here. Empty: transformers' torch.export,
ONNX and ExecuTorch tests (all @slow upstream) do not run (the package's ONNX export has its own tests).
"""


class ExportTesterMixin:
    """No tests: transformers' export tests are not in its sdist."""
''',
    "utils/test_configuration_utils.py": '''"""Stand-in written by tests/fetch_transformers_tests.py (not transformers' file, which the sdist lacks).

test_configuration_common.py imports config_common_kwargs from here: transformers' chosen values for the generic
config arguments, which ConfigTester.check_config_arguments_init (and run_common_tests, which calls it) checks a
config keeps. Those values are not copied, so that check cannot run: using them raises, rather than checking
nothing.
"""


class NotCopied(dict):
    """Raises when ConfigTester copies it, naming why."""

    def __deepcopy__(self, memo: dict) -> dict:
        raise NotImplementedError(
            "config_common_kwargs is a stand-in: transformers' values are not in its sdist and not copied; "
            "call ConfigTester's other checks one by one instead of check_config_arguments_init/run_common_tests"
        )


config_common_kwargs = NotCopied()
''',
}


class FetchError(Exception):
    """The tests cannot be fetched, said with the fix."""


def installed_version() -> str:
    return importlib.metadata.version("transformers")


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_VARIABLE) or DEFAULT_CACHE)


def cache_entry(version: str) -> Path:
    """The folder that holds the fetched tests of transformers `version` (the package PACKAGE inside it)."""
    return cache_root() / version


def entry_problem(entry: Path) -> str | None:
    """What is wrong with a fetched folder, naming the file; None when its manifest proves it whole and its
    stand-ins are the ones this script writes now."""
    if not entry.is_dir():
        return f"{entry} does not exist"
    problem = manifest_problem(entry, verify_hashes=True)
    if problem is not None:
        return problem
    for name, text in STAND_INS.items():
        if (entry / PACKAGE / name).read_text(encoding="utf-8") != text:
            return f"{entry / PACKAGE / name} is an older stand-in than this script writes"
    return None


def download_sdist(version: str, folder: Path) -> Path:
    """transformers `version`'s sdist, downloaded by pip into `folder`."""
    pip = [sys.executable, "-m", "pip", "download", f"transformers=={version}", "--no-binary", ":all:"]
    completed = subprocess.run(
        [*pip, "--no-deps", "--quiet", "--dest", str(folder)], capture_output=True, text=True
    )
    if completed.returncode != 0:
        said = " ".join((completed.stderr or completed.stdout).split())[-600:]
        raise FetchError(
            f"pip could not download the sdist of transformers {version} ({said}): run this where pip reaches "
            "a package index."
        )
    sdist = folder / f"transformers-{version}.tar.gz"
    if not sdist.is_file():
        found = ", ".join(path.name for path in folder.iterdir()) or "nothing"
        raise FetchError(
            f"pip downloaded {found}, not {sdist.name}: see what `pip download transformers=={version} "
            "--no-binary :all: --no-deps` gives by hand."
        )
    return sdist


def extract_tests(sdist: Path, version: str, package: Path) -> None:
    """The sdist's tests/ tree, regular files only, into the folder `package`, made an importable package (the
    sdist has no __init__.py files), with the stand-ins."""
    prefix = f"transformers-{version}/tests/"
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if not (member.isfile() and member.name.startswith(prefix)):
                continue
            relative = PurePosixPath(member.name.removeprefix(prefix))
            if relative.is_absolute() or ".." in relative.parts:
                raise FetchError(f"{sdist} holds {member.name}, a path outside its tests/: not extracted.")
            target = package.joinpath(*relative.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.extractfile(member) as source:  # a regular file's, never None
                target.write_bytes(source.read())
    missing = [name for name in NEEDED if not (package / name).is_file()]
    if missing:
        raise FetchError(f"{sdist} holds no tests/{missing[0]}: this script cannot use its tests.")
    for name, text in STAND_INS.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")
    for folder in (package, *(path for path in package.rglob("*") if path.is_dir())):
        (folder / "__init__.py").touch()


def fetch(version: str) -> Path:
    """The folder holding transformers `version`'s tests as PACKAGE: reused when it proves itself, else
    (re)built from the sdist and written whole."""
    entry, cache = cache_entry(version), cache_root()
    check_cache_folder(CACHE_VARIABLE, cache)
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(cache / f".{version}.lock"):
        remove_stale_partials(cache)
        if entry.exists():
            problem = entry_problem(entry)
            if problem is None:
                return entry
            discard_damaged_entry(entry, problem, CACHE_VARIABLE)
        with (
            tempfile.TemporaryDirectory() as download,
            folder_written_whole(entry, CACHE_VARIABLE) as partial,
        ):
            extract_tests(download_sdist(version, Path(download)), version, partial / PACKAGE)
            write_manifest(partial)
    return entry


@command
def main(argv: Sequence[str] | None = None) -> int:
    """Fetch the tests of the installed transformers and print their folder; returns the exit status."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog=FETCH_COMMAND, description=__doc__, formatter_class=formatter)
    parser.parse_args(argv)
    try:
        print(fetch(installed_version()))
    # no package index, a full disk, a cache that is a file, a damaged folder that cannot be removed
    except (FetchError, OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
