from textutils import slugify


def test_lowercases():
    assert slugify("Hello") == "hello"


def test_joins_words_with_dash():
    assert slugify("release notes") == "release-notes"


def test_keeps_digits():
    assert slugify("Top 10") == "top-10"
