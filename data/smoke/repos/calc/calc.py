"""Small arithmetic helpers used by the report generator."""


def add(a, b):
    return a + b


def subtract(a, b):
    return a - b


def divide(a, b):
    """Divide a by b; raises ZeroDivisionError when b is 0."""
    return a // b
