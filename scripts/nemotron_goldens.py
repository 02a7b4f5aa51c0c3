"""Writes tests/goldens/nemotron_tiny/ with NVIDIA NeMo: a tiny random cache-aware prompt checkpoint
(``nemotron.nemo``, NeMo's ``EncDecRNNTBPEModelWithPrompt``, Nemotron 3.5 ASR streaming's architecture) and
``goldens.json`` + ``goldens.npz``, what NeMo's cache-aware streaming (``conformer_stream_step``) gives on four real
English clips for every chunk size the checkpoint supports.

Not run by CI: it needs torch and NeMo, which omnid never imports. In the throwaway virtualenv of
scripts/parakeet_goldens.py (its docstring says how to make it):

    /tmp/nemo/bin/python scripts/nemotron_goldens.py            # from the repository root, OMNID_CORPUS=the full corpus

The model is Nemotron 3.5 ASR streaming's configuration at toy sizes: 128 mels without normalisation, causal
dw-striding x8, a FastConformer without biases or xscaling, chunked-limited attention with 56 frames of left context
and right contexts 13, 6, 3, 1 and 0 (chunks of 14, 7, 4, 2 and 1 encoder frames: 1120 ... 80 ms), causal
depthwise convolutions with a layer norm, a language prompt (one-hot, concatenated to each encoder frame, then
Linear, ReLU, Linear) and an RNN-T decoder (2-layer LSTM, ReLU joint, greedy_batch with max_symbols 10). The
vocabulary is scripts/parakeet_goldens.py's SentencePiece BPE; the weights are random (its ``randomize``), the
joint's output lifted so that greedy decoding emits words on speech.

Recorded per chunk size, language and clip, from NeMo's own streaming loop (its CacheAwareStreamingAudioBuffer over
the whole clip's log-mel, ``conformer_stream_step`` per chunk with the caches and hypotheses carried): each chunk's
length of mel input (with its pre-encode cache), its encoder output before and after the prompt, the hypothesis's
length after it (greedy: it only grows), the final ids, frames and text; and NeMo's offline pass over the whole clip
with the same attention mask (model.forward, then greedy decoding): its prompted encoder output, ids, frames, text.

What the run shows (printed as it goes): NeMo's streaming loop does not always give its offline pass's tokens (26
of 40 runs equal). The loop's first chunk is 1 + 8R mel frames with no pre-encode cache, later ones 8 (R + 1) with 9
cached frames of which the first 2 encoder frames are dropped; at R = 0 that first one-frame chunk already changes
every later frame (max 0.019 from the offline pass); the loop stops when fewer than 8 mel frames are left (the
offline pass has one frame more on the long clip); and the buffer takes the zero frame NeMo's preprocessor pads
after the valid frames as audio, so where it is encoded the last chunk differs from the offline pass over the
valid frames (0.5 on a 12 s clip at R 13 and 6).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.parakeet_goldens import Sizes, clip_names, randomize, read, tokenizer, weights_hash  # noqa: E402

OUT = ROOT / "tests" / "goldens" / "nemotron_tiny"
LEFT = 56
RIGHTS = (13, 6, 3, 1, 0)
PROMPTS = {"en-US": 0, "de-DE": 1, "fr-FR": 2}
NUM_PROMPTS = 8
LANGUAGES = ("en-US", "de-DE")
# (blank bias, joint output scale, word-start bias, sentence-end bias), and the gains of the joint's encoder and
# prediction projections, found by trying (--try prints the stats line): tokens on about a third of the frames. As
# with scripts/parakeet_goldens.py's RNN-T, a random prediction network barely moves the joint: a frame that emits
# mostly emits max_symbols equal labels (no setting tried did otherwise).
LIFTS = (12.0, 4.0, 3.0, 2.0)
GAINS = (4.0, 4.0)


def config(tokdir: Path, sizes: Sizes = Sizes()) -> dict:
    d, p = sizes.d_model, sizes.pred
    encoder = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder", "feat_in": 128, "feat_out": -1,
        "n_layers": sizes.layers, "d_model": d, "use_bias": False, "subsampling": "dw_striding",
        "subsampling_factor": 8, "subsampling_conv_channels": sizes.subsampling_channels,
        "causal_downsampling": True, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
        "n_heads": sizes.heads, "att_context_size": [[LEFT, r] for r in RIGHTS],
        "att_context_probs": None, "att_context_style": "chunked_limited", "xscaling": False, "untie_biases": True,
        "pos_emb_max_len": 5000, "conv_kernel_size": 9, "conv_norm_type": "layer_norm",
        "conv_context_size": "causal", "dropout": 0.1, "dropout_pre_encoder": 0.1, "dropout_emb": 0.0,
        "dropout_att": 0.1,
    }
    return {
        "sample_rate": 16000,
        "tokenizer": {"dir": str(tokdir), "type": "bpe"},
        "model_defaults": {"enc_hidden": d, "pred_hidden": p, "joint_hidden": p, "num_prompts": NUM_PROMPTS,
                           "prompt_dictionary": PROMPTS, "initialize_prompt_feature": True},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor", "sample_rate": 16000,
            "normalize": "NA", "window_size": 0.025, "window_stride": 0.01, "window": "hann", "features": 128,
            "n_fft": 512, "log": True, "frame_splicing": 1, "dither": 1e-5, "pad_to": 0, "pad_value": 0.0,
        },
        "encoder": encoder,
        "decoder": {"_target_": "nemo.collections.asr.modules.RNNTDecoder", "normalization_mode": None,
                    "random_state_sampling": False, "blank_as_pad": True,
                    "prednet": {"pred_hidden": p, "pred_rnn_layers": 2, "t_max": None, "dropout": 0.2}},
        "joint": {"_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None, "preserve_memory": False,
                  "fuse_loss_wer": True, "fused_batch_size": 4,
                  "jointnet": {"joint_hidden": p, "activation": "relu", "dropout": 0.2, "encoder_hidden": d,
                               "pred_hidden": p}},
        "decoding": {"strategy": "greedy_batch", "model_type": "rnnt", "greedy": {"max_symbols": 10}},
        "loss": {"loss_name": "default"},
    }


def build(tokdir: Path, lifts: tuple[float, ...] = LIFTS, gains: tuple[float, ...] = GAINS):
    from nemo.collections.asr.models.rnnt_bpe_models_prompt import EncDecRNNTBPEModelWithPrompt
    from omegaconf import OmegaConf, open_dict

    model = EncDecRNNTBPEModelWithPrompt(cfg=OmegaConf.create(config(tokdir))).eval()
    randomize(model)
    blank_bias, scale, word_bias, stop_bias = lifts
    with torch.no_grad():
        # Unnormalised log-mels sit around -10: each first-convolution kernel made to sum to zero, so that the
        # random encoder follows the speech rather than that offset (a trained one has learnt to).
        first = model.encoder.pre_encode.conv[0].weight
        first.sub_(first.mean(dim=(-2, -1), keepdim=True))
        # The blank is the embedding's padding row: zeros in a real checkpoint (never trained), which the reference
        # server and mlx-audio feed as zeros rather than look up.
        model.decoder.prediction["embed"].weight[model.decoder.blank_idx].zero_()
        sp = model.tokenizer.tokenizer
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        vocab = len(pieces)
        lift = torch.zeros(vocab + 1)
        lift[[i for i, p in enumerate(pieces) if p.startswith("\u2581")]] = word_bias
        lift[[i for i, p in enumerate(pieces) if p in (".", "?", "!", "\u2581.")]] = stop_bias
        lift[vocab] = blank_bias
        lift[sp.unk_id()] = -20.0
        model.joint.enc.weight.mul_(gains[0])  # frames lead the joint, and the last token moves it on
        model.joint.pred.weight.mul_(gains[1])
        out = model.joint.joint_net[2]
        out.weight.mul_(scale)
        out.bias += lift
    with open_dict(model.cfg):
        model.cfg.validation_ds = {"use_start_end_token": False}
    return model


def center_joint(model, clip: np.ndarray) -> None:
    """The joint's encoder projection made to average zero over one clip's streamed frames: a random encoder's output
    has a large part that no frame changes, which would decide every frame alike."""
    prompted = np.concatenate([c["prompted"] for c in stream(model, clip, RIGHTS[0], LANGUAGES[0])["chunks"]])
    with torch.no_grad():
        model.joint.enc.bias -= model.joint.enc.weight @ torch.from_numpy(prompted.mean(axis=0))


def stream(model, clip: np.ndarray, right: int, language: str) -> dict:
    """NeMo's cache-aware streaming loop over one clip (as its example script runs it)."""
    from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer

    model.eval()
    model.encoder.set_default_att_context_size([LEFT, right])
    model.encoder.setup_streaming_params()
    model.set_inference_prompt(language)
    cfg = model.encoder.streaming_cfg
    buffer = CacheAwareStreamingAudioBuffer(model=model, online_normalization=False, pad_and_drop_preencoded=False)
    buffer.append_audio(clip)
    mel = buffer.buffer[0].T.numpy().copy()
    channel, time, channel_len = model.encoder.get_initial_cache_state(batch_size=1)
    hypotheses = None
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    apply = model._apply_prompt_to_encoded

    def capture(encoded):
        prompted = apply(encoded)
        seen.append((encoded[0].T.numpy().copy(), prompted[0].T.numpy().copy()))
        return prompted

    model._apply_prompt_to_encoded = capture
    chunks = []
    try:
        for step, (signal, length) in enumerate(buffer):
            with torch.no_grad():
                out = model.conformer_stream_step(
                    processed_signal=signal, processed_signal_length=length, cache_last_channel=channel,
                    cache_last_time=time, cache_last_channel_len=channel_len, keep_all_outputs=buffer.is_buffer_empty(),
                    previous_hypotheses=hypotheses, drop_extra_pre_encoded=0 if step == 0 else cfg.drop_extra_pre_encoded,
                    return_transcription=True)
            _, _, channel, time, channel_len, hypotheses = out[:6]
            hyp = hypotheses[0]
            chunks.append({"input_frames": int(signal.shape[-1]), "encoded": seen[-1][0], "prompted": seen[-1][1],
                           "ids": [int(i) for i in hyp.y_sequence], "frames": [int(t) for t in hyp.timestamp],
                           "text": hyp.text})
    finally:
        del model._apply_prompt_to_encoded
    return {"mel": mel, "chunks": chunks, "streaming_cfg": {
        "chunk_size": cfg.chunk_size, "shift_size": cfg.shift_size, "pre_encode_cache_size": cfg.pre_encode_cache_size,
        "drop_extra_pre_encoded": cfg.drop_extra_pre_encoded, "valid_out_len": cfg.valid_out_len,
        "last_channel_cache_size": cfg.last_channel_cache_size}}


def offline(model, clip: np.ndarray, right: int, language: str) -> dict:
    """NeMo's offline pass over the whole clip with the same chunked attention mask (model.forward, the streaming
    loop's oracle): its encoder output after the prompt and its greedy hypothesis."""
    model.eval()
    model.encoder.set_default_att_context_size([LEFT, right])
    with torch.no_grad():
        signal = torch.from_numpy(clip)[None]
        prompt = torch.tensor([PROMPTS[language]])
        encoded, length = model.forward(input_signal=signal, input_signal_length=torch.tensor([len(clip)]),
                                        prompt_indices=prompt)
        hyp = model.decoding.rnnt_decoder_predictions_tensor(encoder_output=encoded, encoded_lengths=length,
                                                             return_hypotheses=True)[0]
    return {"prompted": encoded[0, :, : int(length[0])].T.numpy().copy(), "ids": [int(i) for i in hyp.y_sequence],
            "frames": [int(t) for t in hyp.timestamp], "text": hyp.text}


def stats(name: str, right: int, language: str, r: dict) -> str:
    last = r["chunks"][-1]
    frames = sum(len(c["encoded"]) for c in r["chunks"])
    emitting = len(set(last["frames"]))
    return (f"{name} R={right} {language}: {len(r['chunks'])} chunks, {frames} frames, {len(last['ids'])} tokens on "
            f"{emitting} frames, {len(set(last['ids']))} distinct, text {last['text'][:60]!r}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--try", dest="trial", action="store_true",
                   help="one clip, the largest chunk, English: print the stats line, write nothing")
    p.add_argument("--lifts", type=float, nargs=4, default=LIFTS, metavar=("BLANK", "SCALE", "WORD", "STOP"),
                   help="the joint's output lifts (default: LIFTS)")
    p.add_argument("--gains", type=float, nargs=2, default=GAINS, metavar=("ENCODER", "PREDICTION"),
                   help="the joint's projection gains (default: GAINS)")
    args = p.parse_args()
    trial = args.trial
    torch.manual_seed(0)
    names = clip_names()
    audio = {name: np.concatenate([read(n) for n in files]) for name, files in names.items()}
    with tempfile.TemporaryDirectory() as tmp:
        tokdir = tokenizer(Path(tmp) / "tok")
        model = build(tokdir, tuple(args.lifts), tuple(args.gains))
        center_joint(model, audio["ljspeech"])
        if trial:
            for name in ("ljspeech", "long"):
                print(stats(name, RIGHTS[0], LANGUAGES[0], stream(model, audio[name], RIGHTS[0], LANGUAGES[0])))
            return
        OUT.mkdir(parents=True, exist_ok=True)
        model.save_to(str(OUT / "nemotron.nemo"))
        before = weights_hash(model)
        meta: dict = {"clips": names, "left": LEFT, "rights": list(RIGHTS), "prompts": PROMPTS, "runs": {}}
        arrays: dict[str, np.ndarray] = {}
        for right in RIGHTS:
            for language in LANGUAGES:
                for name, clip in audio.items():
                    r = stream(model, clip, right, language)
                    print(stats(name, right, language, r), flush=True)
                    chunks = r["chunks"]
                    arrays[f"mel/{name}"] = r["mel"]
                    encoded = np.concatenate([c["encoded"] for c in chunks])
                    if f"encoded/{right}/{name}" in arrays:  # the prompt comes after the encoder
                        assert np.array_equal(arrays[f"encoded/{right}/{name}"], encoded)
                    arrays[f"encoded/{right}/{name}"] = encoded
                    arrays[f"prompted/{right}/{language}/{name}"] = np.concatenate([c["prompted"] for c in chunks])
                    last = chunks[-1]
                    meta["runs"][f"{right}/{language}/{name}"] = {
                        "chunk_input_frames": [c["input_frames"] for c in chunks],
                        "chunk_frames": [len(c["encoded"]) for c in chunks],
                        "chunk_ids": [len(c["ids"]) for c in chunks],  # the hypothesis only grows
                        "ids": last["ids"], "frames": last["frames"], "text": last["text"],
                        "streaming_cfg": r["streaming_cfg"]}
                    assert all(c["ids"] == last["ids"][: len(c["ids"])] for c in chunks)
                    whole = offline(model, clip, right, language)
                    arrays[f"offline/{right}/{language}/{name}"] = whole.pop("prompted")
                    meta["runs"][f"{right}/{language}/{name}"]["offline"] = whole
                    print(f"  offline: {len(arrays[f'offline/{right}/{language}/{name}'])} frames, ids "
                          f"{'the same' if whole['ids'] == last['ids'] else 'DIFFERENT'}", flush=True)
        assert weights_hash(model) == before, "NeMo changed the weights while decoding"
    np.savez_compressed(OUT / "goldens.npz", **{k: v.astype(np.float32) for k, v in arrays.items()})
    (OUT / "goldens.json").write_text(json.dumps(meta, ensure_ascii=False, separators=(",", ":")) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    sys.exit(main())
