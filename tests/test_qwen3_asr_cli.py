"""`omnid transcribe` and `omnid eval` on a Qwen3-ASR checkpoint folder, as a user runs them (a fresh process)."""

from __future__ import annotations

from omnid.audio import wav_bytes
from omnid.engine import kinds
from tests.qwen_goldens import TINY, clip, meta
from tests.test_cli import omnid


def test_transcribe_takes_a_checkpoint_folder_and_tells_its_kind(tmp_path):
    wav = tmp_path / "mid.wav"
    wav.write_bytes(wav_bytes(clip("mid")))
    out = omnid("transcribe", "--model", str(TINY), "--language", "en", str(wav))
    assert out.returncode == 0, out.stderr
    assert out.stdout == meta()["cases"]["mid_en"]["text_unfixed"] + "\n"
    refused = omnid("transcribe", "--model", str(TINY), "-f", "srt", str(wav))
    assert refused.returncode == 2 and "--format: model qwen3_asr_tiny gives no timestamps for srt" in refused.stderr
    detected = omnid("transcribe", "--model", str(TINY), "--language", "sw", str(wav))
    assert detected.returncode == 0 and "does not transcribe 'sw'; the language is detected" in detected.stderr
    empty = omnid("transcribe", "--model", str(tmp_path), str(wav))
    # Every transcription kind named, as the collection lists them (a new kind joins the line by itself).
    known = kinds.spoken([k.title for k in kinds.of_role("transcription")])
    assert known.startswith("Whisper, Qwen3-ASR, Parakeet") and " or " in known
    assert empty.returncode == 2 and f"holds no {known} checkpoint" in empty.stderr


def test_eval_scores_english_wer_and_chinese_cer_per_table(corpus):
    ids = ["ljspeech_LJ001-0002", "ljspeech_LJ001-0003", "fireredasr_BAC009S0764W0121", "aishell1_BAC009S0724W0121"]
    out = omnid("eval", "--model", str(TINY), "--manifest", str(corpus), "--language", "en,zh", "--ids", *ids)
    assert out.returncode == 0, out.stderr
    tables = out.stdout.split("\n\n")
    assert "WER %" in tables[0] and "omnid qwen3_asr_tiny" in tables[0]
    assert "CER %" in tables[1] and "omnid qwen3_asr_tiny" in tables[1]
    assert "4 clips" in out.stdout
