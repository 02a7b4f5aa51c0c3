import numpy as np

from omnid.realtime.cut import quietest_cut
from omnid.vad.silero import SileroVAD
from omnid.vad.stream import probabilities
from tests.helpers import clip_audio


def _speechlike(seconds: float, gap_at: float, gap_len: float = 0.08) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 0.2, int(seconds * 16000)).astype(np.float32)
    a = int(gap_at * 16000)
    x[a : a + int(gap_len * 16000)] *= 0.01
    return x


def test_energy_cut_lands_in_the_gap_of_the_last_second():
    audio = _speechlike(30.0, gap_at=29.35)
    cut = quietest_cut(audio)
    assert 29.35 * 16000 <= cut <= 29.43 * 16000


def test_gap_outside_the_last_second_is_ignored():
    audio = _speechlike(30.0, gap_at=28.2)
    assert quietest_cut(audio) >= 29.0 * 16000


def test_vad_cut_picks_the_pause_between_two_utterances():
    speech = clip_audio("ljspeech_LJ001-0002")  # 1.9 s
    pause = np.zeros(int(0.3 * 16000), np.float32)
    audio = np.concatenate([speech, speech, pause, speech[: 16000 // 2]])
    probs = probabilities(SileroVAD.load(), audio)
    cut = quietest_cut(audio, search_s=1.0, vad_probs=probs)
    start = 2 * len(speech)
    assert start <= cut <= start + len(pause)
