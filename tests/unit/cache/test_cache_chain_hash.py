"""Chain-hashed block keys with block_size=4: exact values and what changes them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from omlx.cache.chain_hash import block_key, chain_keys, iter_chain_keys

B = 4
TOKENS = list(range(10))  # two full blocks and a partial one


def test_exact_keys() -> None:
    # Golden values: a change here invalidates every cold-tier file (bump HASH_VERSION).
    assert chain_keys("fp", TOKENS, B) == [
        "539cb0024f459a24a07bc127fbcba5b4",
        "a886e3e97ecedb808dbcd467b76ee4d1",
    ]
    assert chain_keys("fp", TOKENS, B, extra_keys=("img-1",)) == [
        "2128a5dbd0e75f11712e850499622bb1",
        "b090767f49a948d9b5ad1349a53b875b",
    ]


def test_chain_links_parent_to_child() -> None:
    k0, k1 = chain_keys("fp", TOKENS, B)
    assert k0 == block_key("fp", None, [0, 1, 2, 3])
    assert k1 == block_key("fp", k0, [4, 5, 6, 7])
    assert chain_keys("fp", TOKENS[:8], B) == [k0, k1]  # the partial block gets no key
    assert chain_keys("fp", TOKENS[:3], B) == []


@pytest.mark.parametrize(
    ("fingerprint", "tokens", "extra", "changed"),
    [
        ("fp2", TOKENS, (), [True, True]),  # another model: every key
        ("fp", [9, *TOKENS[1:]], (), [True, True]),  # block 0 changes: its child too
        ("fp", [*TOKENS[:5], 99, *TOKENS[6:]], (), [False, True]),  # only block 1
        ("fp", TOKENS, ("image-hash",), [True, True]),  # extra keys enter at the root
        ("fp", TOKENS, (b"\x01",), [True, True]),
    ],
)
def test_what_changes_keys(fingerprint, tokens, extra, changed) -> None:
    base = chain_keys("fp", TOKENS, B)
    keys = chain_keys(fingerprint, tokens, B, extra_keys=extra)
    assert [a != b for a, b in zip(base, keys, strict=True)] == changed


def test_lazy_and_stable_across_processes() -> None:
    it = iter_chain_keys("fp", TOKENS, B)
    assert next(it) == chain_keys("fp", TOKENS, B)[0]
    code = (
        "from omlx.cache.chain_hash import chain_keys\nprint(chain_keys('fp', list(range(10)), 4))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(chain_keys("fp", TOKENS, B))


def test_bad_extra_key_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="no stable encoding"):
        chain_keys("fp", TOKENS, B, extra_keys=(object(),))
