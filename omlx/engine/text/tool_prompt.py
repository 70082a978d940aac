"""Tools for chat templates that ignore them: written into the prompt (pure Python).

Many small models' templates (SmolLM2's among them) render only role and content, so
`tools` vanish and the model never learns it may call one. For those, the definitions and
the calling convention go into the system message in the Hermes format (Qwen2.5 and
NousResearch Hermes document it; it is what the output parser expects from templates
that show no markup), and earlier calls and results are written in that format too.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

INLINE_TOOL_FORMAT = "hermes"  # the convention written below; parser and grammar follow it
PROBE_NAME = "omlx_probe_tool_7f3a"
_PROBE_TOOL = {
    "type": "function",
    "function": {"name": PROBE_NAME, "description": "", "parameters": {"type": "object"}},
}
_renders: dict[tuple[int, str], bool] = {}

HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def template_renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template shows `tools` to the model (probed once)."""
    template = getattr(tokenizer, "chat_template", None)
    key = (id(tokenizer), template if isinstance(template, str) else "")
    if key not in _renders:
        try:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": "x"}],
                tools=[_PROBE_TOOL],
                tokenize=False,
                add_generation_prompt=True,
            )
            _renders[key] = PROBE_NAME in text
        except Exception:  # a template that chokes on tools does not support them
            _renders[key] = False
    return _renders[key]


def tools_system_text(tools: list[dict[str, Any]]) -> str:
    lines = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    return HEADER + lines + FOOTER


def inline_tools(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Messages with the tools in the system message and calls/results written as text."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = "\n".join(_call_text(c) for c in m["tool_calls"])
            content = f"{m['content']}\n{calls}" if m.get("content") else calls
            out.append({"role": "assistant", "content": content})
        elif m["role"] == "tool":
            result = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool_results"):
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + result}
            else:
                out.append({"role": "user", "content": result, "_tool_results": True})
        else:
            out.append({k: v for k, v in m.items() if k not in ("tool_calls", "tool_call_id")})
    out = [{k: v for k, v in m.items() if k != "_tool_results"} for m in out]
    system = tools_system_text(tools)
    if out and out[0]["role"] == "system":
        return [{**out[0], "content": f"{out[0]['content']}\n\n{system}"}, *out[1:]]
    return [{"role": "system", "content": system}, *out]


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        with contextlib.suppress(json.JSONDecodeError):
            args = json.loads(args)
    body = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"
