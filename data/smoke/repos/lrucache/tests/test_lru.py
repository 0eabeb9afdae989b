import pytest

from lrucache import LRUCache


def test_put_and_get():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("missing", 0) == 0


def test_evicts_oldest_write():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert "a" not in cache
    assert len(cache) == 2


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        LRUCache(0)
