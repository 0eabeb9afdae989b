"""The config schema (schemas/config.schema.yaml) and the documented defaults
(docs/config-reference.md, docs/harness-options.md) are generated from the config's models and
the option models: the committed files are what they give (python -m sandbatch.ops.reference
rewrites them)."""

from sandbatch.harness import HARNESSES, get_harness
from sandbatch.ops.reference import harness_options_page, main


def test_the_committed_page_and_schema_are_what_the_models_generate():
    assert main(["--check"]) == 0, "run python -m sandbatch.ops.reference"


def test_every_key_of_the_schema_is_in_the_reference_with_its_default():
    import json

    from sandbatch.core.config import load_schema
    from sandbatch.ops.reference import config_schema, config_reference_page

    page = config_reference_page(config_schema())

    def walk(block, prefix):
        for key, node in block["properties"].items():
            if "properties" in node:
                walk(node, f"{prefix}{key}.")
            elif key in block.get("required", ()):
                assert f"| `{prefix}{key}` | (required) |" in page
            elif len(json.dumps(node["default"])) <= 60:
                assert f"| `{prefix}{key}` | `{json.dumps(node['default'])}` |" in page

    walk(load_schema(), "")


def test_a_provider_block_of_the_schema_is_its_options_model():
    """The schema fills a provider's defaults (what the provider reads) from its model."""
    from sandbatch.core.config import parse
    from sandbatch.sandbox import PROVIDERS, provider_class

    for name in PROVIDERS:
        model = provider_class(name).options_model
        assert parse({}).sandbox.options(name) == model().model_dump(mode="json")
        for key, field in model.model_fields.items():
            assert field.description, f"sandbox.{name}.{key} has no description"


def test_every_option_of_every_harness_is_documented_with_its_default():
    page = harness_options_page()
    for name in HARNESSES:
        options = get_harness(name).options
        for key, field in options.model_fields.items():
            assert field.description, f"{name}: harness.config.{key} has no description"
            assert f"| `{key}` |" in page
