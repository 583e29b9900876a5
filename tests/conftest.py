"""Shared fixtures: tiny model configs, the path to ../shared/data, a fake Hub and a trained miniature run."""

import base64
import functools
import importlib
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch

# the real corpora's fixture, and the run's one-line count of the tests that skipped without them
from tests.real_data import pytest_terminal_summary, shared_data  # noqa: F401
from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration
from vaswani_transformer.data import load_tatoeba
from vaswani_transformer.training import paper_training_arguments
from vaswani_transformer.training.options import DEFAULTS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked `slow` (end-to-end runs, fresh interpreters, servers) run with RUN_SLOW=1 or when `-m`
    selects by marks, as transformers' RUN_SLOW; otherwise they are deselected (counted, not skipped)."""
    if os.environ.get("RUN_SLOW") == "1" or config.getoption("markexpr"):
        return
    slow = [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]


@pytest.fixture(autouse=True)
def torch_threads_as_they_were() -> Iterator[None]:
    """Every test starts with this process's intra-op thread count. Compiling flex attention after the CTranslate2
    and ONNX Runtime tests have run leaves torch at one thread (inside torch, not this package), and the tests that
    compare this process's numbers with a fresh subprocess's, bit for bit, then differ in the last bit."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


# The start of a script run in a fresh interpreter in which `import vaswani_transformer` fails: only a saved
# folder's own remote code can load its model there.
WITHOUT_THE_PACKAGE = r"""
import json, sys

class NoPackage:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "vaswani_transformer":
            raise ImportError("vaswani_transformer is not installed here")

sys.meta_path.insert(0, NoPackage())
"""


# A one-layer model small enough for end-to-end jobs in seconds on CPU (TrainOptions.config_overrides).
TINY = {"d_model": 32, "d_ff": 64, "num_encoder_layers": 1, "num_decoder_layers": 1}


@functools.cache
def tatoeba_sample(count: int) -> dict[str, tuple[str, ...]]:
    """Every 20th embedded Tatoeba pair, `count` of them, by side: read once per run (reading the embedded corpus
    takes about a second, and the bad-input cases alone want these files 160 times)."""
    pairs = load_tatoeba()[0].select(range(0, 20 * count, 20))
    return {side: tuple(pairs[side]) for side in ("source", "target")}


LANGUAGES = {
    "source": "en",
    "target": "de",
}  # the embedded corpus's sides, as corpus files' suffixes name them


def tatoeba_files(tmp_path: Path, count: int) -> dict[str, str]:
    """The first `count` embedded Tatoeba pairs as line-aligned train/test files (no ../shared needed)."""
    sample = tatoeba_sample(count)
    files = {}
    for split, size in (("train", count), ("test", 5)):
        for side in ("source", "target"):
            path = tmp_path / f"{split}.{LANGUAGES[side]}"
            path.write_text("\n".join(sample[side][:size]) + "\n", encoding="utf-8")
            files[f"{split}_{side}"] = str(path)
    return files


RECIPE_SETTINGS = (
    "warmup_steps",
    "lr_scale",
    "save_steps",
    "average_last",
    "eval_steps",
    "logging_steps",
    "seed",
)


def paper_arguments(output_dir: Path, d_model: int = 32, *, max_steps: int, **settings: object):
    """`paper_training_arguments` with recipes/defaults.yaml's values for the settings a test leaves out."""
    defaults = {name: DEFAULTS[name] for name in RECIPE_SETTINGS}
    return paper_training_arguments(output_dir, d_model, max_steps=max_steps, **{**defaults, **settings})


def tiny_config(**overrides: object) -> VaswaniTransformerConfig:
    """A few-thousand-parameter model with uneven stack depths (catches encoder/decoder mix-ups)."""
    values: dict[str, object] = {
        "vocab_size": 64,
        "d_model": 32,
        "d_ff": 64,
        "num_heads": 4,
        "num_encoder_layers": 2,
        "num_decoder_layers": 3,
        "dropout": 0.0,
    }
    values.update(overrides)
    return VaswaniTransformerConfig(**values)


@pytest.fixture
def tiny_model() -> VaswaniTransformerForConditionalGeneration:
    """A seeded tiny model in eval mode."""
    torch.manual_seed(0)
    return VaswaniTransformerForConditionalGeneration(tiny_config()).eval()


@pytest.fixture
def generation_warnings() -> Iterator[list[str]]:
    """The messages transformers' generation code logs while the test runs (its logger does not propagate)."""
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("transformers.generation.utils")
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)


@pytest.fixture
def source_batch() -> dict[str, torch.Tensor]:
    """Two right-padded source sentences (pad = 0, eos = 3)."""
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 12, 3, 0, 0]])
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


@pytest.fixture(scope="session")
def letter_tokenizer():
    """A word-level tokenizer over the letters a-z with this package's special tokens (ids 0-3)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3} | {chr(97 + i): 4 + i for i in range(26)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 3)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


class FakeHub:
    """The Hub's HTTP API in memory, as huggingface_hub's own client reaches it: every request is recorded."""

    def __init__(self, httpx: ModuleType) -> None:
        self.httpx = httpx
        self.requests: list[tuple[str, str, bytes]] = []
        self.refuse_commits = False  # answer commits as a Hub without write access does

    def __call__(self, request):
        self.requests.append((request.method, request.url.path, request.content))
        path, respond = request.url.path, self.httpx.Response
        if path == "/api/repos/create":
            repo = json.loads(request.content)
            return respond(200, json={"url": f"https://huggingface.co/{repo['organization']}/{repo['name']}"})
        if path == "/api/validate-yaml":
            return respond(200, json={"errors": [], "warnings": []})
        if "/branch/" in path:
            return respond(200, json={})
        if "/preupload/" in path:  # "regular": files travel inside the commit, as small files do
            files = json.loads(request.content)["files"]
            return respond(
                200,
                json={
                    "files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files
                    ]
                },
            )
        if "/commit/" in path and self.refuse_commits:
            return respond(403, json={"error": "You don't have the rights to create a commit in this repo"})
        if "/commit/" in path:
            repo = path.removeprefix("/api/models/").split("/commit/")[0]
            return respond(
                200,
                json={"commitUrl": f"https://huggingface.co/{repo}/commit/{'0' * 40}", "commitOid": "0" * 40},
            )
        return respond(404, json={"error": f"{path} is not part of this fake Hub"})

    def commits(self) -> list[tuple[str, dict, dict[str, bytes]]]:
        """(url path, header, {file path: content}) of every commit sent."""
        commits = []
        for method, path, content in self.requests:
            if method == "POST" and "/commit/" in path:
                lines = [json.loads(line) for line in content.decode().splitlines() if line]
                header = next(line["value"] for line in lines if line["key"] == "header")
                files = {
                    line["value"]["path"]: base64.b64decode(line["value"]["content"])
                    for line in lines
                    if line["key"] == "file"
                }
                commits.append((path, header, files))
        return commits


@contextmanager
def fake_hub_session() -> Iterator[FakeHub]:
    """Route huggingface_hub's HTTP calls to a FakeHub (online mode, a fake token) for the duration."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    httpx = importlib.import_module(type(huggingface_hub.get_session()).__module__.split(".")[0])
    hub = FakeHub(httpx)
    patch = pytest.MonkeyPatch()
    patch.setattr(constants, "HF_HUB_OFFLINE", False)
    patch.setenv("HF_TOKEN", "hf_fake_token_for_tests")
    huggingface_hub.set_client_factory(lambda: httpx.Client(transport=httpx.MockTransport(hub)))
    try:
        yield hub
    finally:
        huggingface_hub.set_client_factory(_http.default_client_factory)
        patch.undo()


@dataclass
class TrainedRun:
    """A finished miniature main job: its final model folder and what it sent to the (fake) Hub."""

    model_dir: Path
    hub: FakeHub
    output_dir: Path


# Sentences of different lengths for comparing decoders (export, engines) output for output.
SENTENCES = [
    "I love you.",
    "Where is the train station?",
    "Tom is reading a book in the garden.",
    "No.",
    "We have to leave before it starts raining, or we will get wet.",
]


# A small model's files (random weights, a 300-token BPE of the embedded Tatoeba pairs): no training needed
SMALL_MODEL = Path(__file__).parent / "samples" / "small_model"


def save_small_model(folder: Path) -> Path:
    """The small model (SMALL_MODEL) saved into `folder` by this package as every folder is saved (its code, its
    config's fingerprint); its translations differ per sentence."""
    import shutil

    VaswaniTransformerForConditionalGeneration.from_pretrained(SMALL_MODEL).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(SMALL_MODEL / name, folder / name)
    return folder


def save_random_model(trained_dir: Path, folder: Path, **config_overrides: object) -> Path:
    """A trained miniature's architecture and tokenizer with large random weights and every LayerNorm and bias
    perturbed, saved into `folder`: its translations differ per sentence and are not empty (the trained
    miniature's are), so equal outputs of two decoders mean something, and mix-ups (gamma for beta, fc1 for fc2,
    K for V) change the numbers."""
    from vaswani_transformer.evaluation import load_for_decoding

    trained, tokenizer = load_for_decoding(trained_dir, device="cpu")
    torch.manual_seed(0)
    config = trained.config.__class__(**{**trained.config.to_dict(), "init_std": 0.5, **config_overrides})
    model = VaswaniTransformerForConditionalGeneration(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or "bias" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def random_folder(trained_run: TrainedRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """save_random_model on the trained miniature, made once per test module (a module's tests may write into
    it): distinct, non-empty translations, so equal outputs of two decoders mean something."""
    return save_random_model(trained_run.model_dir, tmp_path_factory.mktemp("random") / "model")


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """The main job (recipe tatoeba, embedded corpus) in miniature, run with --push_to_hub against a FakeHub and
    --report_to tensorboard."""
    from vaswani_transformer.training import TrainOptions, train_and_evaluate

    options = TrainOptions.from_recipe(
        "tatoeba",
        output_dir=tmp_path_factory.mktemp("main-job") / "run",
        config_overrides={"d_model": 32, "d_ff": 64, "num_heads": 4, "num_encoder_layers": 2,
                          "num_decoder_layers": 2, "init_std": 0.1},
        vocab_size=400, max_steps=60, warmup_steps=20, save_steps=20, eval_steps=0, logging_steps=20,
        dev_size=20, test_size=24, num_beams=2, examples=["I love you.", "Where is the station?"],
        push_to_hub="tester/tatoeba-mini", report_to=["tensorboard"],
    )  # fmt: skip
    with fake_hub_session() as hub:
        result = train_and_evaluate(options)
    assert result is not None and result.hub_url is not None
    return TrainedRun(result.model_dir, hub, options.output_dir)


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    """huggingface_hub talks to a FakeHub during the test."""
    with fake_hub_session() as hub:
        yield hub
