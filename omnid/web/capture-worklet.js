// Runs on the audio thread: turns the microphone's float samples (mono, the context's rate) into PCM16 chunks of
// about 100 ms, each posted with its RMS level for the meter. Nothing is resampled here: the session declares the
// context's rate and the daemon resamples.
class PcmCapture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.size = Math.round(sampleRate / 10);
    this.chunk = new Int16Array(this.size);
    this.filled = 0;
    this.energy = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    for (let i = 0; i < channel.length; i++) {
      const s = Math.max(-1, Math.min(1, channel[i]));
      this.energy += s * s;
      this.chunk[this.filled++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.filled === this.size) {
        const level = Math.sqrt(this.energy / this.size);
        // The buffer is handed over, not copied (which leaves this.chunk empty): a fresh one follows.
        this.port.postMessage({ pcm: this.chunk.buffer, level }, [this.chunk.buffer]);
        this.chunk = new Int16Array(this.size);
        this.filled = 0;
        this.energy = 0;
      }
    }
    return true;
  }
}

registerProcessor("pcm-capture", PcmCapture);
