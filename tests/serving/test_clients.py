"""`vaswani-serve` as its clients see it: the real server in a subprocess, talked to by LibreTranslate's
own clients (libretranslatepy, deep-translator) and httpx; its translations are `translate()`'s."""

import json
import threading
from pathlib import Path

import httpx
import pytest
import torch
from deep_translator import LibreTranslator
from libretranslatepy import LibreTranslateAPI

from tests.conftest import SENTENCES
from tests.serving.server_process import Served, serving
from vaswani_transformer.engines import EngineOptions, load_engine

pytestmark = pytest.mark.slow  # a server process (a fresh interpreter loading a model)

LIMITS = ("--max_body_bytes", "4096", "--max_characters", "1000", "--max_sentences", "8", "--max_beams", "6")


class Greedy:
    """The engine's `translate` with the server's --num_beams 1 (greedy keeps the tests short on a busy machine)."""

    def __init__(self, engine) -> None:
        self.model, self.tokenizer, self._engine = engine.model, engine.tokenizer, engine

    def translate(self, texts, **options):
        return self._engine.translate(texts, **{"num_beams": 1, **options})


@pytest.fixture(scope="module")
def engine(random_folder: Path):
    return Greedy(load_engine(random_folder, EngineOptions(device="cpu", dtype="float32")))


@pytest.fixture(scope="module")
def server(random_folder: Path) -> Served:
    # sentences wait up to 300 ms for others, so that requests sent together are decoded together
    flags = (
        "--source_lang",
        "en",
        "--target_lang",
        "de",
        "--num_beams",
        "1",
        "--max_wait_ms",
        "300",
        *LIMITS,
    )
    with serving(random_folder, *flags) as served:
        yield served


def test_libretranslate_s_own_clients_get_translate_s_translations(server: Served, engine) -> None:
    """One request at a time, each decoded alone: each is `translate()` of its sentence."""
    api = LibreTranslateAPI(server.url)
    expected = [engine.translate([sentence])[0] for sentence in SENTENCES[:3]]
    assert [api.translate(sentence, "en", "de") for sentence in SENTENCES[:3]] == expected
    assert api.languages() == [{"code": "en", "name": "English", "targets": ["de"]}]
    translator = LibreTranslator(source="en", target="de", custom_url=f"{server.url}/", api_key="unused")
    assert translator.translate(SENTENCES[3]) == engine.translate([SENTENCES[3]])[0]


def test_a_paragraph_is_translated_sentence_by_sentence_with_its_own_spacing(server: Served, engine) -> None:
    """Before splitting, a paragraph came back as one run-on sentence."""
    paragraph = f"{SENTENCES[0]}  {SENTENCES[1]}\n{SENTENCES[2]} "
    one, two, three, four = engine.translate([*SENTENCES[:3], "No."])  # a request's sentences: one batch
    body = {"q": [paragraph, "No."], "source": "en", "target": "de"}
    answer = httpx.post(f"{server.url}/translate", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"translatedText": [f"{one}  {two}\n{three} ", four]}
    native = httpx.post(f"{server.url}/v1/translate", json={"q": paragraph}, timeout=60).json()
    assert (
        native["translations"][0]["translation"] == engine.translate([paragraph])[0]
    )  # not split unless asked


def test_the_native_api_decodes_with_the_request_s_options_and_scores_each_sentence(
    server: Served, engine, random_folder: Path
) -> None:
    body = {"q": SENTENCES[:4], "num_beams": 1, "max_new_tokens": 12, "split_sentences": True}
    answer = httpx.post(f"{server.url}/v1/translate", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    expected = engine.translate(SENTENCES[:4], num_beams=1, max_new_tokens=12)
    assert [item["translation"] for item in result["translations"]] == expected
    assert result["decoding"]["num_beams"] == 1
    model, tokenizer = engine.model, engine.tokenizer
    for sentence, item in zip(SENTENCES[:4], result["translations"], strict=True):
        (scored,) = item["sentences"]
        labels = tokenizer([scored["translation"]], return_tensors="pt")["input_ids"]
        with torch.no_grad():  # each alone, without padding: the mean log-probability of its tokens
            logits = model(**tokenizer([sentence], return_tensors="pt"), labels=labels).logits
        expected_score = logits.log_softmax(-1).gather(-1, labels.unsqueeze(-1)).mean().item()
        assert scored["score"] == pytest.approx(expected_score, abs=1e-4)


def test_requests_sent_together_are_decoded_together_and_each_gets_its_own(server: Served, engine) -> None:
    """A sentence's translation does not depend on the sentences it decodes beside (each sentence's own output limit,
    §6.1); here the limit is fixed (max_new_tokens) to keep the decoding short."""
    steps_before, sentences_before = (
        server.metric("vaswani_batch_sentences_count"),
        server.metric("vaswani_batch_sentences_sum"),
    )
    answers: dict[int, str] = {}
    start = threading.Barrier(5)

    def ask(index: int) -> None:
        start.wait()
        body = {"q": SENTENCES[index], "max_new_tokens": 10}
        response = httpx.post(f"{server.url}/v1/translate", json=body, timeout=120)
        answers[index] = response.json()["translations"][0]["translation"]

    threads = [threading.Thread(target=ask, args=(index,)) for index in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert answers == dict(enumerate(engine.translate(SENTENCES[:5], max_new_tokens=10)))
    steps = server.metric("vaswani_batch_sentences_count") - steps_before
    assert server.metric("vaswani_batch_sentences_sum") - sentences_before > steps  # some shared their steps


LONG = "a " * 2100
REFUSALS = {
    "malformed JSON": ("/translate", {"content": b'{"q": ', "headers": {"content-type": "application/json"}}, 400, "not valid JSON"),
    "not UTF-8": ("/translate", {"content": b'{"q": "\xff"}', "headers": {"content-type": "application/json"}}, 400, "not UTF-8"),
    "q of a wrong type": ("/translate", {"json": {"q": 3, "source": "en", "target": "de"}}, 400, "q must be a string"),
    "no q": ("/translate", {"json": {"source": "en", "target": "de"}}, 400, "missing q"),
    "another pair": ("/translate", {"json": {"q": "Hi.", "source": "fr", "target": "de"}}, 400, "translates en to de only"),
    "a format not translated": ("/translate", {"json": {"q": "Hi.", "format": "xml"}}, 400, "not supported"),
    "a large body": ("/translate", {"json": {"q": LONG}}, 413, "--max_body_bytes"),
    "many characters": ("/translate", {"json": {"q": "b" * 1001}}, 413, "--max_characters"),
    "many sentences": ("/translate", {"json": {"q": ["No."] * 9}}, 413, "--max_sentences"),
    "many sentences in a paragraph": ("/translate", {"json": {"q": "No. " * 9}}, 413, "--max_sentences"),
    "a wide beam": ("/v1/translate", {"json": {"q": "Hi.", "num_beams": 7}}, 422, "--max_beams"),
    "an unknown option": ("/v1/translate", {"json": {"q": "Hi.", "temperature": 2}}, 400, "temperature"),
    "a beam of a wrong type": ("/v1/translate", {"json": {"q": "Hi.", "num_beams": "4"}}, 400, "num_beams"),
    "an array body": ("/v1/translate", {"json": ["Hi."]}, 400, "JSON object"),
}  # fmt: skip


@pytest.mark.parametrize(("path", "request_", "status", "message"), REFUSALS.values(), ids=REFUSALS.keys())
def test_bad_requests_get_a_json_error_naming_the_problem(
    server: Served, path: str, request_: dict, status: int, message: str
) -> None:
    answer = httpx.post(f"{server.url}{path}", timeout=60, **request_)
    assert answer.status_code == status, answer.text
    assert message in answer.json()["error"]
    assert "Traceback" not in answer.text


def test_health_readiness_metrics_and_the_api_s_pages(server: Served) -> None:
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    assert httpx.get(f"{server.url}/ready").status_code == 200
    metrics = httpx.get(f"{server.url}/metrics").text
    for name in ("vaswani_requests_total", "vaswani_request_seconds_bucket", "vaswani_queue_sentences"):
        assert name in metrics
    assert httpx.get(f"{server.url}/docs").status_code == 200
    schema = httpx.get(f"{server.url}/openapi.json").json()
    body = schema["paths"]["/v1/translate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "num_beams" in json.dumps(body)


# LibreTranslate's API in full, as its clients use it


def test_detect_and_auto_name_the_language_and_refuse_one_that_is_not_the_model_s(
    server: Served, engine
) -> None:
    """`/detect` answered 404, and source "auto" translated German as if it were English."""
    api = LibreTranslateAPI(server.url)
    detected = api.detect("Ich liebe dich. Wo ist der Bahnhof?")
    assert detected[0]["language"] == "de" and 50 < detected[0]["confidence"] <= 100
    assert [item["confidence"] for item in detected] == sorted(
        (item["confidence"] for item in detected), reverse=True
    )
    assert api.translate(SENTENCES[1], "auto", "de") == engine.translate([SENTENCES[1]])[0]
    answer = httpx.post(f"{server.url}/translate", json={"q": SENTENCES[1], "source": "auto", "target": "de"})
    assert answer.json()["detectedLanguage"]["language"] == "en"
    both = httpx.post(f"{server.url}/translate", json={"q": SENTENCES[:2], "source": "auto", "target": "de"})
    assert [found["language"] for found in both.json()["detectedLanguage"]] == ["en", "en"]
    german = httpx.post(
        f"{server.url}/translate", json={"q": "Ich liebe dich.", "source": "auto", "target": "de"}
    )
    assert german.status_code == 400
    assert "reads as de" in german.json()["error"] and "en to de" in german.json()["error"]


def test_alternatives_are_the_beam_s_other_hypotheses(server: Served, engine) -> None:
    """`alternatives` was ignored."""
    body = {"q": SENTENCES[2], "source": "en", "target": "de", "alternatives": 2}
    answer = httpx.post(f"{server.url}/translate", json=body, timeout=60).json()
    # three hypotheses from three beams (the server decodes greedily, but two alternatives need three)
    best, *others = engine.translate([SENTENCES[2]], num_beams=3, num_return_sequences=3)[0]
    assert answer["translatedText"] == best
    assert answer["alternatives"] == [text for text in dict.fromkeys(others) if text != best]
    listed = httpx.post(
        f"{server.url}/translate", json={**body, "q": [SENTENCES[2], "No."]}, timeout=60
    ).json()
    assert listed["translatedText"][0] == best and listed["alternatives"][0] == answer["alternatives"]
    too_many = httpx.post(f"{server.url}/translate", json={**body, "alternatives": 6})
    assert too_many.status_code == 400 and "--max_beams" in too_many.json()["error"]
    not_a_count = httpx.post(f"{server.url}/translate", data={"q": "Hi.", "alternatives": "two"})
    assert not_a_count.status_code == 400 and "alternatives" in not_a_count.json()["error"]


def test_html_has_its_text_nodes_translated_and_its_markup_kept(server: Served, engine) -> None:
    """`format: "html"` was refused."""
    html = (
        f'<p class="x">{SENTENCES[0]} <b>{SENTENCES[3]}</b></p><!-- {SENTENCES[1]} -->'
        f'<script>var s = "{SENTENCES[2]}";</script><p translate="no">{SENTENCES[2]}</p><br>'
    )
    body = {"q": html, "source": "en", "target": "de", "format": "html"}
    answer = httpx.post(f"{server.url}/translate", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    first, second = engine.translate([SENTENCES[0], SENTENCES[3]])
    assert answer.json()["translatedText"] == (
        f'<p class="x">{first} <b>{second}</b></p><!-- {SENTENCES[1]} -->'
        f'<script>var s = "{SENTENCES[2]}";</script><p translate="no">{SENTENCES[2]}</p><br/>'
    )


def test_the_settings_libretranslate_s_web_clients_read_and_the_routes_this_server_has_off(
    server: Served,
) -> None:
    settings = httpx.get(f"{server.url}/frontend/settings").json()
    assert settings["language"] == {
        "source": {"code": "en", "name": "English"},
        "target": {"code": "de", "name": "German"},
    }
    assert (
        settings["charLimit"] == 1000
        and settings["keyRequired"] is False
        and settings["suggestions"] is False
    )
    assert settings["supportedFilesFormat"] == []
    for route in ("/suggest", "/translate_file"):
        answer = httpx.post(f"{server.url}{route}", data={"q": "Hi.", "s": "Hallo."})
        assert answer.status_code == 403 and "disabled on this server" in answer.json()["error"]


def test_the_client_calls_docs_serving_shows_work_verbatim(server: Served, capsys) -> None:
    """deep-translator's trailing slash and API key were undocumented; the block runs as the page shows it."""
    page = (Path(__file__).parents[2] / "docs" / "serving.md").read_text(encoding="utf-8")
    block = page.split("LibreTranslate's own Python clients")[1].split("```python\n")[1].split("```")[0]
    exec(compile(block.replace("http://127.0.0.1:8000", server.url), "docs/serving.md", "exec"), {})  # noqa: S102
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 5 and "'language': 'de'" in printed[2]
    assert printed[3] == str([{"code": "en", "name": "English", "targets": ["de"]}])
