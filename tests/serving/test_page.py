"""The web page of `vaswani-serve` in a real browser: Debian's headless Chromium driven by Playwright.
A sentence typed into the box comes back translated, with its encoder-decoder attention drawn as a heat-map whose
layer and head can be chosen; every asset comes from the server itself."""

import shutil
from pathlib import Path

import httpx
import pytest
import torch

from tests.conftest import SENTENCES
from tests.serving.server_process import serving
from vaswani_transformer.engines import EngineOptions, load_engine
from vaswani_transformer.plotting import attention_maps

pytestmark = pytest.mark.slow  # a server process and headless Chromium

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def test_the_page_translates_and_draws_the_attention_of_the_chosen_layer_and_head(
    random_folder: Path, tmp_path: Path
) -> None:
    playwright = pytest.importorskip("playwright.sync_api", reason="the dev extra installs playwright")
    if not shutil.which("chromium"):
        pytest.fail("Debian's chromium is missing: apt-get install chromium (.ci/run does)")
    engine = load_engine(random_folder, EngineOptions(device="cpu", dtype="float32"))
    expected = engine.translate([SENTENCES[0]], num_beams=1)[0]
    (maps,) = attention_maps(engine.model, engine.tokenizer, [SENTENCES[0]], [expected])
    flags = ("--source_lang", "en", "--target_lang", "de", "--num_beams", "1")
    with serving(random_folder, *flags) as server, playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        elsewhere = []
        page.on(
            "request",
            lambda request: None if request.url.startswith(server.url) else elsewhere.append(request.url),
        )
        page.goto(server.url)
        page.fill("#source", SENTENCES[0])
        page.click("#translate")
        page.wait_for_selector("#attention:not([hidden])", timeout=120_000)
        assert page.text_content("#translation") == expected
        assert page.text_content("#error") == ""
        assert page.text_content("#pair") == "en → de"
        layers = page.eval_on_selector_all("#layer option", "options => options.map(o => o.value)")
        heads = page.eval_on_selector_all("#head option", "options => options.map(o => o.value)")
        assert len(layers) == len(maps.cross) and len(heads) == maps.cross[0].shape[0] + 1  # + the mean
        drawn = page.eval_on_selector("#heatmap", "canvas => canvas.toDataURL()")
        page.select_option("#head", "0")
        page.select_option("#layer", "0")
        assert page.eval_on_selector("#heatmap", "canvas => canvas.toDataURL()") != drawn  # another map drawn
        page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        browser.close()
        answer = httpx.post(
            f"{server.url}/v1/attention", json={"q": SENTENCES[0], "translation": expected}, timeout=60
        )
    weights = answer.json()
    assert weights["source_tokens"] == maps.source_tokens and weights["target_tokens"] == maps.target_tokens
    assert torch.allclose(torch.tensor(weights["cross"]), torch.stack(maps.cross), atol=1e-5)
    assert elsewhere == []  # no CDN: nothing came from anywhere but the server
