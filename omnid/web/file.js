// A file through POST /v1/audio/transcriptions: streamed as server-sent events for the text as it comes, and
// asked again as srt/vtt only when those downloads are wanted (the stream carries text, not timings).
import { authHeaders, errorText } from "./api.js";

// choice: { model, language } as the settings give them; an empty one is left to the daemon.
function form(file, choice, fields) {
  const body = new FormData();
  body.append("file", file, file.name);
  if (choice.model) body.append("model", choice.model);
  if (choice.language) body.append("language", choice.language);
  for (const [name, value] of Object.entries(fields)) body.append(name, value);
  return body;
}

// Calls onDelta(text) per `transcript.text.delta`; resolves with the `transcript.text.done` event.
export async function transcribeStreaming(file, choice, onDelta, signal) {
  const response = await fetch("/v1/audio/transcriptions", {
    method: "POST", headers: authHeaders(), body: form(file, choice, { stream: "true" }), signal,
  });
  if (!response.ok) throw new Error(await errorText(response));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  let done = null;
  for (;;) {
    const { value, done: ended } = await reader.read();
    if (ended) break;
    pending += value;
    let cut;
    while ((cut = pending.indexOf("\n\n")) >= 0) {
      const block = pending.slice(0, cut);
      pending = pending.slice(cut + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data:")) continue; // ":" lines are heartbeats
        const data = line.slice(5).trim();
        if (data === "[DONE]") return done;
        const event = JSON.parse(data);
        if (event.type === "transcript.text.delta") onDelta(event.delta);
        else if (event.type === "transcript.text.done") done = event;
        else if (event.type === "error") throw new Error(event.error && event.error.message ? event.error.message : "transcription failed");
      }
    }
  }
  if (!done) throw new Error("the stream ended before the transcript was done");
  return done;
}

export async function transcribeAs(file, choice, format) {
  const response = await fetch("/v1/audio/transcriptions", {
    method: "POST", headers: authHeaders(), body: form(file, choice, { response_format: format }),
  });
  if (!response.ok) throw new Error(await errorText(response));
  return response.text();
}

export function download(text, name, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = Object.assign(document.createElement("a"), { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
