"""The chat prompt of FunASR's LLM-based recognisers (funasr 1.4.16 ``models/fun_asr_nano/model.py``: get_prompt,
generate_chatml, data_load_speech), as Fun-ASR-Nano decodes it.

The user's instruction (get_prompt): an optional hotword preamble (``请结合上下文信息，更加准确地完成语音转写任务。
如果没有相关信息，我们会留空。`` then ``**上下文信息：**`` and ``热词列表：[a, b]``), ``语音转写`` or ``语音转写成{language}``,
``，不进行文本规整`` when inverse text normalisation is off, then ``：``. The chat: ``<|im_start|>system\\nYou are a
helpful assistant.<|im_end|>\\n<|im_start|>user\\n{instruction}`` + the audio + ``<|im_end|>\\n<|im_start|>
assistant\\n`` (no thinking block). funasr tokenizes the text before and after the audio apart, and puts one
placeholder id per audio slot between them (its adaptor's first rows replace their embeddings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

SYSTEM = "You are a helpful assistant."
HOTWORDS = ("请结合上下文信息，更加准确地完成语音转写任务。如果没有相关信息，我们会留空。\n\n\n**上下文信息：**\n\n\n"
            "热词列表：[{words}]\n")
PLACEHOLDER = 0  # funasr's audio slot id; never looked up: the slots' embeddings are the adaptor's rows


class Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


def instruction(language: str | None, itn: bool, hotwords: Sequence[str] = ()) -> str:
    """funasr's get_prompt: what the user asks for (``language`` as the model names it: 中文, 英文, 日文...)."""
    text = HOTWORDS.format(words=", ".join(hotwords)) if hotwords else ""
    text += "语音转写" if language is None else f"语音转写成{language}"
    if not itn:
        text += "，不进行文本规整"
    return text + "："


def prompt_ids(tokenizer: Encoder, slots: int, language: str | None, itn: bool,
               hotwords: Sequence[str] = ()) -> tuple[list[int], int]:
    """The prompt's ids with ``slots`` audio placeholders, and where the first slot is."""
    before = tokenizer.encode(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
                              f"{instruction(language, itn, hotwords)}")
    after = tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n")
    return before + [PLACEHOLDER] * slots + after, len(before)
