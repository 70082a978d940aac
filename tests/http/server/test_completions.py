"""Text completions through the official openai client."""

from __future__ import annotations

import openai
import pytest

from tests.fixtures.fake_pool import FakeModelPool, text_script


def test_completion_non_streamed(pool: FakeModelPool, client: openai.OpenAI) -> None:
    pool.script_for = lambda req: text_script([" Paris", "."], prompt_tokens=6, cached_tokens=4)
    r = client.completions.create(model="fake-model", prompt="The capital of France is")
    assert r.object == "text_completion"
    assert r.choices[0].text == " Paris."
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == 8
    assert r.usage.prompt_tokens_details.cached_tokens == 4
    assert pool.requests[-1].prompt == "The capital of France is"
    assert pool.requests[-1].messages is None


def test_completion_streamed_with_usage(pool: FakeModelPool, client: openai.OpenAI) -> None:
    pool.script_for = lambda req: text_script(["a", "b"], prompt_tokens=3)
    chunks = list(
        client.completions.create(
            model="fake-model", prompt="x", stream=True, stream_options={"include_usage": True}
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "ab"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage.prompt_tokens == 3 and chunks[-1].usage.completion_tokens == 2


@pytest.mark.parametrize(
    ("prompt", "text", "ids"),
    [(["one string"], "one string", None), ([1, 2, 3], None, [1, 2, 3]), ([[4, 5]], None, [4, 5])],
)
def test_prompt_forms(client: openai.OpenAI, pool: FakeModelPool, prompt, text, ids) -> None:
    client.completions.create(model="fake-model", prompt=prompt)
    assert (pool.requests[-1].prompt, pool.requests[-1].prompt_token_ids) == (text, ids)


@pytest.mark.parametrize("stream", [False, True])
def test_echo_and_logprobs(client: openai.OpenAI, pool: FakeModelPool, stream: bool) -> None:
    pool.script_for = lambda req: text_script(["a", "b"], logprobs=True)
    r = client.completions.create(
        model="fake-model", prompt="Q:", echo=True, logprobs=2, stream=stream
    )
    choices = [c for chunk in r for c in chunk.choices] if stream else r.choices
    assert "".join(c.text for c in choices) == "Q:ab"
    lps = [c.logprobs for c in choices if c.logprobs and c.logprobs.tokens]
    # The echoed prompt comes with its own logprobs (none for its first token), as OpenAI's.
    assert [t for lp in lps for t in lp.tokens] == ["Q:", "a", "b"]
    assert [o for lp in lps for o in lp.text_offset] == [0, 2, 3]
    assert [v for lp in lps for v in lp.token_logprobs] == [None, -0.5, -0.5]
    answer = [top for lp in lps for top in lp.top_logprobs][1]
    assert answer == {"a": -0.5, "x": -1.5}
    assert pool.requests[-1].sampling.logprobs and pool.requests[-1].sampling.top_logprobs == 2


def test_stop_and_max_tokens_reach_the_engine(client: openai.OpenAI, pool: FakeModelPool) -> None:
    client.completions.create(model="fake-model", prompt="x", stop=["\n", "END"], max_tokens=9)
    assert pool.requests[-1].stop == ["\n", "END"]
    assert pool.requests[-1].max_tokens == 9


def test_unset_max_tokens_is_left_to_the_engine(client: openai.OpenAI, pool: FakeModelPool) -> None:
    # The engine fits engine.default_max_tokens to the room the prompt leaves; a fixed
    # 2048 filled in here would turn a 3,000-token prompt on a 4,096 model into a 400.
    client.completions.create(model="fake-model", prompt="x")
    assert pool.requests[-1].max_tokens is None
