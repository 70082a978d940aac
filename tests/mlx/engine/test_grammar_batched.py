"""Grammar masks applied for all constrained rows at once (the fused generator's batched
path) give the tokens mlx-lm's per-row logits-processor protocol gives."""

from __future__ import annotations

import json

import pytest
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import make_logits_processors

from omlx.engine.api import ResponseFormat
from omlx.engine.constraints import GrammarCompiler, request_grammar
from omlx.engine.grammar_mask import GrammarProcessor
from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator
from tests.fixtures.tiny_models import build_tiny_in_memory, tiny_config
from tests.fixtures.tiny_tokenizer import EOS_TOKEN, _built_files, tokenizer_vocab
from tests.unit.engine.test_constraints import _req

pytestmark = [pytest.mark.timeout(120), pytest.mark.mlx_lm_diff]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "n"],
    "additionalProperties": False,
}
# (step to insert at, prompt, constrained, repetition penalty or None)
ARRIVALS = [
    (0, [5, 9, 14, 3, 7, 2], True, None),
    (0, [8, 1, 4], False, None),
    (1, [11, 12, 13, 14], True, 1.3),
    (3, [4], True, None),
    (3, [6, 6, 6, 2, 1], False, 1.2),
    (5, [20, 21, 22, 23], True, None),
]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def setup():
    model = build_tiny_in_memory("llama")
    eos = tokenizer_vocab()[EOS_TOKEN]
    vocab = tiny_config("llama")["vocab_size"]
    text = (_built_files() / "tokenizer.json").read_text()
    compiler = GrammarCompiler(text, vocab, [eos])
    grammar = request_grammar(
        _req(response_format=ResponseFormat("json_schema", SCHEMA)), "hermes", compiler.special_id
    )
    return model, compiler.compile(grammar), eos


def run(generator_class, model, compiled, eos):
    gen = generator_class(model, completion_batch_size=8, prefill_batch_size=2)
    uid_of, out, done, step = {}, {}, set(), 0
    pending = list(enumerate(ARRIVALS))
    while pending or len(done) < len(ARRIVALS):
        for item in [p for p in pending if p[1][0] <= step]:
            pending.remove(item)
            i, (_, prompt, constrained, penalty) = item
            procs = make_logits_processors(repetition_penalty=penalty) if penalty else []
            if constrained:
                procs.insert(0, GrammarProcessor(compiled.matcher(), len(prompt)))
            [uid] = gen.insert([prompt], max_tokens=[MAX_TOKENS], logits_processors=[procs])
            uid_of[uid], out[i] = i, []
        _, responses = gen.next()
        for r in responses:
            i = uid_of[r.uid]
            if r.finish_reason is None and r.token != eos:
                out[i].append(r.token)
            else:
                done.add(i)
                if r.finish_reason is None:
                    gen.remove([r.uid])
        step += 1
        assert step < 200, "generation did not finish"
    gen.close()
    return out


def test_batched_masks_match_the_per_row_protocol(setup):
    model, compiled, eos = setup
    per_row = run(BatchGenerator, model, compiled, eos)
    batched = run(FusedJoinBatchGenerator, model, compiled, eos)
    assert batched == per_row
    vocab = {v: k for k, v in tokenizer_vocab().items()}
    for i, (_, _, constrained, _) in enumerate(ARRIVALS):
        if constrained:  # the grammar held in both: a conforming object, then EOS
            text = "".join(vocab[t] for t in batched[i]).replace("Ġ", " ").replace("Ċ", "\n")
            assert json.loads(text).keys() == {"name", "n"}, text
