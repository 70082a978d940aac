"""Streaming split of `<think>…</think>` into reasoning and content."""

from __future__ import annotations

from omlx.engine.text.parsers.delta import find_first, partial_marker_len

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def prompt_ends_in_think(prompt: str) -> bool:
    """True when the rendered prompt opens a thinking block the output continues."""
    return prompt.rstrip().endswith(THINK_OPEN)


class ThinkSplitter:
    """Routes text inside `<think>…</think>` to reasoning, the rest to content.

    Whitespace that only frames the markup (after `<think>`, before `</think>`,
    after `</think>`) is dropped, so neither stream starts or ends with the padding
    templates put around the block. A stray `</think>` in content is dropped too.
    """

    def __init__(self, *, start_in_reasoning: bool) -> None:
        self._in_reasoning = start_in_reasoning
        self._buf = ""
        # Leading whitespace of the current segment is still to be dropped.
        self._strip_leading = start_in_reasoning

    def feed(self, text: str) -> tuple[str, str]:
        """Returns (reasoning, content) that are safe to release."""
        self._buf += text
        reasoning: list[str] = []
        content: list[str] = []
        while self._buf:
            if self._in_reasoning:
                if not self._step_reasoning(reasoning):
                    break
            elif not self._step_content(content):
                break
        return "".join(reasoning), "".join(content)

    def finish(self) -> tuple[str, str]:
        text, self._buf = self._buf, ""
        text = self._lead(text)
        return (text, "") if self._in_reasoning else ("", text)

    def _lead(self, text: str) -> str:
        if self._strip_leading:
            text = text.lstrip()
            if text:
                self._strip_leading = False
        return text

    def _step_reasoning(self, out: list[str]) -> bool:
        """Consume reasoning text; True when a marker was consumed and the loop continues."""
        i = self._buf.find(THINK_CLOSE)
        if i >= 0:
            out.append(self._lead(self._buf[:i].rstrip()))
            self._buf = self._buf[i + len(THINK_CLOSE) :]
            self._in_reasoning = False
            self._strip_leading = True
            return True
        # Hold a partial `</think>` and trailing whitespace (it may precede `</think>`).
        hold = partial_marker_len(self._buf, (THINK_CLOSE,))
        keep = len(self._buf[: len(self._buf) - hold].rstrip())
        out.append(self._lead(self._buf[:keep]))
        self._buf = self._buf[keep:]
        return False

    def _step_content(self, out: list[str]) -> bool:
        hit = find_first(self._buf, (THINK_OPEN, THINK_CLOSE))
        if hit is not None:
            i, marker = hit
            out.append(self._lead(self._buf[:i]))
            self._buf = self._buf[i + len(marker) :]
            self._in_reasoning = marker == THINK_OPEN
            self._strip_leading = True
            return True
        hold = partial_marker_len(self._buf, (THINK_OPEN, THINK_CLOSE))
        keep = len(self._buf) - hold
        out.append(self._lead(self._buf[:keep]))
        self._buf = self._buf[keep:]
        return False
