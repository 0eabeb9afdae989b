import pytest

from inventory.store import Inventory


def test_add_and_quantity():
    inv = Inventory()
    inv.add("A-1", 3)
    inv.add("A-1")
    assert inv.quantity("A-1") == 4
    assert inv.quantity("missing") == 0


def test_remove_drops_empty_items():
    inv = Inventory()
    inv.add("B-2", 2)
    inv.remove("B-2", 2)
    assert inv.items() == []


def test_remove_too_many_raises():
    inv = Inventory()
    inv.add("C-3")
    with pytest.raises(ValueError):
        inv.remove("C-3", 5)
