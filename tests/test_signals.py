"""How a console command ends when it is stopped from outside (vaswani_transformer.cli.command): one line and 130
for Ctrl-C, 143 for SIGTERM, a quiet 141 when its reader goes away; never a traceback, from its first instruction
(while it imports torch and transformers) to its last."""

import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration, translate
from vaswani_transformer.cli.command import Interrupted, command

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
# The commands see this checkout's code, as the tests do, and never the network.
ENV = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
WAIT = 300  # seconds a command may take on a busy machine


def as_in_a_terminal() -> None:
    """A child's signals as a shell sets them for a command in the foreground: a test run as a background job
    (`pytest &` in a script) inherits SIGINT ignored, and its commands would keep ignoring it (as they should)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_is_one_line_and_130(capsys: pytest.CaptureFixture[str]) -> None:
    @command
    def main(argv: Sequence[str] | None = None) -> int:
        raise KeyboardInterrupt

    assert main([]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_an_interrupt_with_advice_says_it(capsys: pytest.CaptureFixture[str]) -> None:
    @command
    def main(argv: Sequence[str] | None = None) -> int:
        raise Interrupted("the run can continue with --resume")

    assert main([]) == 130
    assert capsys.readouterr().err.strip() == "interrupted; the run can continue with --resume"


def test_sigterm_runs_the_cleanup_on_the_way_out_and_is_143(capsys: pytest.CaptureFixture[str]) -> None:
    cleaned = []

    @command
    def main(argv: Sequence[str] | None = None) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
            return 0
        finally:
            cleaned.append(True)

    before = signal.getsignal(signal.SIGTERM)
    assert main([]) == 143
    assert cleaned == [True] and capsys.readouterr().err.strip() == "terminated"
    assert signal.getsignal(signal.SIGTERM) == before  # the command's handler does not outlive it


@pytest.mark.slow  # commands in fresh interpreters
def test_a_closed_standard_output_ends_quietly_with_141() -> None:
    script = (
        "from vaswani_transformer.cli.command import command\n"
        "@command\n"
        "def main(argv=None):\n"
        "    for n in range(10**6):\n"
        "        print(n)\n"
        "    return 0\n"
        "raise SystemExit(main())\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout is not None
    writer.stdout.readline()
    writer.stdout.close()  # what `| head -1` does
    _, error = writer.communicate(timeout=60)
    assert writer.returncode == 141 and error == b""


def console_script(name: str, folder: Path) -> Path:
    """The script pip writes for the console command `name` (pyproject.toml's target), written into `folder`."""
    module, function = SCRIPTS[name].split(":")
    script = folder / name
    script.write_text(
        f"#!{sys.executable}\nimport re\nimport sys\nfrom {module} import {function}\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        f"    sys.exit({function}())\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


def imported(line: str) -> str:
    """The module an `-X importtime` line of standard error says was imported ("" for any other line)."""
    return line.rpartition("|")[2].strip() if line.startswith("import time:") else ""


# Points during the import of torch and transformers (seconds, before the command's own code runs): each is
# the moment the module is imported, which `python -X importtime` says on standard error as it happens.
DURING_THE_IMPORTS = {
    "early": lambda module: module.startswith("transformers."),  # the first of transformers' modules
    "middle": lambda module: module == "torch",  # torch whole, transformers under way
    "late": lambda module: module == "vaswani_transformer.modeling",  # the package's own model code
}


@pytest.mark.slow  # a command in a fresh interpreter per point
@pytest.mark.parametrize("point", sorted(DURING_THE_IMPORTS))
@pytest.mark.parametrize(
    ("sent", "status", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_signal_while_a_command_imports_ends_it_with_one_line(
    tmp_path: Path, point: str, sent: signal.Signals, status: int, said: str, letter_tokenizer
) -> None:
    """Ctrl-C or SIGTERM while the command imports torch or transformers: one line, no KeyboardInterrupt
    traceback, the signal's status."""
    torch_model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=30))
    torch_model.save_pretrained(tmp_path / "model")
    letter_tokenizer.save_pretrained(tmp_path / "model")
    script = console_script("vaswani-translate", tmp_path)
    reached = threading.Event()
    lines: list[str] = []
    process = subprocess.Popen(
        [str(script), str(tmp_path / "model"), "--device", "cpu"],
        stdin=subprocess.PIPE,  # left open: a command past its imports waits for input
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**ENV, "PYTHONPROFILEIMPORTTIME": "1"},
        preexec_fn=as_in_a_terminal,
    )
    assert process.stderr is not None

    def read_standard_error() -> None:  # all of it, so that the child never waits on a full pipe
        assert process.stderr is not None
        for raw in process.stderr:
            lines.append(raw.decode(errors="replace"))
            if DURING_THE_IMPORTS[point](imported(lines[-1])):
                reached.set()

    reader = threading.Thread(target=read_standard_error, daemon=True)
    reader.start()
    try:
        assert reached.wait(WAIT), "the command never imported the module"
        process.send_signal(sent)
        process.wait(timeout=WAIT)
        reader.join(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
    said_lines = [line.strip() for line in lines if line.strip() and not imported(line)]
    assert process.returncode == status, "".join(said_lines)[-2000:]
    assert said_lines == [said]  # one line: no traceback, nothing of the command's own work


# --- Ctrl-C while decoding


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process, as in a command in the foreground, also where the tests run
    with it ignored (a background job)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_batches_decode_in_threads_ends_them_at_their_next_step(
    letter_tokenizer, ctrl_c_raises: None
) -> None:
    """Two batches decode in worker threads while the main thread waits for them. Before, Ctrl-C raised in the
    main thread, which then waited for both batches to finish (a long batch on a busy CPU: minutes); now each
    ends at its next decoding step, and no decoding thread is left."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=30)).eval()
    steps: list[str] = []
    signalled_at = 10

    class CountSteps(StoppingCriteria):
        """Counts the decoding steps of every batch, and sends SIGINT at the tenth, while both decode."""

        def __call__(
            self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs
        ) -> torch.BoolTensor:
            steps.append(threading.current_thread().name)
            if len(steps) == signalled_at:
                os.kill(os.getpid(), signal.SIGINT)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    long = 400  # new tokens every batch must decode: several seconds, and more on a busy machine
    with pytest.raises(KeyboardInterrupt):
        translate(
            ["a b c d", "e f g", "h i j k l", "m n"],
            model,
            letter_tokenizer,
            batch_size=2,
            workers=2,
            num_beams=2,
            min_new_tokens=long,
            max_new_tokens=long,
            stopping_criteria=StoppingCriteriaList([CountSteps()]),
        )
    assert len(set(steps)) == 2  # both batches were decoding, each in a thread of its own
    assert len(steps) <= signalled_at + 2 * 2  # at most a step or two more each, not the other 2 × 390
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("translate")]
