"""``POST /v1/audio/transcriptions``: OpenAI-compatible, with SSE streaming. Validates everything before any
model work, then hands one job to the model's runtime; a client that goes away cancels it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import msgspec
import structlog
from aiohttp import web

from omnid.api.errors import ApiError, invalid, require_loaded, require_ready
from omnid.api.forms import Form, FormLimits, flag, integer, known_fields, number, read_form
from omnid.audio import SAMPLE_RATE, AudioDecodeError, decode_audio
from omnid.echo import shown
from omnid.engine.interface import Capabilities, TranscriptionEngine
from omnid.engine.languages import LANGUAGES
from omnid.engine.options import TranscribeOptions
from omnid.engine.transcript import Segment, Transcript
from omnid.formats import CONTENT_TYPES, FORMATS, SPEAKER_FORMATS, render
from omnid.logging import content
from omnid.realtime.protocol.server_events import ErrorDetail, Usage  # one shape on every route
from omnid.runtime import diarization, transcription
from omnid.runtime import request_rules as rules
from omnid.runtime.catalog import NotTranscription, UnknownModel
from omnid.runtime.errors import JobCancelledError
from omnid.runtime.models import transcribe_options
from omnid.runtime.scheduler import EngineRuntime
from omnid.runtime.speakers import Speakers, assign, named
from omnid.vad.filter import speech_spans

log = structlog.get_logger(__name__)

GRANULARITIES = {"segment", "word"}
AUDIO_LAYOUTS = {"reference", "voxt_swift"}
VAD_FILTER_THRESHOLD = 0.5  # Silero's own default
# The fields the route reads (docs/wire-protocol.md): OpenAI's it honours, then the reference servers' and omnid's.
FIELDS = ("model", "language", "prompt", "response_format", "temperature", "timestamp_granularities[]", "stream",
          "timestamp_granularities", "max_new_tokens", "vad_filter", "diarize", "include_generation_metadata",
          "stop_at_end_of_text", "stop_on_token_loop", "audio_layout", "punctuation", "use_punctuation",
          "use_itn")
# OpenAI's documented request fields that omnid cannot honour: taken and ignored, as docs/wire-protocol.md lists
# them ("OpenAI fields omnid ignores"). Arrays as the SDKs send them (name[]) or bare; chunking_strategy as a
# string, or as the SDKs flatten its object.
OPENAI_IGNORED = ("include[]", "include", "chunking_strategy", "chunking_strategy[type]", "chunking_strategy[threshold]",
                  "chunking_strategy[prefix_padding_ms]", "chunking_strategy[silence_duration_ms]",
                  "known_speaker_names[]", "known_speaker_names", "known_speaker_references[]",
                  "known_speaker_references", "keywords[]", "keywords", "languages[]", "languages")


@dataclass(frozen=True)
class Request:
    runtime: EngineRuntime[TranscriptionEngine]
    options: TranscribeOptions
    response_format: str
    stream: bool
    metadata: bool
    vad_filter: bool
    audio_bytes: bytes
    words: bool = False  # words in verbose_json (timestamp_granularities[]=word)
    diarizer: EngineRuntime | None = None  # speakers asked for (diarized_json, or diarize=true)


class GenerationMetadata(msgspec.Struct):
    """What the reference servers report, field for field: the language as the model names it (None when none was
    detected), and ``stop`` or ``length``."""

    generated_token_count: int
    language: str | None
    finish_reason: str


class DeltaEvent(msgspec.Struct, tag_field="type", tag="transcript.text.delta"):
    delta: str


class TaggedSegment(msgspec.Struct, omit_defaults=True):
    """A segment with what the model heard beside its words (SenseVoice's tags), as verbose_json's segments say it."""

    start: float
    end: float
    text: str
    language: str | None = None
    emotion: str | None = None
    events: list[str] | None = None


class DoneEvent(msgspec.Struct, tag_field="type", tag="transcript.text.done", omit_defaults=True):
    text: str
    usage: Usage
    generation_metadata: GenerationMetadata | None = None
    # omnid's own details beside the reference's fields: "token_loop" when the loop guard ended a decode (reported
    # as finish_reason "stop", as the reference reports its own loop stop); a model that tags what it hears
    # (emotion, events: SenseVoice) gives its segments with their tags, which the try-it page shows.
    stopped_by: str | None = None
    segments: list[TaggedSegment] | None = None


class ErrorEvent(msgspec.Struct, tag_field="type", tag="error"):
    error: ErrorDetail


def parse(form: Form, services) -> Request:
    known_fields(form, FIELDS, OPENAI_IGNORED)
    model_id = (form.get("model") or "").strip()
    runtime = _model(model_id, services)
    fmt = (form.get("response_format") or "json").strip()
    if fmt not in FORMATS + SPEAKER_FORMATS:
        raise invalid("response_format", f"response_format must be one of {', '.join(FORMATS + SPEAKER_FORMATS)}, "
                                         f"got {shown(fmt)}")
    diarizer = _diarizer(form, fmt, services, transcription.capabilities(runtime).speakers)
    grans = [g.strip() for g in form.fields.get("timestamp_granularities[]", []) + form.fields.get("timestamp_granularities", [])]
    for g in grans:
        if g not in GRANULARITIES:
            raise invalid("timestamp_granularities[]", f"timestamp_granularities[] must be 'segment' or 'word', got {shown(g)}")
    if grans and fmt != "verbose_json":
        raise invalid("timestamp_granularities[]", "timestamp_granularities[] needs response_format=verbose_json")
    can = transcription.capabilities(runtime)
    if "word" in grans:
        rules.word_timestamps(can, runtime.name, "timestamp_granularities[]")
    rules.response_format(fmt, can, runtime.name)
    language = rules.language(form.get("language"), can, runtime.name)
    if language.instead:
        log.info("language_detected_instead", model=runtime.name, requested=shown(form.get("language")))
    limits = services.config.transcription
    temperature = rules.temperature(number(form, "temperature", rules.TEMPERATURE), can, runtime.name)
    max_new_tokens = rules.token_budget(integer(form, "max_new_tokens", rules.MAX_NEW_TOKENS), can)
    prompt = rules.prompt(form.get("prompt"), can, runtime.name, limits.max_prompt_chars)
    # use_punctuation: the reference Cohere server's name for the same switch (punctuation wins where both come).
    switch = "punctuation" if form.get("punctuation") is not None or form.get("use_punctuation") is None \
        else "use_punctuation"
    punctuation = rules.punctuation(rules.flag(switch, form.get(switch)), can, runtime.name, switch)
    itn = rules.itn(rules.flag("use_itn", form.get("use_itn")), can, runtime.name)
    vad_filter = flag(form, "vad_filter") if form.get("vad_filter") is not None else limits.vad_filter
    stream = flag(form, "stream")
    metadata = flag(form, "include_generation_metadata")
    flag(form, "stop_at_end_of_text")
    flag(form, "stop_on_token_loop")
    if metadata and not stream:
        raise invalid("include_generation_metadata", "include_generation_metadata requires stream=true")
    if diarizer is not None and stream:
        raise invalid("stream", "speakers (diarized_json, diarize=true) are not streamed: stream must be false",
                      "unsupported_value")
    layout = (form.get("audio_layout") or "").strip()
    if layout and layout not in AUDIO_LAYOUTS:
        raise invalid("audio_layout", f"audio_layout must be 'reference' or 'voxt_swift', got {shown(layout)}")
    if form.file is None:
        raise invalid("file", "file is required: a multipart part named 'file' with a filename", "missing_file")
    options = transcribe_options(
        services.config.transcription,
        language=language.code,
        prompt=prompt,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        # Speakers are assigned word by word where the model times words.
        word_timestamps="word" in grans or (diarizer is not None and can.word_timestamps),
        # A model with a forced aligner times what will show times (not a stream: it sends text as it comes).
        timed=runtime.aligner is not None and not stream and (fmt in (*rules.TIMED_FORMATS, "verbose_json")
                                                               or diarizer is not None),
        punctuation=punctuation,
        itn=itn,
    )
    return Request(runtime, options, fmt, stream, metadata, vad_filter, form.file, "word" in grans, diarizer)


def _diarizer(form: Form, fmt: str, services, own: bool = False) -> EngineRuntime | None:
    """The diarization runtime when the request asks for speakers; a 400 naming the field when it cannot have them.
    None for a model that names its speakers itself (``own``)."""
    diarize = flag(form, "diarize") if form.get("diarize") is not None else False
    if diarize and fmt not in ("verbose_json", "diarized_json"):
        raise invalid("diarize", "diarize=true needs response_format=verbose_json (or diarized_json)")
    field = "response_format" if fmt in SPEAKER_FORMATS else "diarize" if diarize else None
    if field is None or own:
        return None
    runtime = services.diarizer
    if runtime is None:
        raise invalid(field, f"{field}={'diarized_json' if field == 'response_format' else 'true'} needs a speaker "
                             "diarization model (a [[models]] entry with kind = \"sortformer\"); none is configured",
                      "no_diarization_model")
    require_loaded(runtime)
    return runtime


def _model(name: str, services) -> EngineRuntime[TranscriptionEngine]:
    try:
        runtime = services.transcribers[services.catalog.resolve(name)]
    except NotTranscription as exc:
        raise invalid("model", str(exc), "invalid_model_kind") from None
    except UnknownModel:
        raise ApiError(404, f"model {shown(name)} does not exist; see GET /v1/models", param="model",
                       code="model_not_found") from None
    require_loaded(runtime)
    return runtime


async def handle(request: web.Request, services) -> web.StreamResponse:
    require_ready(services)
    config = services.config
    limits = FormLimits(int(config.server.max_upload_mb * 1024 * 1024), config.server.max_form_parts)
    form = await read_form(request, limits)
    req = parse(form, services)
    loop = asyncio.get_running_loop()
    try:
        limit = config.transcription.max_audio_seconds
        model_limit = req.runtime.engine.capabilities.max_audio_s
        if model_limit is not None:
            limit = min(limit, model_limit)
        audio = await loop.run_in_executor(None, decode_audio, req.audio_bytes, limit)
    except AudioDecodeError as exc:
        raise invalid("file", f"file: {exc}", "invalid_audio") from exc
    started = time.perf_counter()
    transcript = None
    speakers: Speakers | None
    try:
        t = config.transcription
        speech = await transcription.model_clips(req.runtime, services.vad, audio, t.vad_filter_pad_s,
                                                 VAD_FILTER_THRESHOLD)
        if speech is None and req.vad_filter:
            speech = await _speech(audio, services)
        if req.stream:
            return await _stream(request, req, audio, speech, config.server.sse_heartbeat_s)
        if req.diarizer is not None:
            transcript, speakers = await _with_speakers(req, audio, speech, services)
        else:
            transcript = await _submit(req, audio, speech, None)
            speakers = named(transcript) if transcription.capabilities(req.runtime).speakers else None
    finally:
        _log(req, audio, started, transcript.text if transcript is not None else None)
    body = render(transcript, req.response_format, words=req.words, speakers=speakers)
    return web.Response(text=body, content_type=CONTENT_TYPES[req.response_format].split(";")[0], charset="utf-8")


async def _speech(audio, services) -> list[tuple[int, int]]:
    """Where Silero VAD hears speech in the file: the only parts the model will see."""
    t = services.config.transcription
    probs = await transcription.speech_probabilities(services.vad, audio)
    return speech_spans(probs, len(audio), VAD_FILTER_THRESHOLD, t.vad_filter_min_silence_s, t.vad_filter_pad_s)


async def _submit(req: Request, audio, speech: list[tuple[int, int]] | None, on_segment) -> Transcript:
    """One transcription job; with speech spans, only they are decoded (none: the model is not asked)."""
    return await transcription.transcribe(req.runtime, audio, req.options, clips=speech, on_segment=on_segment)


async def _with_speakers(req: Request, audio, speech, services) -> tuple[Transcript, Speakers]:
    """Transcription and diarization of the same audio, side by side on their own engines, then joined."""
    assert req.diarizer is not None
    speakers = asyncio.ensure_future(diarization.diarize(req.diarizer, audio, services.config.diarization.file_latency))
    try:
        transcript = await _submit(req, audio, speech, None)
        probs = await speakers
    finally:
        if not speakers.done():
            speakers.cancel()
    return transcript, assign(transcript, probs)


def _sse(event: msgspec.Struct | bytes) -> bytes:
    payload = event if isinstance(event, bytes) else msgspec.json.encode(event)
    return b"data: " + payload + b"\n\n"


async def _stream(request: web.Request, req: Request, audio, speech: list[tuple[int, int]] | None,
                  heartbeat_s: float) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    segments: asyncio.Queue[Segment] = asyncio.Queue()

    def on_segment(seg: Segment) -> None:
        loop.call_soon_threadsafe(segments.put_nowait, seg)

    job = asyncio.ensure_future(_submit(req, audio, speech, on_segment))
    try:
        # Saturation is answered as a plain 503 when it is known before the stream starts.
        await asyncio.wait({job}, timeout=0.05)
        if job.done() and (failure := job.exception()) is not None:
            raise failure
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        raw, sent = "", ""
        while True:
            getter = asyncio.ensure_future(segments.get())
            done, _ = await asyncio.wait({job, getter}, timeout=heartbeat_s, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                raw += getter.result().text
                target = raw.strip()
                if len(target) > len(sent):
                    await resp.write(_sse(DeltaEvent(target[len(sent) :])))
                    sent = target
                continue
            getter.cancel()
            if job in done:
                break
            await resp.write(b":\n\n")  # heartbeat
        while not segments.empty():  # segments posted just before the job's result
            raw += segments.get_nowait().text
        try:
            transcript = job.result()
        except JobCancelledError:  # the daemon is stopping: the client still gets its in-band error
            detail = ErrorDetail(type="server_error", code="shutting_down", message="The server is shutting down.")
            await resp.write(_sse(ErrorEvent(detail)) + b"data: [DONE]\n\n")
            return resp
        except Exception:  # noqa: BLE001  (any engine failure is reported in band)
            log.exception("transcription_failed")
            failed = ErrorDetail(type="server_error", code="transcription_failed", message="Transcription failed.")
            await resp.write(_sse(ErrorEvent(failed)))
            await resp.write(b"data: [DONE]\n\n")
            return resp
        if len(transcript.text) > len(sent):
            await resp.write(_sse(DeltaEvent(transcript.text[len(sent) :])))
        closing = DoneEvent(transcript.text, Usage(seconds=round(transcript.duration, 3)), segments=_tagged(transcript))
        if req.metadata:
            closing = _with_metadata(closing, transcript, req.runtime.engine.capabilities)
        await resp.write(_sse(closing))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
    finally:
        if not job.done():
            job.cancel()


def _tagged(transcript: Transcript) -> list[TaggedSegment] | None:
    """The segments with their tags, where the model tags what it hears (None: it does not)."""
    if not any(s.emotion is not None or s.events is not None for s in transcript.segments):
        return None
    return [TaggedSegment(round(s.start, 3), round(s.end, 3), s.text.strip(),
                          LANGUAGES.get(s.language, s.language) if s.language else None, s.emotion,
                          list(s.events) if s.events is not None else None) for s in transcript.segments]


def _with_metadata(done: DoneEvent, transcript: Transcript, can: Capabilities) -> DoneEvent:
    """The reference's generation metadata: its two finish reasons, the language in the model's own naming."""
    names = can.language_names or {}
    language = names.get(transcript.language, transcript.language) or None
    looped = transcript.finish_reason == "loop"
    meta = GenerationMetadata(transcript.generated_tokens, language, "stop" if looped else transcript.finish_reason)
    return msgspec.structs.replace(done, generation_metadata=meta, stopped_by="token_loop" if looped else None)


def _log(req: Request, audio, started: float, text: str | None) -> None:
    seconds = time.perf_counter() - started
    audio_s = len(audio) / SAMPLE_RATE
    log.info(
        "transcription",
        model=req.runtime.name,
        format=req.response_format,
        stream=req.stream,
        audio_s=round(audio_s, 3),
        duration_s=round(seconds, 3),
        rtf=round(seconds / audio_s, 4) if audio_s else None,
        **content(text),
    )
