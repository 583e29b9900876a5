// The translate box: POST /v1/translate for the translation, sentence by sentence as /translate translates, then
// POST /v1/attention for the chosen sentence's encoder-decoder attention, drawn as a heat-map of the chosen layer
// and head (or their mean). A server without the PyTorch model says so in #no-attention, and nothing is drawn.
"use strict";
const $ = (id) => document.getElementById(id);
const attentionShown = $("no-attention").textContent.trim() === "";
let sentences = [], maps = null;

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

function options(select, count, withMean) {
  select.innerHTML = "";
  if (withMean) select.add(new Option("mean of heads", "mean"));
  for (let index = 0; index < count; index++) select.add(new Option(String(index + 1), String(index)));
}

function weights() {
  const layer = maps.cross[Number($("layer").value)];
  if ($("head").value !== "mean") return layer[Number($("head").value)];
  return layer[0].map((row, i) => row.map((_, j) => layer.reduce((sum, head) => sum + head[i][j], 0) / layer.length));
}

function draw() {
  const canvas = $("heatmap"), context = canvas.getContext("2d"), rows = weights();
  const left = 110, top = 90, cell = Math.max(8, Math.min(32, Math.floor(520 / Math.max(rows.length, rows[0].length))));
  canvas.width = left + cell * rows[0].length + 10;
  canvas.height = top + cell * rows.length + 10;
  context.fillStyle = "#fff";
  context.fillRect(0, 0, canvas.width, canvas.height);
  rows.forEach((row, i) => row.forEach((weight, j) => {
    const shade = Math.round(255 * (1 - weight));
    context.fillStyle = `rgb(${shade}, ${shade}, 255)`;
    context.fillRect(left + j * cell, top + i * cell, cell, cell);
  }));
  context.fillStyle = "#000";
  context.font = "12px sans-serif";
  context.textAlign = "right";
  maps.target_tokens.forEach((token, i) => context.fillText(token, left - 4, top + i * cell + cell * 0.7));
  maps.source_tokens.forEach((token, j) => {
    context.save();
    context.translate(left + j * cell + cell * 0.7, top - 4);
    context.rotate(-Math.PI / 3);
    context.textAlign = "left";
    context.fillText(token, 0, 0);
    context.restore();
  });
}

async function showAttention() {
  const chosen = sentences[Number($("sentence").value)];
  maps = await post("/v1/attention", { q: chosen.source, translation: chosen.translation });
  const layer = $("layer").value === "" ? maps.cross.length - 1 : Number($("layer").value);
  const head = $("head").value || "mean";
  options($("layer"), maps.cross.length, false);
  options($("head"), maps.cross[0].length, true);
  $("layer").value = String(Math.min(layer, maps.cross.length - 1));
  $("head").value = head;
  $("attention").hidden = false;
  draw();
}

async function translate() {
  $("error").textContent = "";
  try {
    const answer = await post("/v1/translate", { q: $("source").value, scores: false, split_sentences: true });
    $("translation").textContent = answer.translations[0].translation;
    sentences = answer.translations[0].sentences;
    if (!attentionShown || sentences.length === 0) return;
    const select = $("sentence");
    select.innerHTML = "";
    sentences.forEach((sentence, index) => select.add(new Option(`${index + 1}: ${sentence.source}`, String(index))));
    $("sentence-choice").hidden = sentences.length < 2;
    await showAttention();
  } catch (error) {
    $("error").textContent = error.message;
  }
}

function redraw(action) {
  return () => action().catch((error) => { $("error").textContent = error.message; });
}

$("translate").addEventListener("click", translate);
$("sentence").addEventListener("change", redraw(showAttention));
$("layer").addEventListener("change", () => draw());
$("head").addEventListener("change", () => draw());
fetch("/languages").then((response) => response.json()).then((languages) => {
  $("pair").textContent = `${languages[0].code} → ${languages[0].targets[0]}`;
});
