"""SenseVoice's tags: the language, emotion, audio-event and text-normalisation tokens it writes before (and,
over long inputs, among) the words, such as ``<|en|><|NEUTRAL|><|Speech|><|woitn|>``.

``rich_text`` is funasr 1.4.16's ``rich_transcription_postprocess`` (``utils/postprocess_utils.py``): the text cut
at each language tag, in each part every tag counted and removed, the part's most frequent emotion appended as an
emoji and each event prepended as one, the parts joined (a repeated leading event and trailing emotion dropped),
``The.`` replaced by a space. With ``emoji=False`` the same rule runs with every emoji empty: the plain transcript
omnid serves as ``text``. ``Tagged.of`` reads the structured fields omnid serves beside it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

LANGUAGE_TAGS = ("<|zh|>", "<|en|>", "<|yue|>", "<|ja|>", "<|ko|>", "<|nospeech|>")
# Emotions in funasr's order (a tie goes to the first); NEUTRAL, the default, shows no emoji.
EMOTIONS = {"<|HAPPY|>": "😊", "<|SAD|>": "😔", "<|ANGRY|>": "😡", "<|NEUTRAL|>": "", "<|FEARFUL|>": "😰",
            "<|DISGUSTED|>": "🤢", "<|SURPRISED|>": "😮"}
# Events as funasr prepends them (Cough shows the sneeze emoji there, as funasr's own table says).
EVENTS = {"<|BGM|>": "🎼", "<|Speech|>": "", "<|Applause|>": "👏", "<|Laughter|>": "😀", "<|Cry|>": "😭",
          "<|Sneeze|>": "🤧", "<|Breath|>": "", "<|Cough|>": "🤧"}
# Every tag funasr removes, in its order (its emoji_dict): tags it does not list (<|de|>) stay in the text.
REMOVED = ("<|nospeech|><|Event_UNK|>", *LANGUAGE_TAGS, "<|HAPPY|>", "<|SAD|>", "<|ANGRY|>", "<|NEUTRAL|>", "<|BGM|>",
           "<|Speech|>", "<|Applause|>", "<|Laughter|>", "<|FEARFUL|>", "<|DISGUSTED|>", "<|SURPRISED|>", "<|Cry|>",
           "<|EMO_UNKNOWN|>", "<|Sneeze|>", "<|Breath|>", "<|Cough|>", "<|Sing|>", "<|Speech_Noise|>", "<|withitn|>",
           "<|woitn|>", "<|GBG|>", "<|Event_UNK|>")
NO_SPEECH = "<|nospeech|><|Event_UNK|>"
_EMOTION_MARKS = ("😊", "😔", "😡", "😰", "🤢", "😮")
_EVENT_MARKS = ("🎼", "👏", "😀", "😭", "🤧", "😷")
# Structured names: an event or emotion tag's name in lower case; these tags are "unknown".
_UNKNOWN = ("<|EMO_UNKNOWN|>", "<|Event_UNK|>")
_ALL_EVENTS = (*EVENTS, "<|Sing|>", "<|Speech_Noise|>", "<|GBG|>", "<|Event_UNK|>")


def _format(part: str, emoji: bool) -> str:
    """funasr's format_str_v2: the part's tags removed, its events in front and its emotion behind, as emoji."""
    counts = {}
    for tag in REMOVED:
        counts[tag] = part.count(tag)
        part = part.replace(tag, "")
    emotion = "<|NEUTRAL|>"
    for tag in EMOTIONS:
        if counts[tag] > counts[emotion]:
            emotion = tag
    for tag, mark in EVENTS.items():
        if counts[tag] > 0:
            part = (mark if emoji else "") + part
    part += EMOTIONS[emotion] if emoji else ""
    for mark in (*_EMOTION_MARKS, *_EVENT_MARKS):
        part = part.replace(" " + mark, mark).replace(mark + " ", mark)
    return part.strip()


def _emotion_mark(s: str) -> str | None:
    return s[-1] if s[-1] in _EMOTION_MARKS else None


def _event_mark(s: str) -> str | None:
    return s[0] if s[0] in _EVENT_MARKS else None


def rich_text(raw: str, emoji: bool = True) -> str:
    """funasr's rich_transcription_postprocess of a decoded text (``emoji=False``: with every emoji empty)."""
    s = raw.replace(NO_SPEECH, "❓" if emoji else "")
    for tag in LANGUAGE_TAGS:
        s = s.replace(tag, "<|lang|>")
    parts = [_format(p, emoji).strip(" ") for p in s.split("<|lang|>")]
    out = " " + parts[0]
    current = _event_mark(out)  # always None (out starts with a space): funasr's rule, kept
    for part in parts[1:]:
        if not part:
            continue
        if _event_mark(part) == current and _event_mark(part) is not None:
            part = part[1:]
        if not part:
            continue
        current = _event_mark(part)
        if _emotion_mark(part) is not None and _emotion_mark(part) == _emotion_mark(out):
            out = out[:-1]
        out += part.strip().lstrip()
    return out.replace("The.", " ").strip()


def _name(tag: str) -> str:
    return "unknown" if tag in _UNKNOWN else tag[2:-2].lower()


@dataclass(frozen=True)
class Tagged:
    """What the tags of one decoded text say: its language (the first language tag; None for <|nospeech|> or none),
    its emotion (the most frequent emotion tag, ties to funasr's order, ``unknown`` only where no other is written;
    None where none is), its events (each event tag written, in order of first appearance, lower case: ``speech``,
    ``bgm``, ``applause``, ``laughter``, ...; ``<|Event_UNK|>`` as ``unknown``) and whether it asked for inverse
    text normalisation."""

    language: str | None
    emotion: str | None
    events: tuple[str, ...]

    @classmethod
    def of(cls, raw: str) -> Tagged:
        found = sorted((raw.find(t), t) for t in (*LANGUAGE_TAGS, *_ALL_EVENTS) if t in raw)
        languages = [t for _, t in found if t in LANGUAGE_TAGS]
        language = _name(languages[0]) if languages and languages[0] != "<|nospeech|>" else None
        events: list[str] = []
        for tag in (t for _, t in found if t in _ALL_EVENTS):
            events.append(_name(tag))
        counts = Counter({t: raw.count(t) for t in EMOTIONS if t in raw})
        emotion = None
        if counts:
            best = max(counts.values())
            emotion = _name(next(t for t in EMOTIONS if counts.get(t) == best))
        elif "<|EMO_UNKNOWN|>" in raw:
            emotion = "unknown"
        return cls(language, emotion, tuple(events))
