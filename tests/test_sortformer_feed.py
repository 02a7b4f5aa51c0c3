"""Feed mode (what /v1/diarization/stream computes) against mlx-audio 0.6.2's feed(), the reference server's
algorithm, on the golden tiny checkpoint converted to the mlx-community layout, with a zero and with a sinusoidal
``embed_positions``: per feed the frame count, probabilities, state and segments."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from omnid.engine.diarization import turns
from omnid.engine.sortformer.engine import SortformerEngine
from tests.sortformer_clips import two_voices
from tests.sortformer_reference import convert, load_model

NEMO = Path(__file__).parent / "goldens" / "sortformer_tiny" / "tiny.nemo"
VOXT_FEED = 79_360


@pytest.fixture(scope="module", params=["zero", "sinusoid"])
def pair(request, tmp_path_factory):
    folder = convert(NEMO, tmp_path_factory.mktemp("mlx") / request.param, request.param)
    return SortformerEngine("tiny", folder), load_model(folder)


def voxt_feeds(audio: np.ndarray) -> list[np.ndarray]:
    """Voxt's policy: 79,360-sample feeds, the last zero-padded to at least 1,280 samples."""
    feeds = [audio[i : i + VOXT_FEED] for i in range(0, len(audio), VOXT_FEED)]
    if len(feeds[-1]) < 1280:
        feeds[-1] = np.concatenate([feeds[-1], np.zeros(1280 - len(feeds[-1]), np.float32)])
    return feeds


def irregular_feeds(audio: np.ndarray) -> list[np.ndarray]:
    sizes = [2, 1280, 79_360, 240_639, 1280, 79_360, 2, 240_639]
    out, pos = [], 0
    for n in sizes:
        out.append(audio[pos : pos + n] if pos + n <= len(audio) else np.resize(audio, n).astype(np.float32))
        pos += n
    return out


def run_both(pair, feeds, spkcache_max=188, fifo_max=188, threshold=0.5, min_duration=0.0, merge_gap=0.18):
    ours, ref = pair
    state, ref_state = ours.new_stream(), ref.init_streaming_state()
    for i, feed in enumerate(feeds):
        before = state.frames_processed
        probs = ours.feed(state, feed, spkcache_max, fifo_max)
        out, ref_state = ref.feed(feed, ref_state, threshold=threshold, min_duration=min_duration,
                                  merge_gap=merge_gap, spkcache_max=spkcache_max, fifo_max=fifo_max)
        ref_probs = np.array(out.speaker_probs)
        assert len(probs) == len(feed) // 1280 + 1 == len(ref_probs), i
        assert np.abs(probs - ref_probs).max() <= 1e-4, i
        assert (len(state.fifo), len(state.spkcache), state.frames_processed) == (
            ref_state.fifo_len, ref_state.spkcache_len, ref_state.frames_processed), i
        got = [(np.float32(t.start), np.float32(t.end), t.speaker)
               for t in turns(probs, threshold, min_duration, merge_gap, before)]
        want = [(np.float32(s.start), np.float32(s.end), s.speaker) for s in out.segments]
        assert got == want, i
    return state


def test_voxt_feeds_match_the_reference(pair):
    state = run_both(pair, voxt_feeds(two_voices(41.8)))
    assert len(state.spkcache) > 0 and state.compressions >= 1


def test_irregular_feeds_match_the_reference(pair):
    run_both(pair, irregular_feeds(two_voices(60.0, seed=5)))


def test_small_cache_and_fifo_options_match_the_reference(pair):
    state = run_both(pair, voxt_feeds(two_voices(41.8, seed=9)), spkcache_max=100, fifo_max=63)
    assert state.compressions >= 2 and len(state.fifo) <= 63
