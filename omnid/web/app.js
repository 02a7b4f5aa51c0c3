// Wires the page: health and models, the API key field, the microphone session and the file upload.
import { apiKey, getJson, setApiKey } from "./api.js";
import { download, transcribeAs, transcribeStreaming } from "./file.js";
import { MicSession } from "./mic.js";

const $ = (id) => document.getElementById(id);

// --- daemon ---------------------------------------------------------------------------------------------------

async function refreshHealth() {
  const badge = $("health");
  try {
    const health = await getJson("/health");
    const models = Object.entries(health.models || {}).map(([name, m]) => `${name} ${m.status}`).join(", ");
    badge.textContent = `${health.status}: ${models}`;
    badge.className = `badge ${health.status === "healthy" ? "healthy" : ""}`;
  } catch (error) {
    badge.textContent = `daemon unreachable (${error.message})`;
    badge.className = "badge down";
  }
}

// The model and language the settings name, for a file request or a microphone session.
function choice() {
  return { model: $("model").value, language: $("language").value.trim() };
}

async function loadModels() {
  const select = $("model");
  try {
    const list = await getJson("/v1/models");
    // Models that transcribe: not the VAD, a diarizer or a forced aligner (they serve the others).
    const helpers = new Set(["silero_vad", "sortformer", "qwen3_forced_aligner"]);
    const transcribers = list.data.filter((m) => !helpers.has(m.kind));
    select.replaceChildren(...transcribers.map((m) => new Option(`${m.id} (${m.kind})`, m.id)));
  } catch (error) {
    select.replaceChildren(new Option("default model", ""));
    $("mic-error").textContent = `Could not list the models: ${error.message}`;
  }
}

// --- microphone -----------------------------------------------------------------------------------------------

let mic = null;
const partials = new Map(); // item_id -> the <p> showing its deltas

function micLine(itemId) {
  let line = partials.get(itemId);
  if (!line) {
    line = Object.assign(document.createElement("p"), { className: "partial" });
    partials.set(itemId, line);
    $("mic-transcript").append(line);
  }
  return line;
}

function showMicState(running) {
  const button = $("mic-toggle");
  button.textContent = running ? "Stop" : "Start";
  button.setAttribute("aria-pressed", String(running));
  if (!running) $("mic-level").style.width = "0";
}

async function toggleMic() {
  if (mic) {
    mic.stop();
    mic = null;
    showMicState(false);
    return;
  }
  $("mic-error").textContent = "";
  const session = new MicSession({
    ...choice(),
    threshold: Number($("vad-threshold").value),
    silenceMs: Number($("vad-silence").value),
  }, {
    onDelta: (itemId, text) => { micLine(itemId).textContent += text; scrollDown($("mic-transcript")); },
    onCompleted: (itemId, transcript) => {
      const line = micLine(itemId);
      partials.delete(itemId);
      if (!transcript.trim()) { line.remove(); return; }
      line.className = "final";
      line.textContent = transcript.trim();
      scrollDown($("mic-transcript"));
    },
    onLevel: (rms) => { $("mic-level").style.width = `${Math.min(100, Math.round(rms * 400))}%`; },
    onError: (message) => { $("mic-error").textContent = message; },
    onClosed: () => { if (mic === session) { mic = null; showMicState(false); } },
  });
  mic = session;
  showMicState(true);
  try {
    await session.start();
  } catch (error) {
    $("mic-error").textContent = error.message;
    session.release();
    if (mic === session) { mic = null; showMicState(false); }
  }
}

function scrollDown(element) {
  element.scrollTop = element.scrollHeight;
}

// --- file -----------------------------------------------------------------------------------------------------

let lastFile = null;
let lastText = "";

function setFileButtons(enabled) {
  for (const id of ["download-txt", "download-srt", "download-vtt", "copy"]) $(id).disabled = !enabled;
}

async function transcribeFile(file) {
  lastFile = file;
  lastText = "";
  setFileButtons(false);
  $("file-error").textContent = "";
  const out = $("file-transcript");
  out.replaceChildren();
  const partial = Object.assign(document.createElement("p"), { className: "partial" });
  out.append(partial);
  $("file-status").textContent = `Transcribing ${file.name}…`;
  const started = performance.now();
  try {
    const done = await transcribeStreaming(file, choice(), (delta) => {
      partial.textContent += delta;
      scrollDown(out);
    });
    partial.className = "final";
    partial.textContent = done.text;
    if (done.segments) showTagged(out, partial, done.segments);
    lastText = done.text;
    const seconds = done.usage && done.usage.seconds ? `${done.usage.seconds.toFixed(1)} s of audio` : "";
    $("file-status").textContent = `${file.name}: ${seconds} in ${((performance.now() - started) / 1000).toFixed(1)} s`;
    setFileButtons(true);
  } catch (error) {
    $("file-status").textContent = "";
    $("file-error").textContent = `${file.name}: ${error.message}`;
  }
}

// A model that tags what it hears (SenseVoice: language, emotion, events) gives its segments with their tags:
// each segment's line, its tags beside it.
function showTagged(out, paragraph, segments) {
  const lines = segments.map((seg) => {
    const line = Object.assign(document.createElement("p"), { className: "final tagged" });
    const tags = [seg.language, seg.emotion, ...(seg.events || [])].filter(Boolean).join(" · ");
    line.append(Object.assign(document.createElement("span"), { className: "tags", textContent: tags }),
                document.createTextNode(seg.text));
    return line;
  });
  paragraph.replaceWith(...lines);
  scrollDown(out);
}

async function downloadAs(format) {
  if (!lastFile) return;
  const base = lastFile.name.replace(/\.[^.]*$/, "") || "transcript";
  if (format === "txt") { download(lastText + "\n", `${base}.txt`, "text/plain"); return; }
  $("file-status").textContent = `Preparing ${format.toUpperCase()} timings for ${lastFile.name}…`;
  try {
    const text = await transcribeAs(lastFile, choice(), format);
    download(text, `${base}.${format}`, format === "vtt" ? "text/vtt" : "application/x-subrip");
    $("file-status").textContent = `${base}.${format} saved`;
  } catch (error) {
    $("file-error").textContent = `${format}: ${error.message}`;
  }
}

async function copyText() {
  try {
    await navigator.clipboard.writeText(lastText);
    $("file-status").textContent = "Copied to the clipboard";
  } catch (error) {
    $("file-error").textContent = `Could not copy: ${error.message}`;
  }
}

// --- wiring ---------------------------------------------------------------------------------------------------

function wire() {
  const key = $("api-key");
  key.value = apiKey();
  key.addEventListener("change", () => { setApiKey(key.value.trim()); loadModels(); refreshHealth(); });

  $("mic-toggle").addEventListener("click", toggleMic);
  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest && event.target.closest("input, select, textarea, button");
    if (event.code === "Space" && !typing && !event.repeat) { event.preventDefault(); toggleMic(); }
  });
  const threshold = $("vad-threshold");
  threshold.addEventListener("input", () => { $("vad-threshold-value").textContent = Number(threshold.value).toFixed(2); });

  const drop = $("drop");
  $("file-input").addEventListener("change", (event) => { if (event.target.files[0]) transcribeFile(event.target.files[0]); });
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    if (event.dataTransfer.files[0]) transcribeFile(event.dataTransfer.files[0]);
  });
  for (const format of ["txt", "srt", "vtt"]) $(`download-${format}`).addEventListener("click", () => downloadAs(format));
  $("copy").addEventListener("click", copyText);

  loadModels();
  refreshHealth();
  setInterval(refreshHealth, 5000);
}

wire();
