"""``--revision REV`` beside ``--model`` (omnid transcribe, eval, diarize): a Hugging Face repo id's snapshot at a
branch, tag or commit of the local cache, as a configured ``revision`` picks it (omnid/engine/hub.py).

The cache is written as huggingface_hub writes it (tests/hf_cache.py). ``org/tiny`` holds two revisions of real
checkpoints: the older, tagged ``v1``, is the built-in Whisper tiny.en (real weights, so its transcript of real
speech is faster-whisper's), and ``main`` (also the branch ``dev``) is a tiny Parakeet TDT whose transcript NeMo
recorded; which one served is told by the transcript. ``org/sortformer-tiny`` has only a ``v1`` tag, no ``main``.
Every command is the real ``omnid`` in a subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from omnid.audio import wav_bytes
from omnid.config import model_folder
from tests.helpers import reference
from tests.hf_cache import NEW, OLD, omnid, put_snapshot
from tests.test_hub_cache import SORTFORMER_TINY
from tests.test_parakeet import GOLDENS, audio, meta

CLIP = "librispeech_1089-134686-0000"  # the clip of the Parakeet goldens' "librispeech" transcripts
NEMO = "parakeet-tiny.nemo"
MISSING = "0123456789abcdef0123456789abcdef01234567"


def tiny_en() -> Path:
    from omnid.config import load_config

    config = load_config(None, {}, environ={})
    return model_folder(next(m for m in config.models if m.id == "tiny.en"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("hf") / "hub"
    put_snapshot(cache, "org/tiny", OLD, {p.name: p.read_bytes() for p in sorted(tiny_en().iterdir()) if p.is_file()},
                 main=False, refs=("v1",))
    put_snapshot(cache, "org/tiny", NEW, {NEMO: (GOLDENS / "tdt.nemo").read_bytes()}, refs=("dev",))
    put_snapshot(cache, "org/sortformer-tiny", OLD, {"tiny.nemo": SORTFORMER_TINY.read_bytes()}, main=False,
                 refs=("v1",))
    return cache


@pytest.fixture(scope="module")
def wav(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("audio") / "clip.wav"
    path.write_bytes(wav_bytes(audio("librispeech")))
    assert meta()["clips"]["librispeech"] == [f"{CLIP}.wav"]
    return path


WHISPER = reference()[CLIP] + "\n"


def parakeet() -> str:
    return meta()["models"]["tdt"]["librispeech"]["text"] + "\n"


@pytest.mark.parametrize(("revision", "served"), [
    ("v1", "whisper"),    # a tag
    (OLD, "whisper"),     # a commit
    ("dev", "parakeet"),  # a branch
    ("main", "parakeet"),
    (None, "parakeet"),   # no --revision: main's snapshot
])
def test_transcribe_serves_the_snapshot_of_the_revision(cache, wav, revision, served):
    out = omnid(cache, "transcribe", "--model", "org/tiny", *(("--revision", revision) if revision else ()), str(wav))
    assert out.returncode == 0, out.stderr
    assert out.stdout == (WHISPER if served == "whisper" else parakeet()), out.stdout


def test_eval_scores_the_snapshot_of_the_revision(cache):
    out = omnid(cache, "eval", "--manifest", "tests/corpus", "--ids", CLIP, "--model", "org/tiny", "--revision", "v1")
    assert out.returncode == 0, out.stderr
    # tiny.en's transcript, identical to faster-whisper's reference for the clip
    row = next(line.split() for line in out.stdout.splitlines() if line.startswith("omnid org/tiny "))
    assert row[2:] == ["7.14", "1", "1"], out.stdout


def test_diarize_reads_the_snapshot_of_the_revision(cache, wav):
    """org/sortformer-tiny has no main: without --revision it names nothing; at v1 it is the .nemo file's turns."""
    absent = omnid(cache, "diarize", "--model", "org/sortformer-tiny", str(wav))
    assert absent.returncode == 2 and "org/sortformer-tiny: not in the Hugging Face cache" in absent.stderr, \
        absent.stderr
    tagged = omnid(cache, "diarize", "--model", "org/sortformer-tiny", "--revision", "v1", str(wav))
    assert tagged.returncode == 0, tagged.stderr
    direct = omnid(cache, "diarize", "--model", str(SORTFORMER_TINY), str(wav))
    assert direct.returncode == 0 and tagged.stdout == direct.stdout, (tagged.stdout, direct.stdout)


@pytest.mark.parametrize("revision", ["v9", MISSING])
def test_a_revision_the_cache_lacks_is_the_configurations_one_line(cache, wav, tmp_path, revision):
    """The line names the repo id, the revision and the cache searched, word for word as a configured `revision`
    the cache lacks is told (after its own prefix); nothing is loaded."""
    out = omnid(cache, "transcribe", "--model", "org/tiny", "--revision", revision, str(wav))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    said = f"org/tiny: revision {revision!r} is not in the Hugging Face cache {cache.resolve()} "
    assert out.stderr.startswith(f"omnid: --model: {said}"), out.stderr
    config = tmp_path / "omnid.toml"
    config.write_text(f'[[models]]\nid = "t"\nkind = "parakeet"\npath = "org/tiny"\nrevision = "{revision}"\n')
    configured = omnid(cache, "transcribe", "--config", str(config), "--model", "t", str(wav))
    assert configured.returncode == out.returncode, configured.stderr
    assert configured.stderr.split(" and ", 1)[1] == out.stderr.removeprefix("omnid: --model: "), configured.stderr
    diarize = omnid(cache, "diarize", "--model", "org/sortformer-tiny", "--revision", revision, str(wav))
    assert diarize.returncode == 2 and diarize.stderr.count("\n") == 1, diarize.stderr
    assert f"org/sortformer-tiny: revision {revision!r} is not in the Hugging Face cache {cache.resolve()} " \
           in diarize.stderr, diarize.stderr


NOT_A_REPO = "omnid: --revision is for a Hugging Face repo id, and "


@pytest.mark.parametrize(("args", "said"), [
    (("transcribe", "--model", str(GOLDENS / "tdt.nemo")), f"--model {GOLDENS / 'tdt.nemo'} is a path on disk"),
    (("transcribe", "--model", str(GOLDENS / "hf_ctc")), f"--model {GOLDENS / 'hf_ctc'} is a path on disk"),
    (("transcribe", "--model", "tiny.en"), "--model tiny.en is a configured model"),
    (("transcribe",), "no --model names one"),
    (("eval", "--manifest", "tests/corpus", "--ids", CLIP, "--model", str(GOLDENS / "tdt.nemo")),
     f"--model {GOLDENS / 'tdt.nemo'} is a path on disk"),
    (("diarize", "--model", str(SORTFORMER_TINY)), f"--model {SORTFORMER_TINY} is a path on disk"),
])
def test_a_revision_with_no_repo_id_is_a_usage_error(cache, wav, args, said):
    out = omnid(cache, *args, "--revision", "v1", *((str(wav),) if args[0] != "eval" else ()))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(NOT_A_REPO + said), out.stderr


def test_a_path_on_disk_spelt_as_the_repo_id_takes_no_revision(cache, wav, tmp_path):
    """A path that exists wins over the repo id it spells (as in a configuration), so --revision cannot apply."""
    (tmp_path / "org" / "tiny").mkdir(parents=True)
    (tmp_path / "org" / "tiny" / NEMO).symlink_to(GOLDENS / "tdt.nemo")
    out = omnid(cache, "transcribe", "--model", "org/tiny", "--revision", "v1", str(wav), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr == f"{NOT_A_REPO}--model org/tiny is a path on disk\n", out.stderr
