"""Bad input to every command: exit status 2, a message naming the flag or file, found before any
training or decoding starts, nothing written anywhere and nothing that was there lost.

Each case runs a command's `main` in a workspace of its own (corpus files, a trained miniature's model folder and
run folder, and what the case sets up), with training and decoding made to fail the test if they start; the
workspace is compared file by file before and after.
"""

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from huggingface_hub import constants
from safetensors.torch import load_file, save_file

from tests.conftest import TINY, tatoeba_files
from tests.convert.conftest import save_small_fsmt, small_vocabulary
from tests.convert.fairseq_fixture import HOLDABLE_SIZES, make_fairseq_checkpoint
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.claims import claimed_output
from vaswani_transformer.cli import (
    average,
    convert,
    evaluate,
    export,
    export_onnx,
    plot_attention,
    plot_positional_encoding,
    prepare,
    push,
    serve,
    train,
)
from vaswani_transformer.cli import translate as translate_cli
from vaswani_transformer.data.tokenization import train_bpe
from vaswani_transformer.modeling.configuration_vaswani_transformer import FINGERPRINT_KEY
from vaswani_transformer.training.options import RECORD_FINGERPRINT, record_fingerprint
from vaswani_transformer.training.run_folder import LOCK_FILE

COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "train": train.main,
    "translate": translate_cli.main,
    "evaluate": evaluate.main,
    "average": average.main,
    "push": push.main,
    "export": export.main,
    "export-onnx": export_onnx.main,
    "prepare": prepare.main,
    "plot-positional-encoding": plot_positional_encoding.main,
    "plot-attention": plot_attention.main,
    "convert": convert.main,
    "serve": serve.main,
}


@dataclass
class Workspace:
    """What a case works on: corpus files, a model folder, a run folder with checkpoints, and a free path."""

    root: Path
    files: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> str:
        return str(self.root / "model")

    @property
    def run(self) -> str:
        return str(self.root / "run")

    @property
    def new(self) -> str:
        return str(self.root / "new")

    def train_flags(self) -> list[str]:
        """A valid small training, which each train case spoils in one way."""
        flags = [item for name, path in self.files.items() for item in (f"--{name}", path)]
        flags += ["--config_overrides", json.dumps(TINY), "--vocab_size", "300", "--max_tokens", "512"]
        flags += ["--max_steps", "2", "--warmup_steps", "1", "--save_steps", "2", "--average_last", "1"]
        return [*flags, "--dev_size", "0", "--eval_steps", "0", "--num_beams", "1", "--examples", "A dog."]

    def write(self, name: str, content: str | bytes) -> str:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return str(path)


# The file system's reason for refusing a write into a folder `read_only` made so.
REFUSED = "the file system is read-only" if os.geteuid() == 0 else "permission denied"


@dataclass(frozen=True)
class Template:
    """A message that names a path of the case's workspace, written as docs/errors.md shows it: `{root}` is the
    workspace's folder, `{train_source}`, `{train_target}`, `{test_source}`, `{test_target}` its corpus files,
    `{refused}` the file system's reason for refusing a write (`REFUSED`)."""

    text: str

    def format(self, ws: Workspace) -> str:
        return self.text.format(root=ws.root, refused=REFUSED, **ws.files)


@dataclass
class Case:
    command: str
    arguments: Callable[[Workspace], list[str]]
    message: str | Template
    setup: Callable[[Workspace], None] | None = None


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def overrides(text: str) -> Callable[[Workspace], list[str]]:
    return lambda ws: [*ws.train_flags(), "--config_overrides", text, "--output_dir", ws.new]


def train_with(*flags: str) -> Callable[[Workspace], list[str]]:
    return lambda ws: [*ws.train_flags(), *flags, "--output_dir", ws.new]


def without(flag: str) -> Callable[[Workspace], list[str]]:
    def arguments(ws: Workspace) -> list[str]:
        flags = ws.train_flags()
        index = flags.index(flag)
        return [*flags[:index], *flags[index + 2 :], "--output_dir", ws.new]

    return arguments


def line_count_mismatch(ws: Workspace) -> list[str]:
    lines = Path(ws.files["train_target"]).read_text(encoding="utf-8").splitlines(keepends=True)
    short = ws.write("short.target", "".join(lines[:-1]))
    flags = ws.train_flags()
    flags[flags.index("--train_target") + 1] = short
    return [*flags, "--output_dir", ws.new]


def corpus_replaced(flag: str, content: bytes) -> Callable[[Workspace], list[str]]:
    def arguments(ws: Workspace) -> list[str]:
        path = ws.write(f"replaced-{flag}", content)
        flags = ws.train_flags()
        flags[flags.index(f"--{flag}") + 1] = path
        return [*flags, "--output_dir", ws.new]

    return arguments


def one_pair_repeated(ws: Workspace) -> list[str]:
    """A corpus of 150 copies of one pair, with 10 pairs asked for dev: the one sentence's pairs stay together."""
    flags = ws.train_flags()
    flags[flags.index("--train_source") + 1] = ws.write("repeated.en", "The cat sleeps.\n" * 150)
    flags[flags.index("--train_target") + 1] = ws.write("repeated.de", "Die Katze schläft.\n" * 150)
    return [*flags, "--dev_size", "10", "--output_dir", ws.new]


def unrecord_pair(config_file: Path) -> None:
    """config.json without the language pair the training job writes into it (`langs`)."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config.pop("langs")
    config_file.write_text(json.dumps(config), encoding="utf-8")


def hold_lock(ws: Workspace) -> None:
    folder = Path(ws.new)
    folder.mkdir()
    descriptor = os.open(folder / LOCK_FILE, os.O_CREAT | os.O_RDWR)
    fcntl.flock(
        descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB
    )  # held until the test process ends: another training


def user_files_in_run(ws: Workspace) -> None:
    ws.write("run/src/important.py", "keep")


def sources(ws: Workspace, content: bytes = b"I love you.\nNo.\n") -> str:
    return ws.write("test.en", content)


def evaluate_with(
    *flags: str, references: bytes = b"Ich liebe dich.\nNein.\n"
) -> Callable[[Workspace], list[str]]:
    return lambda ws: [
        ws.model,
        "--source",
        sources(ws),
        "--references",
        ws.write("test.de", references),
        *flags,
    ]


CASES: dict[str, Case] = {
    # train: numbers, checked before anything is written
    "train max_steps 0": Case(
        "train", train_with("--max_steps", "0"), "--max_steps must be at least 1, got 0"
    ),
    "train max_steps -1": Case("train", train_with("--max_steps", "-1"), "--max_steps must be at least 1"),
    "train warmup 0": Case("train", train_with("--warmup_steps", "0"), "--warmup_steps must be at least 1"),
    "train accumulation 0": Case(
        "train",
        train_with("--gradient_accumulation_steps", "0"),
        "--gradient_accumulation_steps must be at least 1",
    ),
    "train vocab -1": Case("train", train_with("--vocab_size", "-1"), "--vocab_size must be at least 1"),
    "train vocab 10^9": Case(
        "train", train_with("--vocab_size", "1000000000"), "--vocab_size must be at most 1,000,000"
    ),
    "train max_length 0": Case("train", train_with("--max_length", "0"), "--max_length must be at least 1"),
    "train bpe pairs -1": Case(
        "train", train_with("--bpe_max_pairs", "-1"), "--bpe_max_pairs -1: give a number of pairs, or 0"
    ),
    "train data cache is a file": Case(
        "train",
        lambda ws: train_with("--data_cache", ws.files["train_source"])(ws),
        "is a file: give a folder (it is made if missing)",
    ),
    "train data cache under a file": Case(
        "train",
        lambda ws: train_with("--data_cache", f"{ws.files['train_source']}/cache")(ws),
        "cannot be made: ",
    ),
    "train max_tokens 1": Case(
        "train", train_with("--max_tokens", "1"), "--max_tokens 1 is below --max_length"
    ),
    "train eval batch 0": Case(
        "train", train_with("--eval_batch_size", "0"), "--eval_batch_size must be at least 1"
    ),
    "train beams 0": Case("train", train_with("--num_beams", "0"), "--num_beams must be at least 1"),
    "train test sentences 0": Case(
        "train", train_with("--max_test_sentences", "0"), "--max_test_sentences must be at least 1"
    ),
    "train lr_scale -1": Case("train", train_with("--lr_scale", "-1"), "--lr_scale must be positive"),
    "train lr_scale 0": Case("train", train_with("--lr_scale", "0"), "--lr_scale must be positive"),
    "train seed -1": Case("train", train_with("--seed", "-1"), "--seed must be between 0 and 4294967295"),
    "train seed 2^33": Case(
        "train", train_with("--seed", "8589934592"), "--seed must be between 0 and 4294967295"
    ),
    "train steps not a number": Case(
        "train",
        train_with("--max_steps", "many"),
        "argument --max_steps/--max-steps: invalid int value: 'many'",
    ),
    "train precision unknown": Case(
        "train",
        train_with("--mixed_precision", "fp8"),
        "argument --mixed_precision/--mixed-precision: invalid choice",
    ),
    "train preset unknown": Case(
        "train", train_with("--preset", "huge"), "argument --preset: invalid choice: 'huge'"
    ),
    "train final_model unknown": Case(
        "train", train_with("--final_model", "first"), "argument --final_model/--final-model: invalid choice"
    ),
    "train recipe unknown": Case(
        "train",
        lambda ws: ["--recipe", "wmt16", "--output_dir", ws.new],
        "unknown recipe 'wmt16': choose one of",
    ),
    "train cuda section not a boolean": Case(
        "train",
        train_with("--cuda_section", "maybe"),
        "vaswani-train: error: argument --cuda_section/--cuda-section: Truthy value expected: got maybe",
    ),
    # train: the model's config, through --config_overrides
    "train override typo": Case(
        "train", overrides('{"init_schem": "xavier"}'), "'init_schem' is not a key of the model's config"
    ),
    "train override unknown": Case(
        "train", overrides('{"nope": 1}'), "'nope' is not a key of the model's config"
    ),
    "train override type": Case(
        "train", overrides('{"d_model": "big"}'), "Field 'd_model' expected int, got str"
    ),
    "train override vocab": Case("train", overrides('{"vocab_size": 5}'), "cannot set vocab_size"),
    "train override value": Case("train", overrides('{"init_scheme": "he"}'), "init_scheme must be one of"),
    "train override dropout 1": Case(
        "train", overrides('{"attention_dropout": 1.0}'), "attention_dropout must be in [0, 1)"
    ),
    "train override not json": Case(
        "train",
        overrides("{d_model: 64"),
        "argument --config_overrides/--config-overrides: invalid JsonDict value",
    ),
    "train dropout in config overrides": Case(
        "train",
        overrides('{"dropout": 0.1}'),
        "--config_overrides cannot set dropout: residual dropout is the setting --dropout",
    ),
    # train: combinations
    "train best without dev": Case(
        "train", train_with("--final_model", "best"), "--final_model best needs dev evaluations"
    ),
    "train eval without dev": Case(
        "train", train_with("--eval_steps", "100"), "--eval_steps needs a dev set"
    ),
    "train resume and overwrite": Case(
        "train", train_with("--resume", "--overwrite"), "--resume continues the run in --output_dir"
    ),
    # train: files
    "train source missing": Case(
        "train",
        train_with("--train_source", "/nonexistent/train.en"),
        "--train_source /nonexistent/train.en: no such",
    ),
    "train source is a folder": Case(
        "train",
        lambda ws: train_with("--train_source", str(ws.root))(ws),
        "is a folder: give the file inside it",
    ),
    "train test without target": Case(
        "train", without("--test_target"), "is a text file: give its line-aligned --test_target too"
    ),
    "train line counts differ": Case("train", line_count_mismatch, "line counts differ"),
    "train empty corpus": Case(
        "train", corpus_replaced("train_source", b""), "replaced-train_source has 0 lines"
    ),
    "train tokenised refs alone": Case(
        "train",
        lambda ws: ["--test_references_tokenized", ws.files["test_target"], "--output_dir", ws.new],
        "--test_references_tokenized needs the --test_source",
    ),
    "train bad repo id": Case(
        "train",
        train_with("--push_to_hub", "not a repo id"),
        "--push_to_hub 'not a repo id': Repo id must use",
    ),
    # train: the run folder
    "train output is a file": Case(
        "train",
        lambda ws: [*ws.train_flags(), "--output_dir", ws.files["train_source"]],
        "is a file: give a folder",
    ),
    "train folder holds a run": Case(
        "train",
        lambda ws: [*ws.train_flags(), "--output_dir", ws.run],
        "already holds a run. Continue it with --resume",
    ),
    "train folder not a run": Case(
        "train", lambda ws: [*ws.train_flags(), "--output_dir", str(ws.root / "corpus")], "holds no run"
    ),
    "train overwrite user files": Case(
        "train",
        lambda ws: [*ws.train_flags(), "--output_dir", ws.run, "--overwrite"],
        "holds a run and files no run writes (src)",
        setup=user_files_in_run,
    ),
    "train folder in use": Case("train", train_with(), "is in use by another training", setup=hold_lock),
    # translate
    "translate no model": Case(
        "translate", lambda ws: [str(ws.root / "missing"), "--device", "cpu"], "no such model folder"
    ),
    "translate beams 0": Case(
        "translate", lambda ws: [ws.model, "--num_beams", "0"], "--num_beams must be at least 1"
    ),
    "translate batch 0": Case(
        "translate", lambda ws: [ws.model, "--batch_size", "0"], "--batch_size must be at least 1, got 0"
    ),
    "translate no input file": Case(
        "translate", lambda ws: [ws.model, str(ws.root / "missing.en")], "missing.en: no such file"
    ),
    "translate latin-1 file": Case(
        "translate",
        lambda ws: [ws.model, "--num_beams", "1", sources(ws, "caf\u00e9\n".encode("latin-1"))],
        "is not UTF-8 text (byte 0xe9 on line 1)",
    ),
    "translate a million beams": Case(
        "translate",
        lambda ws: [ws.model, "--num_beams", "1000000", sources(ws)],
        "lower --num_beams or --batch_size",
    ),
    "translate int8 in float16": Case(
        "translate",
        lambda ws: [ws.model, "--quantize", "int8", "--dtype", "float16"],
        "--quantize int8 quantizes float32 weights, not float16 ones",
    ),
    "translate engine unknown": Case(
        "translate", lambda ws: [ws.model, "--engine", "onnx"], "argument --engine: invalid choice: 'onnx'"
    ),
    "translate truncated weights": Case(
        "translate",
        lambda ws: [ws.model, sources(ws)],
        "model.safetensors is damaged",
        setup=lambda ws: truncate(Path(ws.model) / "model.safetensors"),
    ),
    "translate tokenizer of another run": Case(
        "translate",
        lambda ws: [ws.model, sources(ws)],
        "they come from different runs",
        setup=lambda ws: train_bpe(["a b c d e", "f g h"], 30).save_pretrained(ws.model),
    ),
    # evaluate
    "evaluate name escapes": Case("evaluate", evaluate_with("--name", "../../escape"), "a name, not a path"),
    "evaluate name absolute": Case("evaluate", evaluate_with("--name", "/tmp/x"), "a name, not a path"),
    "evaluate name nested": Case("evaluate", evaluate_with("--name", "sub/dir"), "a name, not a path"),
    "evaluate earlier scores": Case(
        "evaluate",
        evaluate_with(),
        "model-evaluation/scores.json holds an earlier evaluation's scores",
        setup=lambda ws: ws.write("model-evaluation/scores.json", "{}"),
    ),
    "evaluate output_dir inside the model folder": Case(
        "evaluate",
        lambda ws: evaluate_with("--output_dir", f"{ws.model}/evaluation")(ws),
        "is inside the model folder",
    ),
    "evaluate lines differ": Case(
        "evaluate", evaluate_with("--name", "x", references=b"Nein.\n"), "must be line-aligned"
    ),
    "evaluate latin-1 references": Case(
        "evaluate",
        evaluate_with("--name", "x", references="Caf\u00e9.\nNein.\n".encode("latin-1")),
        "test.de is not UTF-8 text",
    ),
    "evaluate references a pipe": Case(
        "evaluate",
        lambda ws: [
            ws.model,
            "--source",
            sources(ws),
            "--references",
            str(ws.root / "pipe.de"),
            "--name",
            "x",
        ],
        "pipe.de is not a regular file (a pipe or a device, such as the shell's <(...)): write it to a file first",
        setup=lambda ws: os.mkfifo(ws.root / "pipe.de"),
    ),
    "evaluate no source": Case(
        "evaluate",
        lambda ws: [ws.model, "--source", str(ws.root / "none.en"), "--references", sources(ws)],
        "none.en: no such file",
    ),
    "evaluate damaged config": Case(
        "evaluate",
        evaluate_with("--name", "x"),
        "config.json is damaged, not valid JSON",
        setup=lambda ws: truncate(Path(ws.model) / "config.json"),
    ),
    # average
    "average last 0": Case("average", lambda ws: [ws.run, "--last", "0"], "--last must be at least 1, got 0"),
    "average too many": Case("average", lambda ws: [ws.run, "--last", "50"], "asked to average the last 50"),
    "average no run": Case("average", lambda ws: [str(ws.root / "missing")], "missing: no such run folder"),
    # push
    "push occupied local dir": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "tester/x", "--local_dir", ws.run],
        "run is not empty: give a new or empty folder for the Hub files",
    ),
    "push bad repo id": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "not a repo id", "--local_dir", ws.new],
        "--repo_id: Repo id must use alphanumeric chars",
    ),
    "push incomplete folder": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "tester/x", "--local_dir", ws.new],
        "model.safetensors missing",
        setup=lambda ws: (Path(ws.model) / "model.safetensors").unlink(),
    ),
    "push link out": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "tester/x", "--local_dir", ws.new],
        "scores.json link to files outside the folder",
        setup=lambda ws: (
            (Path(ws.model) / "scores.json").unlink(),
            (Path(ws.model) / "scores.json").symlink_to(ws.files["train_source"]),
        ),
    ),
    # export
    "export occupied folder": Case(
        "export",
        lambda ws: [ws.model, ws.run],
        "run is not empty; choose another folder or pass overwrite=True",
    ),
    "export no model": Case("export", lambda ws: [str(ws.root / "missing"), ws.new], "no such model folder"),
    "export truncated tokenizer": Case(
        "export",
        lambda ws: [ws.model, ws.new],
        "tokenizer.json is damaged, not valid JSON",
        setup=lambda ws: truncate(Path(ws.model) / "tokenizer.json"),
    ),
}


def read_only(ws: Workspace, name: str) -> Path:
    """A folder of the workspace (made if missing) that nothing can write into, for as long as the workspace lives.
    As root, whom permissions do not stop, a read-only bind mount of the folder onto itself (a root that may not
    mount, without CAP_SYS_ADMIN, skips the case, saying so); otherwise mode 0555."""
    folder = ws.root / name
    folder.mkdir(exist_ok=True)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        weakref.finalize(ws, folder.chmod, 0o755)
        return folder
    for options in (["--bind"], ["-o", "remount,bind,ro"]):
        mounted = subprocess.run(
            ["mount", *options, str(folder), str(folder)], capture_output=True, text=True
        )
        if mounted.returncode != 0:
            pytest.skip(f"root here cannot mount {folder} read-only (needs CAP_SYS_ADMIN): {mounted.stderr}")
        if options == ["--bind"]:
            weakref.finalize(ws, subprocess.run, ["umount", str(folder)], check=True)
    return folder


def prepare_into(cache: str) -> Callable[[Workspace], list[str]]:
    def arguments(ws: Workspace) -> list[str]:
        flags = [item for name, path in ws.files.items() for item in (f"--{name}", path)]
        return [*flags, "--dev_size", "0", "--eval_steps", "0", "--data_cache", str(ws.root / cache)]

    return arguments


def resume_run(*flags: str) -> Callable[[Workspace], list[str]]:
    """--resume of the workspace's run (the trained miniature: tatoeba, tiny, --vocab_size 400), flags on top."""
    return lambda ws: ["--output_dir", ws.run, "--resume", *flags]


def link_to_model(ws: Workspace) -> None:
    (ws.root / "link").symlink_to(ws.model)


def corpus_in_run(ws: Workspace) -> None:
    """The corpus files kept in the run folder (the flags name them there)."""
    for name, path in list(ws.files.items()):
        ws.files[name] = ws.write(f"run/data/{Path(path).name}", Path(path).read_bytes())


# Outputs apart from inputs, caches, all-or-nothing writes, streamed input and values: one table per rule (each
# is merged into CASES below)
OUTPUTS_APART_CASES: dict[str, Case] = {
    "export onto the model folder": Case("export", lambda ws: [ws.model, ws.model], "is the model folder"),
    "export onto the model folder with overwrite": Case(
        "export", lambda ws: [ws.model, ws.model, "--overwrite"], "is the model folder"
    ),
    "export inside the model folder": Case(
        "export", lambda ws: [ws.model, f"{ws.model}/ct2"], "is inside the model folder"
    ),
    "export around the model folder": Case(
        "export", lambda ws: [ws.model, str(ws.root), "--overwrite"], "contains the model folder"
    ),
    "export onto the model folder by a link": Case(
        "export",
        lambda ws: [ws.model, str(ws.root / "link"), "--overwrite"],
        "is the model folder",
        setup=link_to_model,
    ),
    "export-onnx onto the model folder": Case(
        "export-onnx", lambda ws: [ws.model, ws.model, "--overwrite"], "is the model folder"
    ),
    "export-onnx inside the model folder": Case(
        "export-onnx", lambda ws: [ws.model, f"{ws.model}/onnx"], "is inside the model folder"
    ),
    "average onto the model folder": Case(
        "average",
        lambda ws: [ws.run, "--last", "1", "--output", ws.model],
        "holds a model the training job wrote (train_options.json",
    ),
    "average onto a checkpoint": Case(
        "average",
        lambda ws: [ws.run, "--last", "1", "--output", f"{ws.run}/checkpoint-60"],
        "is the run's checkpoint-60",
    ),
    "average onto the run": Case(
        "average", lambda ws: [ws.run, "--last", "1", "--output", ws.run], "is the run folder"
    ),
    "average into the run's vocabulary": Case(
        "average",
        lambda ws: [ws.run, "--last", "1", "--output", f"{ws.run}/tokenizer"],
        "is the run's vocabulary",
    ),
    "push local dir inside the model folder": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "tester/x", "--local_dir", f"{ws.model}/hub"],
        "is inside the model folder",
    ),
    "push local dir around the model folder": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "tester/x", "--local_dir", str(ws.root)],
        "contains the model folder",
    ),
    "plot attention into the model folder": Case(
        "plot-attention",
        lambda ws: [ws.model, "I love you.", "--output_dir", ws.model],
        "is the model folder",
    ),
    "plot positional encoding onto a model file": Case(
        "plot-positional-encoding",
        lambda ws: ["--output", f"{ws.model}/training_curve.png"],
        "is a file of the model folder",
    ),
    "train into the model folder": Case(
        "train",
        lambda ws: [*ws.train_flags(), "--output_dir", ws.model],
        "holds a saved model (config.json), not a run",
    ),
    "train resume the model folder": Case(
        "train",
        lambda ws: ["--output_dir", ws.model, "--resume"],
        "holds a saved model (config.json), not a run",
    ),
    "train resume a folder of no run": Case(
        "train",
        lambda ws: [*ws.train_flags(), "--output_dir", str(ws.root / "corpus"), "--resume"],
        "holds no run (train_options.json, tokenizer/, checkpoint-N)",
    ),
    "train resume another vocab_size": Case(
        "train", resume_run("--vocab_size", "300"), "--resume --vocab_size 300: the run was made with 400"
    ),
    "train resume another preset": Case(
        "train", resume_run("--preset", "small"), "--resume --preset small: the run was made with tiny"
    ),
    "train resume another max_length": Case(
        "train", resume_run("--max_length", "64"), "--resume --max_length 64: the run was made with 128"
    ),
    "train resume another seed": Case(
        "train", resume_run("--seed", "1"), "--resume --seed 1: the run was made with 0"
    ),
    "train resume another model": Case(
        "train",
        resume_run("--config_overrides", '{"d_model": 64}'),
        '--resume --config_overrides {"d_model": 64}: the run was made with {',
    ),
    "train resume another corpus": Case(
        "train",
        lambda ws: [*ws.train_flags(), "--output_dir", ws.run, "--resume"],
        "--resume --train_source ",
    ),
    "train resume a damaged record": Case(
        "train",
        resume_run(),
        "train_options.json is damaged, not valid JSON",
        setup=lambda ws: truncate(Path(ws.run) / "train_options.json"),
    ),
    "train resume checkpoints without a record": Case(
        "train",
        resume_run(),
        "holds checkpoints but no train_options.json",
        setup=lambda ws: (Path(ws.run) / "train_options.json").unlink(),
    ),
    "train resume around its data cache": Case(
        "train",
        lambda ws: ["--output_dir", ws.run, "--resume", "--data_cache", f"{ws.run}/cache"],
        "contains the --data_cache folder",
    ),
    "train resume around its corpus": Case(
        "train",
        lambda ws: [*ws.train_flags(), "--output_dir", ws.run, "--resume"],
        "contains the --train_source file",
        setup=corpus_in_run,
    ),
    "train inside the data cache": Case(
        "train",
        lambda ws: [
            *ws.train_flags(),
            "--data_cache",
            f"{ws.root}/cache",
            "--output_dir",
            f"{ws.root}/cache/run",
        ],
        "is inside the --data_cache folder",
    ),
    "evaluate source is its own output": Case(
        "evaluate",
        lambda ws: [
            ws.model,
            "--source",
            ws.write("model-evaluation/hypotheses.txt", "Ich liebe dich.\n"),
            "--references",
            sources(ws),
            "--overwrite",
        ],
        "hypotheses.txt is a file this evaluation writes",
    ),
    "prepare data cache around the corpus": Case(
        "prepare",
        lambda ws: [*ws.train_flags(), "--data_cache", str(ws.root / "corpus")],
        "contains the --train_source file",
    ),
}


def engine_cache(engine: str, flag: str, under_a_file: bool) -> Callable[[Workspace], list[str]]:
    """translate with `engine`, its cache `flag` naming a corpus file (or a folder under one)."""
    return lambda ws: [ws.model, sources(ws), "--engine", engine, flag, cache_at(ws, under_a_file)]


def cache_at(ws: Workspace, under_a_file: bool) -> str:
    return f"{ws.files['train_source']}/cache" if under_a_file else ws.files["train_source"]


def prepare_with(*flags: str) -> Callable[[Workspace], list[str]]:
    return lambda ws: [*ws.train_flags(), *flags]


CACHE_CASES: dict[str, Case] = {  # a cache entry proves itself before reuse
    "translate ctranslate2 cache is a file": Case(
        "translate",
        engine_cache("ctranslate2", "--ctranslate2_cache", under_a_file=False),
        Template("--ctranslate2_cache {train_source} is a file: give a folder (it is made if missing)"),
    ),
    "translate onnx cache is a file": Case(
        "translate",
        engine_cache("onnxruntime", "--onnx_cache", under_a_file=False),
        Template("--onnx_cache {train_source} is a file: give a folder (it is made if missing)"),
    ),
    "translate onnx cache under a file": Case(
        "translate",
        engine_cache("onnxruntime", "--onnx-cache", under_a_file=True),
        Template("--onnx_cache {train_source}/cache cannot be made: {train_source} is a file"),
    ),
    "evaluate ctranslate2 cache under a file": Case(
        "evaluate",
        lambda ws: evaluate_with(
            "--engine", "ctranslate2", "--ctranslate2_cache", cache_at(ws, True), "--name", "x"
        )(ws),
        Template("--ctranslate2_cache {train_source}/cache cannot be made: {train_source} is a file"),
    ),
    "evaluate verify_cache with torch": Case(
        "evaluate",
        evaluate_with("--verify_cache", "--name", "x"),
        "--verify_cache checks the caches of --engine ctranslate2 and onnxruntime: drop it",
    ),
    "prepare data cache is a file": Case(
        "prepare",
        lambda ws: prepare_with("--data_cache", cache_at(ws, False))(ws),
        Template("--data_cache {train_source} is a file: give a folder (it is made if missing)"),
    ),
    "prepare data cache under a file": Case(
        "prepare",
        lambda ws: prepare_with("--data_cache", cache_at(ws, True), "--verify_cache")(ws),
        Template("--data_cache {train_source}/cache cannot be made: {train_source} is a file"),
    ),
}
ALL_OR_NOTHING_CASES: dict[str, Case] = {  # writability checked before long work
    "evaluate read-only output_dir": Case(
        "evaluate",
        lambda ws: evaluate_with("--name", "x", "--output_dir", str(ws.root / "locked" / "eval"))(ws),
        Template("{refused} while writing {root}/locked/eval/x_scores.json ("),
        setup=lambda ws: read_only(ws, "locked"),
    ),
    "train read-only output_dir": Case(
        "train",
        lambda ws: [*ws.train_flags(), "--output_dir", str(ws.root / "locked" / "run")],
        Template("{refused} while writing {root}/locked/run ("),
        setup=lambda ws: read_only(ws, "locked"),
    ),
    "train read-only data cache": Case(
        "train",
        lambda ws: [
            *ws.train_flags(),
            "--data_cache",
            str(ws.root / "locked" / "cache"),
            "--output_dir",
            ws.new,
        ],
        Template("{refused} while writing {root}/locked/cache ("),
        setup=lambda ws: read_only(ws, "locked"),
    ),
    "prepare read-only data cache": Case(
        "prepare",
        prepare_into("locked/cache"),
        Template("{refused} while writing {root}/locked/cache ("),
        setup=lambda ws: read_only(ws, "locked"),
    ),
    "average read-only output": Case(
        "average",
        lambda ws: [ws.run, "--last", "1", "--output", str(ws.root / "locked" / "averaged")],
        Template("{refused} while writing {root}/locked/averaged ("),
        setup=lambda ws: read_only(ws, "locked"),
    ),
    "average read-only run, default output": Case(
        "average",
        lambda ws: [ws.run, "--last", "1"],
        Template("{refused} while writing {root}/run/averaged ("),
        setup=lambda ws: read_only(ws, "run"),
    ),
    "plot-positional-encoding read-only output": Case(
        "plot-positional-encoding",
        lambda ws: ["--output", str(ws.root / "locked" / "pe.png")],
        Template("{refused} while writing {root}/locked/pe.png ("),
        setup=lambda ws: read_only(ws, "locked"),
    ),
    "plot-positional-encoding replacing a picture in a read-only folder": Case(
        "plot-positional-encoding",
        lambda ws: ["--output", str(ws.root / "locked" / "pe.png")],
        Template("{refused} while writing {root}/locked/pe.png ("),
        setup=lambda ws: (ws.write("locked/pe.png", b"an earlier picture"), read_only(ws, "locked")),
    ),
    "plot-attention read-only output_dir": Case(
        "plot-attention",
        lambda ws: [ws.model, "A dog.", "--output_dir", str(ws.root / "locked" / "pictures")],
        Template("{refused} while writing {root}/locked/pictures ("),
        setup=lambda ws: read_only(ws, "locked"),
    ),
}
# Files are read through before the model loads, though they are translated buffer by buffer afterwards.
LATE_LATIN1 = "".join(f"Sentence {n}.\n" for n in range(1, 6)).encode() + "Caf\u00e9.\n".encode("latin-1")
STREAMING_CASES: dict[str, Case] = {  # vaswani-translate and vaswani-evaluate's decoding
    "translate buffer 0": Case(
        "translate", lambda ws: [ws.model, "--buffer_lines", "0"], "--buffer_lines must be at least 1, got 0"
    ),
    "translate latin-1 past the first buffer": Case(
        "translate",
        lambda ws: [ws.model, "--buffer_lines", "2", sources(ws, LATE_LATIN1)],
        "test.en is not UTF-8 text (byte 0xe9 on line 6)",
    ),
    "translate latin-1 in a later file": Case(
        "translate",
        lambda ws: [ws.model, sources(ws), ws.write("later.en", LATE_LATIN1), "--buffer_lines", "1"],
        "later.en is not UTF-8 text (byte 0xe9 on line 6)",
    ),
    "evaluate latin-1 source past the first buffer": Case(
        "evaluate",
        lambda ws: [
            ws.model,
            *("--source", sources(ws, LATE_LATIN1), "--references", ws.write("test.de", b"Satz.\n" * 6)),
            *("--name", "x", "--batch_size", "1"),
        ],
        "test.en is not UTF-8 text (byte 0xe9 on line 6)",
    ),
}


def train_on_tsv(content: str) -> Callable[[Workspace], list[str]]:
    """Train on a TSV file of `content` in place of the text pair."""

    def arguments(ws: Workspace) -> list[str]:
        flags = without("--train_target")(ws)
        flags[flags.index("--train_source") + 1] = ws.write("pairs.tsv", content)
        return flags

    return arguments


def model_weights(ws: Workspace) -> str:
    return str(Path(ws.model) / "model.safetensors")


def translate_with(*flags: str) -> Callable[[Workspace], list[str]]:
    return lambda ws: [ws.model, *flags, sources(ws)]


# every value checked for what it is; inputs are what they say
VALUE_CASES: dict[str, Case] = {
    # numbers: finite, and within what the code computes with
    "train time budget 0": Case(
        "train", train_with("--max_train_minutes", "0"), "--max_train_minutes must be positive, got 0.0"
    ),
    "train time budget inf": Case(
        "train", train_with("--max_train_minutes", "inf"), "--max_train_minutes inf: give a finite number"
    ),
    "translate length_penalty nan": Case(
        "translate",
        translate_with("--length_penalty", "nan"),
        "argument --length_penalty/--length-penalty: 'nan': give a finite number (not nan or inf)",
    ),
    "translate length_penalty inf": Case(
        "translate", translate_with("--length-penalty", "inf"), "'inf': give a finite number"
    ),
    "translate length_penalty 1e308": Case(
        "translate",
        translate_with("--length_penalty", "1e308"),
        "--length_penalty 1e+308: give α between -10 and 10 (the paper: 0.6)",
    ),
    "evaluate length_penalty nan": Case(
        "evaluate", evaluate_with("--name", "x", "--length_penalty", "nan"), "'nan': give a finite number"
    ),
    "evaluate length_penalty 1e308": Case(
        "evaluate",
        evaluate_with("--name", "x", "--length_penalty", "1e308"),
        "--length_penalty 1e+308: give α between -10 and 10",
    ),
    "train lr_scale nan": Case(
        "train", train_with("--lr_scale", "nan"), "--lr_scale nan: give a finite number (not nan or inf)"
    ),
    "export max_positions 10^8": Case(
        "export",
        lambda ws: [ws.model, ws.new, "--max_positions", "100000000"],
        "--max_positions 100,000,000: give 1 to 65,536 tokens",
    ),
    "plot-positional-encoding length 10^9": Case(
        "plot-positional-encoding",
        lambda ws: ["--length", "1000000000", "--output", f"{ws.new}.png"],
        "is 512,000,000,000 values; the picture draws at most 4,194,304 (it is 960 × 480 pixels): lower --length",
    ),
    # devices this machine has
    "translate device mps": Case(
        "translate", translate_with("--device", "mps"), "--device mps: this machine has "
    ),
    "translate device tpu": Case(
        "translate", translate_with("--device", "tpu"), "--device tpu: this machine has "
    ),
    "evaluate device cuda:7": Case(
        "evaluate", evaluate_with("--name", "x", "--device", "cuda:7"), "--device cuda:7: this machine has "
    ),
    # formats and files: what they say they are
    "plot-positional-encoding output safetensors": Case(
        "plot-positional-encoding",
        lambda ws: ["--output", f"{ws.new}.safetensors"],
        "new.safetensors: give a file name ending in a format matplotlib writes (",
    ),
    "plot-attention model file": Case(
        "plot-attention",
        lambda ws: [model_weights(ws), "A dog.", "--output_dir", ws.new],
        "model.safetensors is a file: give the folder that holds it",
    ),
    "translate model file": Case(
        "translate",
        lambda ws: [model_weights(ws), sources(ws), "--device", "cpu"],
        "model.safetensors is a file: give the folder that holds it",
    ),
    "translate a folder": Case(
        "translate",
        lambda ws: [ws.model, str(ws.root / "corpus")],
        "corpus is a folder: give a file inside it",
    ),
    "translate old Mac line endings": Case(
        "translate",
        lambda ws: [ws.model, sources(ws, b"I love you.\rNo.\r")],
        "test.en uses \\r (old Mac) line endings: convert them to \\n, e.g. `tr '\\r' '\\n'",
    ),
    "evaluate source is a folder": Case(
        "evaluate",
        lambda ws: [ws.model, "--source", str(ws.root / "corpus"), "--references", sources(ws)],
        "corpus is a folder: give a file inside it",
    ),
    "evaluate empty source": Case(
        "evaluate",
        lambda ws: [
            ws.model,
            "--source",
            ws.write("empty.en", b""),
            "--references",
            ws.write("empty.de", b""),
        ],
        "empty.en is empty: give a test set of at least one line",
    ),
    "evaluate name ..": Case(
        "evaluate",
        evaluate_with("--name", ".."),
        "--name '..': start with an ASCII letter or digit, then use only ASCII letters",
    ),
    "evaluate name not ASCII": Case(
        "evaluate", evaluate_with("--name", "\u00fc"), "--name '\u00fc': start with an ASCII letter or digit"
    ),
    "train three-column TSV": Case(
        "train",
        train_on_tsv("".join(f"Hello {i}.\tHallo {i}.\tCC-BY 2.0\n" for i in range(20))),
        "20 malformed (the first on line 1)",
    ),
    "train old Mac line endings": Case(
        "train",
        corpus_replaced("train_source", b"".join(b"Sentence %d.\r" % i for i in range(150))),
        "replaced-train_source uses \\r (old Mac) line endings",
    ),
    "train dev_size that holds out nothing": Case(
        "train",
        one_pair_repeated,
        "--dev_size 10 holds out no pairs: a source sentence's pairs stay in one split",
    ),
    "train a binary corpus": Case(
        "train",
        corpus_replaced("train_source", b"PK\x03\x04\x00\x00binary\n" * 150),
        "replaced-train_source is not text (it holds NUL bytes, as binary files do)",
    ),
}


def fsmt_in_workspace(**overrides: Any) -> Callable[[Workspace], None]:
    """A small FSMT model saved as `fsmt` in the workspace, changed by FSMTConfig `overrides` (or config.json
    keys FSMTConfig has no field for, e.g. fairseq's `encoder_normalize_before`)."""

    def setup(ws: Workspace) -> None:
        save_small_fsmt(ws.root / "fsmt", **{k: v for k, v in overrides.items() if k not in FAIRSEQ_ONLY})
        config_file = ws.root / "fsmt" / "config.json"
        config = json.loads(config_file.read_text(encoding="utf-8"))
        config.update({k: v for k, v in overrides.items() if k in FAIRSEQ_ONLY})
        config_file.write_text(json.dumps(config), encoding="utf-8")

    return setup


def convert_fsmt_to(out: Callable[[Workspace], str], *flags: str) -> Callable[[Workspace], list[str]]:
    return lambda ws: ["fsmt", str(ws.root / "fsmt"), out(ws), *flags]


FAIRSEQ_ONLY = ("encoder_normalize_before", "decoder_normalize_before")
# vaswani-convert: architectures it cannot hold, untrusted pickles
CONVERT_CASES: dict[str, Case] = {
    "convert fsmt: a model of this package, not FSMT": Case(
        "convert",
        lambda ws: ["fsmt", ws.model, ws.new],
        "is not an FSMT model (its config.json says model_type",
    ),
    "convert fsmt: no such folder": Case(
        "convert", lambda ws: ["fsmt", str(ws.root / "missing"), ws.new], "no such model folder"
    ),
    "convert fsmt: separate vocabulary sizes": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "separate source and target vocabularies",
        setup=fsmt_in_workspace(tgt_vocab_size=200, tie_word_embeddings=False),
    ),
    "convert fsmt: separate vocabularies of one size": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "vocab-src.json and vocab-tgt.json differ",
        setup=lambda ws: save_small_fsmt(ws.root / "fsmt", target_vocabulary=reversed_vocabulary()),
    ),
    "convert fsmt: untied embeddings": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "are not one table",
        setup=fsmt_in_workspace(tie_word_embeddings=False),
    ),
    "convert fsmt: pre-norm": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "pre-norm layers (encoder_normalize_before; the paper's layers are post-norm, §3.1): this package's model "
        "(the paper's architecture) cannot hold it",
        setup=fsmt_in_workspace(encoder_normalize_before=True),
    ),
    "convert fsmt: another activation": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "the activation 'silu' (this model has relu, gelu)",
        setup=fsmt_in_workspace(activation_function="silu"),
    ),
    "convert fsmt: layer drop": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "layer drop (decoder_layerdrop=0.1)",
        setup=fsmt_in_workspace(decoder_layerdrop=0.1),
    ),
    "convert fsmt: output inside the input": Case(
        "convert",
        convert_fsmt_to(lambda ws: str(ws.root / "fsmt" / "converted")),
        "is inside the FSMT model folder",
        setup=fsmt_in_workspace(),
    ),
    "convert fsmt: output onto the input with overwrite": Case(
        "convert",
        convert_fsmt_to(lambda ws: str(ws.root / "fsmt"), "--overwrite"),
        "is the FSMT model folder",
        setup=fsmt_in_workspace(),
    ),
    "convert fsmt: occupied output": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.run),
        "is not empty; choose another folder",
        setup=fsmt_in_workspace(),
    ),
    "convert fsmt: read-only output": Case(
        "convert",
        convert_fsmt_to(lambda ws: str(ws.root / "locked" / "converted")),
        Template("{refused} while writing {root}/locked/converted ("),
        setup=lambda ws: (fsmt_in_workspace()(ws), read_only(ws, "locked")),
    ),
    "convert: no source named": Case("convert", lambda ws: [ws.model, ws.new], "invalid choice"),
}


def reversed_vocabulary() -> dict[str, int]:
    """The small vocabulary with its ids in reverse order: as many tokens, another vocabulary."""
    vocabulary = small_vocabulary()
    return {token: len(vocabulary) - 1 - index for token, index in vocabulary.items()}


CASES |= (
    OUTPUTS_APART_CASES | CACHE_CASES | ALL_OR_NOTHING_CASES | STREAMING_CASES | VALUE_CASES | CONVERT_CASES
)

# --cuda_graphs only where CUDA graphs can decode (the PyTorch engine, float layers, a CUDA GPU;
# these machines have none, so auto and cpu are refused alike)
CUDA_GRAPH_CASES: dict[str, Case] = {
    "translate cuda_graphs on onnxruntime": Case(
        "translate",
        translate_with("--cuda_graphs", "--engine", "onnxruntime"),
        "--cuda_graphs compiles the PyTorch model's decoding step, not --engine onnxruntime's",
    ),
    "evaluate cuda_graphs on ctranslate2": Case(
        "evaluate",
        evaluate_with("--name", "x", "--cuda-graphs", "--engine", "ctranslate2"),
        "drop --cuda_graphs, or use --engine torch",
    ),
    "translate cuda_graphs with int8": Case(
        "translate",
        translate_with("--cuda_graphs", "--quantize", "int8", "--device", "cpu"),
        "--quantize int8 runs on the CPU: drop one of them",
    ),
    "translate cuda_graphs on the cpu": Case(
        "translate",
        translate_with("--cuda_graphs", "--device", "cpu"),
        "on a CUDA GPU (--device cpu): drop --cuda_graphs, or use --device cuda on a machine with one",
    ),
}
CASES |= CUDA_GRAPH_CASES

# vaswani-serve refuses bad options and a model it cannot serve before it listens
SERVE_CASES: dict[str, Case] = {
    "serve port 0": Case("serve", lambda ws: [ws.model, "--port", "0"], "--port must be positive, got 0"),
    "serve decoding_workers 0": Case(
        "serve",
        lambda ws: [ws.model, "--decoding_workers", "0"],
        "--decoding_workers must be at least 1, got 0",
    ),
    "serve max_queue 0": Case(
        "serve", lambda ws: [ws.model, "--max_queue", "0"], "--max_queue must be positive"
    ),
    "serve api_keys missing": Case(
        "serve",
        lambda ws: [ws.model, "--api_keys", ws.new],
        "--api_keys: [Errno 2] No such file or directory",
    ),
    "serve api_keys with a byte-order mark": Case(
        "serve",
        lambda ws: [ws.model, "--api_keys", ws.write("keys.txt", "\ufeffkey-one\n")],
        "starts with a byte-order mark, which would become part of its first key",
    ),
    "serve api_keys a key twice": Case(
        "serve",
        lambda ws: [ws.model, "--api_keys", ws.write("keys.txt", "key-one 10\nkey-two\nkey-one 60\n")],
        "keys.txt, line 3: the key of line 1 again; write each key once",
    ),
    "serve api_keys empty": Case(
        "serve", lambda ws: [ws.model, "--api_keys", ws.write("keys.txt", "# none yet\n")], "holds no API key"
    ),
    "serve api_keys bad rate": Case(
        "serve",
        lambda ws: [ws.model, "--api_keys", ws.write("keys.txt", "key -3\n")],
        "line 1: the requests per minute must be a positive number",
    ),
    "serve an unrecorded language pair": Case(
        "serve",
        lambda ws: [ws.model, "--device", "cpu"],
        "give --source_lang and --target_lang",
        # a save_pretrained folder of another origin: neither a run record nor the config's pair
        lambda ws: (
            (Path(ws.model) / "train_options.json").unlink(),
            unrecord_pair(Path(ws.model) / "config.json"),
        ),
    ),
    "serve a missing model": Case(
        "serve", lambda ws: [ws.new, "--source_lang", "en", "--target_lang", "de"], "no such"
    ),
}
CASES |= SERVE_CASES


# --resume checks the corpora's content, the run's vocabulary and its checkpoint's model against the record; a
# checkpoint with a damaged optimiser or tokenizer file is not continued from; nor is a warm-up the run cannot
# reach accepted
def edit_record(fingerprinted: bool = True, **changes: Any) -> Callable[[Workspace], None]:
    """The run's train_options.json with `changes`, as a hand edit would leave it (not `fingerprinted`), or with its
    fingerprint made anew, for the checks behind it."""

    def setup(ws: Workspace) -> None:
        record = Path(ws.run) / "train_options.json"
        edited = json.loads(record.read_text(encoding="utf-8")) | changes
        if fingerprinted:
            edited[RECORD_FINGERPRINT] = record_fingerprint(edited)
        record.write_text(json.dumps(edited), encoding="utf-8")

    return setup


def corpus_changed_under_its_name(ws: Workspace) -> None:
    """The run recorded as made from the workspace's corpus files; one of them then changes content, not name."""
    files = {name: ws.files[name] for name in ("train_source", "train_target", "test_source", "test_target")}
    fingerprint = {name: hashlib.sha256(Path(path).read_bytes()).hexdigest() for name, path in files.items()}
    edit_record(**files, corpus_sha256=fingerprint)(ws)
    with Path(ws.files["train_target"]).open("a", encoding="utf-8") as target:
        target.write("Ein ganz anderer Satz.\n")


def in_every_checkpoint(name: str) -> Callable[[Workspace], None]:
    return lambda ws: [truncate(checkpoint / name) for checkpoint in Path(ws.run).glob("checkpoint-*")]


RESUME_CASES: dict[str, Case] = {
    "train resume a hand-edited learning rate": Case(
        "train",
        resume_run(),
        "train_options.json was edited after the run wrote it (its record_fingerprint does not match",
        setup=edit_record(fingerprinted=False, lr_scale=2.0),
    ),
    "train resume a hand-edited vocab_size": Case(
        "train",
        resume_run(),
        "train_options.json says vocab_size 500, but the run's vocabulary",
        setup=edit_record(vocab_size=500),
    ),
    "train resume a hand-edited dropout": Case(
        "train",
        resume_run(),
        "config.json is not the model",
        setup=edit_record(dropout=0.25),
    ),
    "train resume a corpus file changed under its name": Case(
        "train",
        resume_run(),
        Template("--train_target {train_target} is not the corpus the run was made with"),
        setup=corpus_changed_under_its_name,
    ),
    "train resume another embedded corpus": Case(
        "train",
        resume_run(),
        "the embedded Tatoeba corpus is not the corpus the run was made with",
        setup=edit_record(corpus_sha256={"embedded_tatoeba": "0" * 64}),
    ),
    "train resume a damaged vocabulary": Case(
        "train",
        resume_run(),
        "tokenizer/tokenizer.json is damaged",
        setup=lambda ws: truncate(Path(ws.run) / "tokenizer" / "tokenizer.json"),
    ),
    "train resume only truncated optimizer states": Case(
        "train",
        resume_run(),
        "can be continued from: ",
        setup=in_every_checkpoint("optimizer.pt"),
    ),
    "train resume only damaged checkpoint tokenizers": Case(
        "train",
        resume_run(),
        "tokenizer.json is cut short or damaged (not JSON)",
        setup=in_every_checkpoint("tokenizer.json"),
    ),
    "train warmup beyond the reach of max_steps": Case(
        "train",
        train_with("--warmup_steps", "1000000000000"),
        "--warmup_steps 1,000,000,000,000 is beyond the reach of --max_steps 2",
    ),
}
CASES |= RESUME_CASES


# A folder must match its weights (evaluation/verification.py); the workspace's model is the
# trained miniature (2 + 2 layers, 4 heads, 400 tokens), with its train_options.json and config.json's fingerprint
def json_edited(name: str, **changes: Any) -> Callable[[Workspace], None]:
    """The model folder's JSON file `name` with `changes` (None: the key removed)."""

    def setup(ws: Workspace) -> None:
        path = Path(ws.model) / name
        content = {**json.loads(path.read_text(encoding="utf-8")), **changes}
        path.write_text(json.dumps({k: v for k, v in content.items() if v is not None}), encoding="utf-8")

    return setup


def without_run_record(*setups: Callable[[Workspace], None]) -> Callable[[Workspace], None]:
    """`setups`, in a model folder without train_options.json (a model saved by save_pretrained or converted)."""

    def setup(ws: Workspace) -> None:
        (Path(ws.model) / "train_options.json").unlink()
        for change in setups:
            change(ws)

    return setup


def weights_edited(change: Callable[[dict[str, torch.Tensor]], None]) -> Callable[[Workspace], None]:
    """The model's model.safetensors rewritten with `change` made to its tensors."""

    def setup(ws: Workspace) -> None:
        tensors = load_file(model_weights(ws))
        change(tensors)
        save_file(tensors, model_weights(ws), metadata={"format": "pt"})

    return setup


def pushed(ws: Workspace) -> list[str]:
    return [ws.model, "--repo_id", "tester/x", "--local_dir", ws.new]


def evaluation_folder(ws: Workspace) -> Path:
    """Where vaswani-evaluate writes by default (beside the model), made here."""
    folder = ws.root / "model-evaluation"
    folder.mkdir(exist_ok=True)
    return folder


def tokenizer_edited(change: Callable[[dict[str, Any]], None]) -> Callable[[Workspace], None]:
    """The model's tokenizer.json with `change` made to its JSON."""

    def setup(ws: Workspace) -> None:
        path = Path(ws.model) / "tokenizer.json"
        content = json.loads(path.read_text(encoding="utf-8"))
        change(content)
        path.write_text(json.dumps(content), encoding="utf-8")

    return setup


def swap_two_words(tokenizer: dict[str, Any]) -> None:
    """Two word pieces' ids exchanged, as `▁love` and `▁hate` were: the same size, other meanings."""
    vocab = tokenizer["model"]["vocab"]
    first, second = [token for token in vocab if token.startswith("▁") and len(token) > 3][:2]
    vocab[first], vocab[second] = vocab[second], vocab[first]


def lowercasing(tokenizer: dict[str, Any]) -> None:
    tokenizer["normalizer"] = {
        "type": "Sequence",
        "normalizers": [tokenizer["normalizer"], {"type": "Lowercase"}],
    }


def header_claims_huge_tensor(ws: Workspace) -> None:
    """model.safetensors whose header says one tensor is 100 GB, its bytes unchanged."""
    path = Path(model_weights(ws))
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    name = next(key for key in header if key != "__metadata__")
    start = header[name]["data_offsets"][0]
    header[name] |= {"shape": [25_000, 1_000_000], "data_offsets": [start, start + 100_000_000_000]}
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data[8 + size :])


def weights_made_a_folder(ws: Workspace) -> None:
    Path(model_weights(ws)).unlink()
    Path(model_weights(ws)).mkdir()


def fsmt_file_written(name: str, content: bytes) -> Callable[[Workspace], None]:
    return lambda ws: (fsmt_in_workspace()(ws), (ws.root / "fsmt" / name).write_bytes(content))


def fairseq_in_workspace(ws: Workspace) -> None:
    """A small fairseq checkpoint folder `fs/fairseq` whose dict.de.txt is not UTF-8."""
    make_fairseq_checkpoint(ws.root / "fs", sizes=HOLDABLE_SIZES)
    (ws.root / "fs" / "fairseq" / "dict.de.txt").write_bytes(b"Haus 12\nH\xe4user 7\n")


MATCH_CASES: dict[str, Case] = {
    # config.json against the weights' names and shapes
    "translate config 3 encoder layers": Case(
        "translate",
        translate_with(),
        "config.json does not belong to the weights in model.safetensors: it says num_encoder_layers 3 (the weights have 2)",
        setup=json_edited("config.json", num_encoder_layers=3),
    ),
    "evaluate config 5 encoder layers": Case(
        "evaluate",
        evaluate_with("--name", "x"),
        "config.json does not belong to the weights in model.safetensors: it says num_encoder_layers 5 (the weights have 2)",
        setup=json_edited("config.json", num_encoder_layers=5),
    ),
    "translate config learned positions": Case(
        "translate",
        translate_with(),
        "config.json does not belong to the weights in model.safetensors: it says position_embedding_type 'learned' (the weights have 'sinusoidal')",
        setup=json_edited("config.json", position_embedding_type="learned"),
    ),
    "translate config model_type marian": Case(
        "translate",
        translate_with(),
        "config.json says model_type 'marian', but the weights are this package's (vaswani_transformer)",
        # its auto_map kept: the folder is refused for what it is, not told to trust code
        setup=json_edited("config.json", model_type="marian"),
    ),
    # what changes no shape: against train_options.json, and config.json's fingerprint
    "translate config 8 heads": Case(
        "translate",
        translate_with(),
        "config.json says num_heads 8 (the run trained with 4), as train_options.json records",
        setup=json_edited("config.json", num_heads=8),
    ),
    "export-onnx config without embedding scale": Case(
        "export-onnx",
        lambda ws: [ws.model, ws.new],
        "config.json says scale_embedding False (the run trained with True)",
        setup=json_edited("config.json", scale_embedding=False),
    ),
    "export config gelu, no run record": Case(
        "export",
        lambda ws: [ws.model, ws.new],
        "config.json has settings other than those the weights were saved with (its architecture_fingerprint differs",
        setup=without_run_record(json_edited("config.json", activation_function="gelu")),
    ),
    "push config auto_map naming a file the folder lacks": Case(
        "push",
        pushed,
        "its auto_map names AutoModel: modeling_other.OtherModel, but the folder holds no modeling_other.py",
        setup=lambda ws: json_edited(
            "config.json",
            auto_map={
                **json.loads((Path(ws.model) / "config.json").read_text())["auto_map"],
                "AutoModel": "modeling_other.OtherModel",
            },
        )(ws),
    ),
    "push config 8 heads, its fingerprint removed": Case(
        "push",
        pushed,
        "config.json says num_heads 8 (the run trained with 4)",
        setup=json_edited("config.json", num_heads=8, **{FINGERPRINT_KEY: None}),
    ),
    "translate config pad_token_id out of range": Case(
        "translate",
        translate_with(),
        "config.json: pad_token_id 100000 is not a token id of the model's 400-token vocabulary (0 to 399)",
        setup=json_edited("config.json", pad_token_id=100000),
    ),
    "translate config max_position_embeddings 10": Case(
        "translate",
        translate_with(),
        "config.json says max_position_embeddings 10 (the run trained with 1024)",
        setup=json_edited("config.json", max_position_embeddings=10),
    ),
    "translate config use_cache no": Case(
        "translate", translate_with(), "config.json: ", setup=json_edited("config.json", use_cache="no")
    ),
    "translate config fast_path yes": Case(
        "translate", translate_with(), "config.json: ", setup=json_edited("config.json", fast_path="yes")
    ),
    "translate config init_std x": Case(
        "translate", translate_with(), "config.json: ", setup=json_edited("config.json", init_std="x")
    ),
    "translate config not an encoder-decoder": Case(
        "translate",
        translate_with(),
        "config.json: is_encoder_decoder must be true for this model, got False",
        setup=json_edited("config.json", is_encoder_decoder=False),
    ),
    # tokenizer.json: the model's own
    "translate tokenizer with two words' ids swapped": Case(
        "translate",
        translate_with(),
        "tokenizer.json is not the tokenizer this model was trained with",
        setup=tokenizer_edited(swap_two_words),
    ),
    "evaluate tokenizer that lowercases": Case(
        "evaluate",
        evaluate_with("--name", "x"),
        "tokenizer.json is not the tokenizer this model was trained with",
        setup=tokenizer_edited(lowercasing),
    ),
    "translate tokenizer.json an empty array": Case(
        "translate",
        translate_with(),
        "tokenizer.json is not a JSON object",
        setup=lambda ws: (Path(ws.model) / "tokenizer.json").write_text("[]"),
    ),
    # model.safetensors: every weight, of its shape, finite
    "translate weights header claims 100 GB": Case(
        "translate", translate_with(), "model.safetensors is damaged", setup=header_claims_huge_tensor
    ),
    "translate weights a folder": Case(
        "translate",
        translate_with(),
        "model.safetensors is not a regular file (a folder, a pipe or a device)",
        setup=weights_made_a_folder,
    ),
    "plot-attention weights missing a tensor": Case(
        "plot-attention",
        lambda ws: [ws.model, "A dog.", "--output_dir", ws.new],
        "model.safetensors is not a whole model of this config: 1 weights missing "
        "(model.decoder.layers.1.feed_forward.fc2.bias)",
        setup=weights_edited(lambda tensors: tensors.pop("model.decoder.layers.1.feed_forward.fc2.bias")),
    ),
    "translate weights with an extra tensor": Case(
        "translate",
        translate_with(),
        "1 weights the model has no place for (model.encoder.layers.0.extra_proj.bias)",
        setup=weights_edited(
            lambda tensors: tensors.update({"model.encoder.layers.0.extra_proj.bias": torch.zeros(64)})
        ),
    ),
    "evaluate NaN weights": Case(
        "evaluate",
        evaluate_with("--name", "x"),
        "the weight model.encoder.layers.0.self_attn.q_proj.weight holds NaN or infinite values",
        setup=weights_edited(
            lambda tensors: (
                tensors["model.encoder.layers.0.self_attn.q_proj.weight"].view(-1)[5].fill_(float("nan"))
            )
        ),
    ),
    # generation_config.json: read, and its settings able to decode
    "translate truncated generation_config.json": Case(
        "translate",
        translate_with(),
        "generation_config.json is damaged, not valid JSON",
        setup=lambda ws: truncate(Path(ws.model) / "generation_config.json"),
    ),
    "translate num_beams 0": Case(
        "translate",
        translate_with(),
        "generation_config.json: num_beams 0 cannot decode: give a whole number of at least 1",
        setup=json_edited("generation_config.json", num_beams=0),
    ),
    "translate num_beams four": Case(
        "translate",
        translate_with(),
        "generation_config.json: num_beams 'four' cannot decode: give a whole number of at least 1",
        setup=json_edited("generation_config.json", num_beams="four"),
    ),
    "translate min_length 100000": Case(
        "translate",
        translate_with(),
        "generation_config.json: min_length 100,000 is longer than any translation of this model",
        setup=json_edited("generation_config.json", min_length=100000),
    ),
    "translate cache_implementation nonsense": Case(
        "translate",
        translate_with(),
        "generation_config.json: Invalid `cache_implementation` (nonsense)",
        setup=json_edited("generation_config.json", cache_implementation="nonsense"),
    ),
    "translate forced_bos_token_id 99999": Case(
        "translate",
        translate_with(),
        "generation_config.json: forced_bos_token_id 99999 is not a token id of the model's",
        setup=json_edited("generation_config.json", forced_bos_token_id=99999),
    ),
    "evaluate max_length 1": Case(
        "evaluate",
        evaluate_with("--name", "x"),
        "generation_config.json: max_length 1 cannot decode: give a whole number of at least 2",
        setup=json_edited("generation_config.json", max_length=1),
    ),
    # vaswani-convert's inputs
    "convert fsmt garbage merges.txt": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "merges.txt: merge 1 ('Lorem ipsum') is not a BPE merge of two known symbols",
        setup=fsmt_file_written("merges.txt", b"Lorem ipsum dolor sit amet\nconsectetur adipiscing elit\n"),
    ),
    "convert fsmt merges.txt not UTF-8": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "merges.txt is not UTF-8 text",
        setup=fsmt_file_written("merges.txt", b"t h\n\xe4 h\n"),
    ),
    "convert fsmt truncated model.safetensors": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "model.safetensors is damaged",
        setup=lambda ws: (fsmt_in_workspace()(ws), truncate(ws.root / "fsmt" / "model.safetensors")),
    ),
    "convert fairseq dict.de.txt not UTF-8": Case(
        "convert",
        lambda ws: ["fairseq", str(ws.root / "fs" / "fairseq"), ws.new],
        "dict.de.txt is not UTF-8 text (byte 0xe4 on line 2): use the archive's own file.",
        setup=fairseq_in_workspace,
    ),
}
CASES |= MATCH_CASES


# No folder runs code unasked. Each trap is a folder whose JSON names code of its own (evil.py,
# which writes CODE_RAN into the workspace, so that the snapshot comparison proves it never ran); the files
# read before loading are named when damaged.
EVIL_CODE = """import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import PreTrainedTokenizerFast
class EvilTok(PreTrainedTokenizerFast): pass
"""
EVIL_TOKENIZER = {"auto_map": {"AutoTokenizer": ["evil.EvilTok", None]}, "tokenizer_class": "EvilTok"}


def trapped(
    folder: Callable[[Workspace], Path], file_name: str, **changes: Any
) -> Callable[[Workspace], None]:
    """`file_name` of the folder with `changes` (the auto_map naming evil.py), and evil.py beside it."""

    def setup(ws: Workspace) -> None:
        path = folder(ws) / file_name
        content = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        path.write_text(json.dumps({**content, **changes}), encoding="utf-8")
        marker = str(ws.root / "CODE_RAN")  # an absolute path: transformers imports a copy of evil.py
        (folder(ws) / "evil.py").write_text(EVIL_CODE.format(marker=marker), encoding="utf-8")

    return setup


def model_folder(ws: Workspace) -> Path:
    return Path(ws.model)


def fsmt_folder(ws: Workspace) -> Path:
    return ws.root / "fsmt"


TOKENIZER_TRAP = trapped(model_folder, "tokenizer_config.json", **EVIL_TOKENIZER)


def fsmt_trap(ws: Workspace) -> None:
    fsmt_in_workspace()(ws)
    trapped(fsmt_folder, "tokenizer_config.json", **EVIL_TOKENIZER)(ws)


def tokenizer_config(content: bytes) -> Callable[[Workspace], None]:
    return lambda ws: (Path(ws.model) / "tokenizer_config.json").write_bytes(content)


TRUST_CASES: dict[str, Case] = {
    "translate: the tokenizer asks to run the folder's code": Case(
        "translate",
        translate_with(),
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. Pass --trust_remote_code",
        setup=TOKENIZER_TRAP,
    ),
    "translate onnxruntime: the tokenizer asks to run the folder's code": Case(
        "translate",
        translate_with("--engine", "onnxruntime"),
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. Pass --trust_remote_code",
        setup=TOKENIZER_TRAP,
    ),
    "translate: the tokenizer asks in auto_map's old list form": Case(
        "translate",
        translate_with(),
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok)",
        setup=trapped(model_folder, "tokenizer_config.json", auto_map=["evil.EvilTok", None]),
    ),
    "evaluate: the tokenizer asks to run the folder's code": Case(
        "evaluate",
        evaluate_with("--name", "x"),
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. Pass --trust_remote_code",
        setup=TOKENIZER_TRAP,
    ),
    "evaluate ctranslate2: the tokenizer asks to run the folder's code": Case(
        "evaluate",
        evaluate_with("--name", "x", "--engine", "ctranslate2"),
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. Pass --trust_remote_code",
        setup=TOKENIZER_TRAP,
    ),
    "evaluate: config.json names a tokenizer class of the folder": Case(
        "evaluate",
        evaluate_with("--name", "x"),
        "config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok)",
        setup=trapped(model_folder, "config.json", auto_map={"AutoTokenizer": ["evil.EvilTok", None]}),
    ),
    "translate: config.json of another model_type names the family's file": Case(
        "translate",
        translate_with(),
        "config.json says model_type 'evil', but the weights are this package's (vaswani_transformer)",
        setup=trapped(model_folder, "config.json", model_type="evil"),
    ),
    "translate: a processor file asks to run the folder's code": Case(
        "translate",
        translate_with(),
        "processor_config.json asks to run code of the model folder (AutoProcessor: evil.EvilTok)",
        setup=trapped(model_folder, "processor_config.json", auto_map={"AutoProcessor": "evil.EvilTok"}),
    ),
    "export: the tokenizer asks to run the folder's code": Case(
        "export",
        lambda ws: [ws.model, ws.new],
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. Pass --trust_remote_code",
        setup=TOKENIZER_TRAP,
    ),
    "export-onnx: the tokenizer asks to run the folder's code": Case(
        "export-onnx",
        lambda ws: [ws.model, ws.new],
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. Pass --trust_remote_code",
        setup=TOKENIZER_TRAP,
    ),
    "plot-attention: the tokenizer asks to run the folder's code": Case(
        "plot-attention",
        lambda ws: [ws.model, "I love you.", "--output_dir", ws.new],
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. Pass --trust_remote_code",
        setup=TOKENIZER_TRAP,
    ),
    "push local_dir: the tokenizer asks to run the folder's code": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "tester/x", "--local_dir", ws.new],
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. This command runs no model folder's code",
        setup=TOKENIZER_TRAP,
    ),
    "push: the tokenizer asks to run the folder's code": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "tester/x"],
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. This command runs no model folder's code",
        setup=TOKENIZER_TRAP,
    ),
    "convert fsmt: the tokenizer asks to run the folder's code": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "tokenizer_config.json asks to run code of the model folder (AutoTokenizer: evil.EvilTok); "
        "nothing was loaded. This command runs no model folder's code",
        setup=fsmt_trap,
    ),
    # what is read before loading is named when damaged
    "translate: tokenizer_config.json not UTF-8": Case(
        "translate",
        translate_with(),
        "tokenizer_config.json is damaged, not valid JSON ('utf-8' codec can't decode",
        setup=tokenizer_config(b'{"tokenizer_class": "\xff\xfe"}'),
    ),
    "evaluate: tokenizer_config.json not JSON": Case(
        "evaluate",
        evaluate_with("--name", "x"),
        "tokenizer_config.json is damaged, not valid JSON (Expecting value: line 1 column 1 (char 0)): copy "
        "the model folder anew from where it came, or save it again (save_pretrained)",
        setup=tokenizer_config(b"tokenizer_class = TokenizersBackend\n"),
    ),
}
CASES |= TRUST_CASES


def claim_held(output: Callable[[Workspace], Path | str]) -> Callable[[Workspace], None]:
    """Another writer holds the claim on `output` (`claims.claimed_output`), as a second process running the same
    command would, until the workspace goes."""

    def setup(ws: Workspace) -> None:
        claim = claimed_output(Path(output(ws)), "OUTPUT")
        claim.__enter__()
        weakref.finalize(ws, claim.__exit__, None, None, None)

    return setup


# Writers of the same output exclude each other; the claim is taken before the long work
WRITERS_CASES: dict[str, Case] = {
    "evaluate --name while another evaluation of that name runs": Case(
        "evaluate",
        evaluate_with("--name", "x"),
        "is being written by another process (PID",
        setup=claim_held(lambda ws: evaluation_folder(ws) / "x_scores.json"),
    ),
    "evaluate --overwrite while another evaluation runs": Case(
        "evaluate",
        evaluate_with("--overwrite"),
        "is being written by another process (PID",
        setup=claim_held(lambda ws: evaluation_folder(ws) / "scores.json"),
    ),
    "export while another export into the folder runs": Case(
        "export",
        lambda ws: [ws.model, ws.new],
        "is being written by another process (PID",
        setup=claim_held(lambda ws: ws.new),
    ),
    "export --overwrite while another export into the folder runs": Case(
        "export",
        lambda ws: [ws.model, ws.new, "--overwrite"],
        "is being written by another process (PID",
        setup=lambda ws: (
            ws.write("new/model.bin", b"the other export's"),
            claim_held(lambda ws: ws.new)(ws),
        ),
    ),
    "export-onnx while another export into the folder runs": Case(
        "export-onnx",
        lambda ws: [ws.model, ws.new],
        "is being written by another process (PID",
        setup=claim_held(lambda ws: ws.new),
    ),
    "average while another average into the folder runs": Case(
        "average",
        lambda ws: [ws.run, "--last", "1", "--output", ws.new],
        "is being written by another process (PID",
        setup=claim_held(lambda ws: ws.new),
    ),
    "average into the default folder while another average runs": Case(
        "average",
        lambda ws: [ws.run, "--last", "1"],
        "is being written by another process (PID",
        setup=claim_held(lambda ws: Path(ws.run) / "averaged"),
    ),
    "convert while another conversion into the folder runs": Case(
        "convert",
        convert_fsmt_to(lambda ws: ws.new),
        "is being written by another process (PID",
        setup=lambda ws: (fsmt_in_workspace()(ws), claim_held(lambda ws: ws.new)(ws)),
    ),
    "push --local_dir while another push writes the folder": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "tester/x", "--local_dir", ws.new],
        "is being written by another process (PID",
        setup=claim_held(lambda ws: ws.new),
    ),
    "push --local_dir in a read-only folder": Case(
        "push",
        lambda ws: [ws.model, "--repo_id", "tester/x", "--local_dir", str(ws.root / "locked" / "hub")],
        Template("{refused} while writing {root}/locked/hub ("),
        setup=lambda ws: read_only(ws, "locked"),
    ),
}
CASES |= WRITERS_CASES


# Every tracker --report_to names is checked before any data preparation or run folder (wandb and
# mlflow are in no extra of this package)
TRACKER_CASES: dict[str, Case] = {
    "train --report_to wandb without wandb": Case(
        "train",
        train_with("--report_to", "wandb"),
        "--report_to wandb needs wandb, which is not installed: pip install wandb.",
    ),
    "train --report_to tensorboard mlflow without mlflow": Case(
        "train",
        train_with("--report_to", "tensorboard", "mlflow"),
        "--report_to mlflow needs mlflow, which is not installed: pip install mlflow.",
    ),
    "train --report_to a tracker transformers does not know": Case(
        "train",
        train_with("--report_to", "wandbb"),
        "--report_to wandbb: not a tracker transformers logs to; choose from azure_ml, comet_ml, mlflow,",
    ),
}
CASES |= TRACKER_CASES


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with its content's hash (links: their target; folders: a mark)."""
    state = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            state[name] = f"link to {os.readlink(path)}"
        elif path.is_dir():
            state[name] = "folder"
        elif not path.is_file():  # a pipe: reading it would wait for a writer
            state[name] = "not a regular file"
        else:
            state[name] = hashlib.sha1(path.read_bytes()).hexdigest()
    return state


@pytest.fixture
def workspace(trained_run, tmp_path: Path) -> Iterator[Workspace]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    ws = Workspace(tmp_path, tatoeba_files(corpus, 150))
    shutil.copytree(trained_run.model_dir, tmp_path / "model")
    shutil.copytree(trained_run.output_dir, tmp_path / "run", ignore=shutil.ignore_patterns("final", "runs"))
    yield ws


@pytest.fixture
def nothing_long_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training and decoding fail the test if they start: every bad input is found before them."""
    monkeypatch.setattr(transformers.Trainer, "train", lambda *a, **k: pytest.fail("training started"))
    monkeypatch.setattr(
        VaswaniTransformerForConditionalGeneration,
        "generate",
        lambda *a, **k: pytest.fail("decoding started"),
    )
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", "/nonexistent/token")  # no stored login either


def test_there_are_at_least_100_cases_over_every_command() -> None:
    assert len(CASES) >= 100 and {case.command for case in CASES.values()} == set(COMMANDS)


@pytest.mark.parametrize("name", CASES)
def test_bad_input_exits_2_naming_it_before_long_work_and_writes_nothing(
    name: str, workspace: Workspace, nothing_long_starts, capsys
) -> None:
    case = CASES[name]
    if case.setup is not None:
        case.setup(workspace)
    arguments = case.arguments(workspace)
    before = snapshot(workspace.root)
    try:
        status = COMMANDS[case.command](arguments)
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    error = capsys.readouterr().err
    message = case.message.format(workspace) if isinstance(case.message, Template) else case.message
    assert status == 2, error
    assert message in error and "Traceback" not in error
    assert snapshot(workspace.root) == before  # nothing written, nothing lost
