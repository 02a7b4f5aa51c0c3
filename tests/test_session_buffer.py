"""The realtime session's audio buffer: PCM16 validation, streaming resampling, trimming and its cap."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from omnid.realtime.buffer import AudioBuffer, BufferOverflow, InvalidAudio, decode_pcm16
from tests.helpers import b64


def test_pcm16_round_trip():
    x = np.sin(np.linspace(0, 20, 1600)).astype(np.float32) * 0.5
    assert np.abs(decode_pcm16(b64(x)) - x).max() < 1e-4


@pytest.mark.parametrize(
    "audio, reason",
    [(None, "base64 string"), (123, "base64 string"), ("", "empty"), ("AAA", "not valid base64"),
     ("AA=A", "not valid base64"), ("@@@@", "not valid base64"), (base64.b64encode(b"\0\0\0").decode(), "odd byte count")],
)
def test_invalid_audio_is_rejected_with_a_reason(audio, reason):
    with pytest.raises(InvalidAudio, match=reason):
        decode_pcm16(audio)


def test_24k_is_resampled_in_stream_to_the_same_length_as_offline():
    rate = 24000
    x = np.sin(2 * np.pi * 440 * np.arange(rate * 2) / rate).astype(np.float32) * 0.3
    buf = AudioBuffer(rate, max_backlog_s=10)
    for i in range(0, len(x), 2400):  # 100 ms appends
        buf.append(x[i : i + 2400])
    buf.flush()
    assert buf.end == 32000
    y = buf.view(0)
    ref = np.sin(2 * np.pi * 440 * np.arange(32000) / 16000).astype(np.float32) * 0.3
    assert np.abs(y[1000:-1000] - ref[1000:-1000]).max() < 0.01


def test_consumed_audio_is_trimmed_and_positions_stay_absolute():
    buf = AudioBuffer(16000, max_backlog_s=2)
    for _ in range(60):  # 6 s through a 2 s cap: fine while the consumer keeps up
        buf.append(np.ones(1600, np.float32))
        buf.consume(buf.end - 800)
    assert buf.end == 96000 and buf.start == 95200 and buf.backlog == 800
    assert len(buf.view(0)) == 800 and len(buf.view(95600, 96000)) == 400


def test_backlog_cap_is_enforced():
    buf = AudioBuffer(16000, max_backlog_s=1)
    buf.append(np.zeros(16000, np.float32))
    with pytest.raises(BufferOverflow, match="more than 1 s"):
        buf.append(np.zeros(1, np.float32))
    assert buf.backlog == 16000  # the refused chunk was not kept
