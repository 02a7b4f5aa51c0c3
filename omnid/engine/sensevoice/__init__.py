"""SenseVoice Small (FunASR): non-autoregressive CTC over the shared FunASR front end and SAN-M encoder, with its
language, emotion and audio-event tags."""
