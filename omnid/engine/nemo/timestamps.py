"""Token, word and segment times as NeMo 3.0.0's ``transcribe(timestamps=True)`` computes them for a BPE transducer
(``rnnt_decoding.py`` ``compute_rnnt_timestamps``, ``timestamp_utils.py`` ``get_words_offsets`` and
``get_segment_offsets``), in encoder frames; seconds are ``offset x window stride x subsampling`` as NeMo multiplies.

- A token spans [frame, frame + 1) for RNN-T and [frame, frame + duration) for TDT; with TDT, a punctuation token
  after the first gets no time of its own: it starts and ends where the token before it ends. CTC's tokens span
  from the previous token's first frame to their own (``ctc_decoding.py``), punctuation ending where it starts.
- A word starts at a piece whose text differs from the piece (a ``▁`` word start), or at a lone space not followed
  by punctuation; punctuation never starts a word: it joins the word before it (a piece of the word being built,
  replacing a trailing ``▁``; or the last word finished, taking its end). The first word starts with the first token.
- A segment ends with a word that ends in (or is) one of the segment delimiters (``. ? !``); its text is its words
  joined by spaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from omnid.audio import SAMPLE_RATE
from omnid.engine.interface import Sentence
from omnid.engine.nemo.tokenizer import SPACE, Vocabulary
from omnid.engine.nemo.transducer import Token
from omnid.engine.transcript import Segment, Word

SEGMENT_DELIMITERS = (".", "?", "!")


@dataclass(frozen=True)
class Span:
    text: str
    start_offset: int  # encoder frames
    end_offset: int
    first: int = 0  # the tokens it holds: [first, last) of the decode's tokens
    last: int = 0

    def seconds(self, frame_stride: float, subsampling: int) -> tuple[float, float]:
        return self.start_offset * frame_stride * subsampling, self.end_offset * frame_stride * subsampling


@dataclass(frozen=True)
class Char:
    id: int
    text: str  # the piece decoded alone
    start: int
    end: int


def token_spans(tokens: list[Token], vocab: Vocabulary, ctc: bool = False) -> list[Char]:
    """Each token's text and frames. Transducers: [frame, frame + 1) (RNN-T) or [frame, frame + duration) (TDT),
    a TDT punctuation token after the first placed at the previous token's end. CTC (NeMo's token lengths): a token
    spans from the previous token's first frame to its own (the first from one frame before its own), and one whose
    text starts with punctuation ends where it starts."""
    chars: list[Char] = []
    for i, t in enumerate(tokens):
        text = vocab.piece_text([t.id])
        if ctc:
            start = tokens[i - 1].frame if i else max(0, t.frame - 1)
            end = start if i and text[:1] in vocab.punctuation and text else t.frame
        else:
            start, end = t.frame, t.frame + (t.duration if t.duration is not None else 1)
            if t.duration is not None and i > 0 and text in vocab.punctuation:
                start = end = chars[-1].end
        chars.append(Char(t.id, text, start, end))
    return chars


def words(chars: list[Char], vocab: Vocabulary) -> list[Span]:
    punctuation = vocab.punctuation
    out: list[Span] = []
    built: list[int] = []  # ids of the word being built
    first = 0  # its first token's index

    def next_text(i: int) -> str | None:
        for c in chars[i + 1 :]:
            if c.text and c.text != " ":
                return c.text
        return None

    for i, c in enumerate(chars):
        is_punctuation = c.text in punctuation and c.text != " "
        piece = vocab.pieces[c.id]
        starts = piece != c.text or (c.text == " " and next_text(i) not in punctuation)
        if starts and not is_punctuation:
            if built:
                out.append(Span(vocab.piece_text(built), chars[first].start, chars[i - 1].end, first, i))
            built = []
            if c.text != " ":
                built.append(c.id)
                first = i
        elif is_punctuation and not built and out:
            last = out[-1]
            text = last.text[:-1] if last.text.endswith(" ") else last.text
            out[-1] = Span(text + c.text, last.start_offset, c.end, last.first, i + 1)
        elif is_punctuation and built:
            if vocab.pieces[built[-1]] in (" ", "_", SPACE):
                built.pop()
            built.append(c.id)
        else:
            if not built:
                first = i
            built.append(c.id)
    if not out:
        if built:
            out.append(Span(vocab.piece_text(built), chars[0].start, chars[-1].end, 0, len(chars)))
        return out
    out[0] = Span(out[0].text, chars[0].start, out[0].end_offset, 0, out[0].last)
    if built:
        out.append(Span(vocab.piece_text(built), chars[first].start, chars[-1].end, first, len(chars)))
    return out


def segments(word_spans: list[Span], delimiters: tuple[str, ...] = SEGMENT_DELIMITERS) -> list[Span]:
    out: list[Span] = []
    pending: list[str] = []
    first = 0
    for i, w in enumerate(word_spans):
        if w.text and (w.text[-1] in delimiters or w.text in delimiters):
            pending.append(w.text)
            out.append(Span(" ".join(pending), word_spans[first].start_offset, w.end_offset,
                            word_spans[first].first, w.last))
            pending = []
            first = i + 1
            continue
        pending.append(w.text)
    if pending:
        out.append(Span(" ".join(pending), word_spans[first].start_offset, word_spans[-1].end_offset,
                        word_spans[first].first, word_spans[-1].last))
    return out


HOP_LENGTH = 160  # samples per mel frame (NeMo's 10 ms window stride); an encoder frame is SUBSAMPLING of them
SUBSAMPLING = 8


def transcript_segments(tokens: list[Token], vocab: Vocabulary, start: int, first_id: int,
                        ctc: bool = False) -> list[Segment]:
    """NeMo's segments of a decode's tokens, each with its words, on a file's timeline (``start``: the sample the
    decoded audio starts at), numbered from ``first_id``."""
    offset = start / SAMPLE_RATE

    def seconds(span: Span) -> tuple[float, float]:
        begin, end = span.seconds(HOP_LENGTH / SAMPLE_RATE, SUBSAMPLING)
        return round(offset + begin, 3), round(offset + end, 3)

    spans = words(token_spans(tokens, vocab, ctc=ctc), vocab)
    out: list[Segment] = []
    w = 0
    for seg in segments(spans):
        timed = []
        while w < len(spans) and spans[w].last <= seg.last:  # a segment is a run of consecutive words
            timed.append(Word(spans[w].text, *seconds(spans[w]), 1.0))  # NeMo gives no probability
            w += 1
        out.append(Segment(first_id + len(out), start // HOP_LENGTH, *seconds(seg), seg.text,
                           [t.id for t in tokens[seg.first : seg.last]], 0.0, 0.0, 0.0, 0.0, timed))
    return out


SENTENCE_ENDS = ("!", "?", "\u3002", "\uff1f", "\uff01")  # ! ? and their CJK forms
FRAME_SECONDS = HOP_LENGTH * SUBSAMPLING / SAMPLE_RATE


def sentences(tokens: list[Token], vocab: Vocabulary, offset: float = 0.0) -> list[Sentence]:
    """A live stream's sentences as the reference server cuts them: one ends at a token holding ``! ? 。 ？ ！``, or
    a ``.`` before a word start (a piece beginning with ``▁``) or at the end; each from its first token's frame to
    its last token's frame plus one frame, on a timeline starting at ``offset`` seconds."""
    out: list[Sentence] = []
    first = 0
    for i, t in enumerate(tokens):
        piece = vocab.piece_text([t.id])
        closes = any(c in piece for c in SENTENCE_ENDS) or (
            "." in piece and (i + 1 == len(tokens) or vocab.pieces[tokens[i + 1].id].startswith(SPACE)))
        if closes or i + 1 == len(tokens):
            text = vocab.text([u.id for u in tokens[first : i + 1]]).strip()
            out.append(Sentence(round(offset + tokens[first].frame * FRAME_SECONDS, 3),
                                round(offset + (t.frame + 1) * FRAME_SECONDS, 3), text))
            first = i + 1
    return out
