"""An in-memory stock list keyed by SKU."""


class Inventory:
    def __init__(self):
        self._items = {}

    def add(self, sku, qty=1):
        if qty < 1:
            raise ValueError(f"quantity must be positive, got {qty}")
        self._items[sku] = self._items.get(sku, 0) + qty

    def remove(self, sku, qty=1):
        have = self._items.get(sku, 0)
        if qty > have:
            raise ValueError(f"cannot remove {qty} of {sku!r}: only {have} in stock")
        if qty == have:
            del self._items[sku]
        else:
            self._items[sku] = have - qty

    def quantity(self, sku):
        return self._items.get(sku, 0)

    def items(self):
        """(sku, quantity) pairs sorted by SKU."""
        return sorted(self._items.items())
