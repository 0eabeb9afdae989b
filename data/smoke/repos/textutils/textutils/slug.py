"""Turn titles into URL slugs."""

import re


def slugify(text):
    """Lowercase `text` and join its words with single dashes.

    >>> slugify("Release Notes")
    'release-notes'
    """
    text = text.lower()
    return re.sub(r"[^a-z0-9]", "-", text)
