"""PoolPolicy: budget parsing, exact LRU eviction order, pins, busy models, TTL."""

from __future__ import annotations

import subprocess
import sys

import pytest

from omlx.errors import InvalidRequest, ModelTooLarge, Overloaded
from omlx.pool.policy import PoolPolicy, parse_memory_budget

GB = 1000**3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8GB", 8 * GB),
        ("8 gb", 8 * GB),
        ("512MiB", 512 * 1024**2),
        ("1.5G", int(1.5 * GB)),
        ("1073741824", 1073741824),
        ("0.75", 75 * GB),
        ("50%", 50 * GB),
        ("1", 100 * GB),
        ("", 75 * GB),
    ],
)
def test_parse_memory_budget(text: str, expected: int) -> None:
    assert parse_memory_budget(text, total_bytes=100 * GB) == expected


@pytest.mark.parametrize("text", ["lots", "8XB", "-1", "0", "150%"])
def test_parse_memory_budget_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="bad memory budget"):
        parse_memory_budget(text, total_bytes=100 * GB)


def loaded(policy: PoolPolicy, name: str, size: int, now: float) -> None:
    policy.add(name, size, now)
    policy.loaded(name, None, now)


def test_lru_eviction_order_exact() -> None:
    policy = PoolPolicy(10 * GB)
    loaded(policy, "a", 3 * GB, now=1)
    loaded(policy, "b", 3 * GB, now=2)
    loaded(policy, "c", 3 * GB, now=3)
    policy.begin("a", now=4)  # a becomes most recently used
    policy.end("a", now=5)
    assert policy.lru_order() == ["b", "c", "a"]
    assert policy.plan_load("d", 1 * GB) == []  # 9 GB used, 1 free
    assert policy.plan_load("d", 2 * GB) == ["b"]
    assert policy.plan_load("d", 5 * GB) == ["b", "c"]
    assert policy.plan_load("d", 10 * GB) == ["b", "c", "a"]


def test_budget_that_fits_one_of_two() -> None:
    policy = PoolPolicy(5 * GB)
    assert policy.plan_load("a", 4 * GB) == []
    loaded(policy, "a", 4 * GB, now=1)
    assert policy.plan_load("b", 4 * GB) == ["a"]


def test_pinned_survives_pressure() -> None:
    policy = PoolPolicy(10 * GB, pinned=["a"])
    loaded(policy, "a", 4 * GB, now=1)
    loaded(policy, "b", 4 * GB, now=2)
    assert policy.plan_load("c", 5 * GB) == ["b"]
    with pytest.raises(Overloaded, match=r"'c'.*a 4.00 GB pinned"):
        policy.plan_load("c", 7 * GB)
    policy.unpin("a")
    assert policy.plan_load("c", 7 * GB) == ["a", "b"]


def test_busy_and_loading_models_are_not_evicted() -> None:
    policy = PoolPolicy(10 * GB)
    loaded(policy, "a", 4 * GB, now=1)
    policy.add("b", 4 * GB, now=2)  # still loading
    policy.begin("a", now=3)
    with pytest.raises(Overloaded, match="busy"):
        policy.plan_load("c", 4 * GB)
    policy.end("a", now=4)
    assert policy.plan_load("c", 4 * GB) == ["a"]


def test_model_larger_than_budget_is_invalid_request() -> None:
    policy = PoolPolicy(2 * GB)
    with pytest.raises(ModelTooLarge, match=r"needs about 3.00 GB.*budget is 2.00 GB") as info:
        policy.plan_load("big", 3 * GB)
    assert isinstance(info.value, InvalidRequest)


def test_measured_size_replaces_estimate() -> None:
    policy = PoolPolicy(10 * GB)
    policy.add("a", 4 * GB, now=1)
    assert policy.used_bytes == 4 * GB
    policy.loaded("a", 6 * GB, now=2)
    assert policy.used_bytes == 6 * GB
    policy.remove("a")
    assert policy.used_bytes == 0


def test_ttl_expiry_and_override() -> None:
    policy = PoolPolicy(10 * GB, default_ttl_s=10, ttl_overrides={"slow": 100}, pinned=["p"])
    loaded(policy, "a", GB, now=0)
    loaded(policy, "slow", GB, now=0)
    loaded(policy, "p", GB, now=0)
    assert policy.expired(now=9) == []
    assert policy.ttl_left_s("a", now=4) == 6
    assert policy.expired(now=10) == ["a"]
    assert policy.ttl_left_s("p", now=10) is None
    policy.begin("a", now=11)
    assert policy.expired(now=50) == []  # in flight
    policy.end("a", now=50)
    assert policy.expired(now=59) == []
    assert policy.expired(now=60) == ["a"]
    assert policy.expired(now=100) == ["slow", "a"]  # least recently used first


def test_no_ttl_never_expires() -> None:
    policy = PoolPolicy(10 * GB)
    loaded(policy, "a", GB, now=0)
    assert policy.expired(now=1e9) == []
    assert policy.ttl_left_s("a", now=5) is None


def test_imports_without_mlx() -> None:
    code = (
        "import sys; sys.modules['mlx'] = None; sys.modules['mlx.core'] = None\n"
        "import omlx.pool.policy, omlx.pool.memory_budget\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_set_ttl_changes_loaded_models_at_once() -> None:
    policy = PoolPolicy(10 * GB, default_ttl_s=60)
    loaded(policy, "a", GB, 0.0)
    loaded(policy, "b", GB, 0.0)
    policy.set_ttl("a", 10)  # one model's own TTL
    assert policy.expired(11.0) == ["a"]
    policy.set_ttl(None, 5)  # the default, for every model without its own
    assert policy.expired(6.0) == ["b"]
    assert policy.ttl_left_s("a", 6.0) == pytest.approx(4.0)
    policy.set_ttl("a", None)  # back to the default
    assert policy.expired(6.0) == ["a", "b"]
    policy.set_ttl(None, 0)  # never
    assert policy.expired(1e9) == []
