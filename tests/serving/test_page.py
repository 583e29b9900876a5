"""The web page of `vaswani-serve` and its API pages in a real browser: Debian's headless Chromium driven by
Playwright, at a desktop's width and a phone's. A paragraph typed into the box comes back translated sentence by
sentence, as `/translate` translates it, with the chosen sentence's encoder-decoder attention drawn as a heat-map
whose layer and head can be chosen; under an engine without attention the page says so in one line; `/docs` draws
the OpenAPI pages; every asset comes from the server itself."""

import shutil
from pathlib import Path

import httpx
import pytest
import torch

from tests.conftest import SENTENCES
from tests.serving.server_process import Served, serving
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
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}  # a phone's CSS pixels
FLAGS = ("--source_lang", "en", "--target_lang", "de", "--num_beams", "1")
PARAGRAPH = f"{SENTENCES[0]} {SENTENCES[2]}"


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="the dev extra installs playwright")
    if not shutil.which("chromium"):
        pytest.fail("Debian's chromium is missing: apt-get install chromium (.ci/run does)")
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def open_page(browser, server: Served, viewport: dict, path: str = "/"):
    """The page at `viewport`'s size, and the list of the requests it sent anywhere but the server."""
    page = browser.new_page(viewport=viewport, is_mobile=viewport is PHONE, has_touch=viewport is PHONE)
    elsewhere: list[str] = []
    page.on(
        "request",
        lambda request: None if request.url.startswith(server.url) else elsewhere.append(request.url),
    )
    page.goto(f"{server.url}{path}")
    return page, elsewhere


def fits_its_width(page) -> bool:
    """Nothing wider than the viewport: the page does not render at a desktop's 980 px on a phone."""
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_page_translates_by_sentences_and_draws_the_chosen_sentence_s_attention(
    random_folder: Path, tmp_path: Path, browser, viewport: dict
) -> None:
    engine = load_engine(random_folder, EngineOptions(device="cpu", dtype="float32"))
    first, second = engine.translate([SENTENCES[0], SENTENCES[2]], num_beams=1)
    (maps,) = attention_maps(engine.model, engine.tokenizer, [SENTENCES[2]], [second])
    with serving(random_folder, *FLAGS) as server:
        page, elsewhere = open_page(browser, server, viewport)
        assert page.evaluate("window.innerWidth") == viewport["width"]  # the viewport tag: not 980 px wide
        page.fill("#source", PARAGRAPH)
        page.click("#translate")
        page.wait_for_selector("#attention:not([hidden])", timeout=120_000)
        libretranslate = httpx.post(f"{server.url}/translate", json={"q": PARAGRAPH}, timeout=60)
        assert (
            page.text_content("#translation")
            == f"{first} {second}"
            == libretranslate.json()["translatedText"]
        )
        assert page.text_content("#error") == "" and not page.is_visible("#no-attention")
        assert page.text_content("#pair") == "en → de"
        sentences = page.eval_on_selector_all("#sentence option", "options => options.map(o => o.text)")
        assert sentences == [f"1: {SENTENCES[0]}", f"2: {SENTENCES[2]}"] and page.is_visible("#sentence")
        drawn = page.eval_on_selector("#heatmap", "canvas => canvas.toDataURL()")
        page.select_option("#sentence", "1")
        page.wait_for_function(f"document.getElementById('heatmap').toDataURL() !== {drawn!r}")
        layers = page.eval_on_selector_all("#layer option", "options => options.map(o => o.value)")
        heads = page.eval_on_selector_all("#head option", "options => options.map(o => o.value)")
        assert len(layers) == len(maps.cross) and len(heads) == maps.cross[0].shape[0] + 1  # + the mean
        drawn = page.eval_on_selector("#heatmap", "canvas => canvas.toDataURL()")
        page.select_option("#head", "0")
        page.select_option("#layer", "0")
        assert page.eval_on_selector("#heatmap", "canvas => canvas.toDataURL()") != drawn  # another map drawn
        assert fits_its_width(page)
        page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        page.close()
        answer = httpx.post(
            f"{server.url}/v1/attention", json={"q": SENTENCES[2], "translation": second}, timeout=60
        )
    weights = answer.json()
    assert weights["source_tokens"] == maps.source_tokens and weights["target_tokens"] == maps.target_tokens
    assert torch.allclose(torch.tensor(weights["cross"]), torch.stack(maps.cross), atol=1e-5)
    assert elsewhere == []  # no CDN: nothing came from anywhere but the server


def test_without_the_pytorch_model_the_page_says_so_in_one_line_and_the_api_pages_draw_offline(
    random_folder: Path, tmp_path: Path, browser
) -> None:
    """Under --engine ctranslate2 the page showed a red error after every translation; /docs was blank offline
    (its assets came from a CDN)."""
    flags = (*FLAGS, "--engine", "ctranslate2", "--ctranslate2_cache", str(tmp_path / "cache"))
    with serving(random_folder, *flags) as server:
        page, elsewhere = open_page(browser, server, PHONE)
        page.fill("#source", PARAGRAPH)
        page.click("#translate")
        page.wait_for_function("document.getElementById('translation').textContent !== ''", timeout=120_000)
        note = page.text_content("#no-attention")
        assert "--engine torch" in note and "\n" not in note.strip() and page.is_visible("#no-attention")
        assert page.text_content("#error") == "" and page.is_hidden("#attention")
        assert fits_its_width(page)
        page.close()
        docs, docs_elsewhere = open_page(browser, server, DESKTOP, "/docs")
        docs.wait_for_selector(".swagger-ui .opblock", timeout=60_000)
        assert "/translate" in docs.text_content(".swagger-ui")
    assert elsewhere == [] and docs_elsewhere == []
