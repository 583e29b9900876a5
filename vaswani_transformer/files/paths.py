"""Whether a name means a local path or a Hub id, input files that are there, and outputs kept apart from inputs.

A name that means a local file or folder but does not exist is an error naming it, never a Hub request (which
would fail later, offline or with a 404 about a repository the user never meant).
"""

import re
from collections.abc import Collection, Mapping
from pathlib import Path

FILE_EXTENSION = re.compile(r"\.[A-Za-z]{1,5}$")  # ".en", ".tsv", ".gz"; not the ".1-8B" of a Hub name


def is_local_path(name: str | Path) -> bool:
    """Whether `name` means a file or folder on this machine rather than a Hub id ("user/name"): a Path object; or
    a string that exists, starts with ".", "/" or "~", holds a backslash or more than one "/", ends in a file
    extension, or lies in a folder that exists here ("runs/x" when there is a runs/)."""
    if isinstance(name, Path):
        return True
    path = Path(name).expanduser()
    return (
        path.exists()
        or name.startswith((".", "/", "~"))
        or "\\" in name
        or name.count("/") > 1
        or FILE_EXTENSION.search(name) is not None
        or (path.parent != Path(".") and path.parent.is_dir())
    )


def check_input_file(path: Path) -> None:
    """An input file that is there and is a file: a folder is an IsADirectoryError, a missing path a
    FileNotFoundError, and a pipe or device (a shell's `<(...)`, which is read as it streams and cannot be read
    again) a FileNotFoundError saying so, each naming the path (open() would say only "Is a directory" or "No such
    file")."""
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder: give a file inside it")
    if path.exists() and not path.is_file():
        raise FileNotFoundError(
            f"{path} is not a regular file (a pipe or a device, such as the shell's <(...)): write it to a file first"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")


def check_apart(
    flag: str,
    output: str | Path,
    inputs: Mapping[str, str | Path | None],
    *,
    may_lie_inside: Collection[str] = (),
    may_contain: Collection[str] = (),
) -> None:
    """Refuse, before anything is written, an output that is, contains or lies inside one of a command's inputs:
    ValueError "--output_dir X is inside the model folder M (an input): choose a folder apart from it".

    `inputs` names each input ({"the model folder": path}; None for one not given or not on this machine). Paths
    are compared resolved, links followed, so that no other spelling of a path gets past. `may_lie_inside` and
    `may_contain` name the inputs a command is documented to write inside of (vaswani-average's RUN/averaged) or
    around (pictures written to a folder that holds the model folder)."""
    target = Path(output).expanduser().resolve()
    for name, path in inputs.items():
        if path is None:
            continue
        source = Path(path).expanduser().resolve()
        if target == source:
            relation = "is"
        elif target.is_relative_to(source) and name not in may_lie_inside:
            relation = "is inside"
        elif source.is_relative_to(target) and name not in may_contain:
            relation = "contains"
        else:
            continue
        raise ValueError(
            f"{flag} {output} {relation} {name} {path} (an input): choose a folder apart from it."
        )


def check_new_or_empty(output: Path, overwrite: bool, what: str) -> None:
    """An output folder that is new or empty, or whose files `overwrite` lets `what` replace (FileExistsError
    naming it otherwise). Check it holding the folder's claim (`claims.claimed_output`): no other writer can then
    fill it between this check and the writing."""
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"{output} is a file; choose a folder for {what}.")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{output} is not empty; choose another folder or pass overwrite=True (--overwrite)."
        )


def nearest_existing(path: Path) -> Path:
    """`path` if it exists, else its nearest parent that does (where it would be made)."""
    return next(candidate for candidate in (path, *path.parents) if candidate.exists())


def check_cache_folder(flag: str, cache: Path) -> None:
    """A cache flag's folder exists as a folder, or can be made: no file at it or above it (ValueError naming the
    flag)."""
    if cache.exists() and not cache.is_dir():
        raise ValueError(f"{flag} {cache} is a file: give a folder (it is made if missing).")
    existing = nearest_existing(cache)
    if not existing.is_dir():
        raise ValueError(f"{flag} {cache} cannot be made: {existing} is a file. Give a folder.")
