// One microphone session: getUserMedia -> AudioWorklet (PCM16 at the context's rate) -> /v1/realtime in the
// OpenAI dialect with server VAD. Deltas are append-only; a `completed` replaces its item's partial line.
import { socketUrl } from "./api.js";

export class MicSession {
  // handlers: onDelta(itemId, text), onCompleted(itemId, transcript), onLevel(rms), onError(message), onClosed()
  constructor({ model, language, threshold, silenceMs }, handlers) {
    this.settings = { model, language, threshold, silenceMs };
    this.handlers = handlers;
    this.stopping = false;
    this.inTurn = false;
  }

  async start() {
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true },
      });
    } catch (error) {
      const refused = error && (error.name === "NotAllowedError" || error.name === "SecurityError");
      throw new Error(refused ? "The microphone was refused: allow it for this page in the browser's site settings."
        : `No microphone: ${error && error.message ? error.message : error}`);
    }
    this.context = new AudioContext();
    await this.context.audioWorklet.addModule("/page/capture-worklet.js");
    this.socket = await this.openSocket();
    const source = this.context.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.context, "pcm-capture", { channelCount: 1, channelCountMode: "explicit" });
    this.node.port.onmessage = ({ data }) => this.send(data);
    source.connect(this.node);
  }

  openSocket() {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(socketUrl("/v1/realtime", { protocol: "openai" }));
      let opened = false;
      socket.onopen = () => {
        opened = true;
        socket.send(JSON.stringify(this.sessionUpdate()));
        resolve(socket);
      };
      socket.onmessage = (message) => this.receive(JSON.parse(message.data));
      socket.onerror = () => { if (!opened) reject(new Error("Could not open the realtime socket (is the daemon running, and the API key right?)")); };
      socket.onclose = (event) => {
        if (!opened) return;
        if (!this.stopping) this.handlers.onError(`The realtime socket closed (${event.code}${event.reason ? ": " + event.reason : ""}).`);
        this.release();
        this.handlers.onClosed();
      };
    });
  }

  sessionUpdate() {
    const { model, language, threshold, silenceMs } = this.settings;
    return {
      type: "session.update",
      session: {
        type: "transcription",
        audio: {
          input: {
            format: { type: "audio/pcm", rate: this.context.sampleRate },
            transcription: { ...(model ? { model } : {}), ...(language ? { language } : {}) },
            turn_detection: { type: "server_vad", threshold, prefix_padding_ms: 300, silence_duration_ms: silenceMs },
          },
        },
      },
    };
  }

  send({ pcm, level }) {
    this.handlers.onLevel(level);
    if (!this.socket || this.socket.readyState !== WebSocket.OPEN) return;
    const bytes = new Uint8Array(pcm);
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    this.socket.send(JSON.stringify({ type: "input_audio_buffer.append", audio: btoa(binary) }));
  }

  receive(event) {
    switch (event.type) {
      case "input_audio_buffer.speech_started":
        this.inTurn = true;
        break;
      case "input_audio_buffer.speech_stopped":
        this.inTurn = false;
        break;
      case "conversation.item.input_audio_transcription.delta":
        this.handlers.onDelta(event.item_id, event.delta);
        break;
      case "conversation.item.input_audio_transcription.completed":
        this.handlers.onCompleted(event.item_id, event.transcript);
        if (this.stopping && !this.inTurn) this.close();
        break;
      case "conversation.item.input_audio_transcription.failed":
        this.handlers.onError(`A turn could not be transcribed: ${event.error && event.error.message}`);
        break;
      case "error":
        this.handlers.onError(event.error && event.error.message ? event.error.message : "error from the daemon");
        break;
      default:
        break;
    }
  }

  // Stops capturing. A turn still open is committed and its final awaited (at most 10 s) before the socket closes.
  stop() {
    this.stopping = true;
    if (this.node) this.node.port.onmessage = null;
    this.release();
    if (this.socket && this.socket.readyState === WebSocket.OPEN && this.inTurn) {
      this.inTurn = false;
      this.socket.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
      setTimeout(() => this.close(), 10000);
    } else {
      this.close();
    }
  }

  close() {
    if (this.socket && this.socket.readyState <= WebSocket.OPEN) this.socket.close(1000);
  }

  release() {
    if (this.stream) this.stream.getTracks().forEach((track) => track.stop());
    if (this.context && this.context.state !== "closed") this.context.close();
    this.stream = null;
    this.context = null;
  }
}
