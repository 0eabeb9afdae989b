"""What is generated from the option models, so that it cannot drift from the code
(tests/test_reference.py keeps the committed files equal to what the models give):

- docs/harness-options.md: every key of every harness's `harness.config` (the harness's
  `options` model) with its default and meaning;
- schemas/config.schema.yaml: the run config's models (sandbatch.core.config), with the blocks
  `sandbox.<provider>` (each provider's `options_model`) and the names `harness.name` and
  `sandbox.provider` take (the registries);
- docs/config-reference.md: every key of the run config with its default and meaning, from
  that schema.

    python -m sandbatch.ops.reference           # rewrite them
    python -m sandbatch.ops.reference --check   # exit 1 when one is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Iterator

from pydantic import BaseModel

from .. import REPO_ROOT

PAGE = "docs/harness-options.md"
REFERENCE = "docs/config-reference.md"
SCHEMA = "schemas/config.schema.yaml"
SCHEMA_NOTE = ("# Written by `python -m sandbatch.ops.reference` from the config's models (sandbatch.core.config),\n"
               "# each provider's options model and the registries' names; do not edit by hand: edit those\n"
               "# and run it again (tests/test_reference.py checks).\n")

HEADER = """# Harness options

Every key of `harness.config`, per harness, with its default. Generated from the harnesses'
option models (`options` of each module in `src/sandbatch/harness/`) by
`python -m sandbatch.ops.reference`; do not edit by hand. How each harness uses them:
[harnesses.md](harnesses.md).

`harness.config` is merged over these defaults once, when the run's config is loaded
(mappings key by key, so a block with defaults such as pool's `agent_config` keeps the
default keys it does not set); the run's settings hold the result, which every step reads.
A key that is not listed stops the run before any job starts.
"""


def _default(field: Any) -> str:
    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "see below"
    text = json.dumps(value)
    return f"`{text}`" if len(text) <= 60 else "(long: see the module)"


def _rows(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    nested = []
    for key, field in model.model_fields.items():
        sub = field.annotation
        description = _markdown(field.description or "")
        yield f"| `{prefix}{key}` | {_default(field)} | {description} |"
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            nested.append((key, sub))
    for key, sub in nested:
        yield from _rows(sub, f"{prefix}{key}.")


def harness_options_page() -> str:
    from ..harness import HARNESSES, get_harness

    parts = [HEADER]
    for name in HARNESSES:
        harness = get_harness(name)
        parts.append(f"\n## {name}\n\n| key | default | meaning |\n|---|---|---|\n")
        parts.append("\n".join(_rows(harness.options)) + "\n")
    return "".join(parts)


def _markdown(text: str) -> str:
    """A description as one table cell: one line, `|` escaped, and `<` outside code spans
    escaped (results/<run>/ is no HTML tag)."""
    spans = " ".join(text.split()).replace("|", "\\|").split("`")
    return "`".join(part if i % 2 else part.replace("<", "\\<") for i, part in enumerate(spans))


def _schema_rows(props: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, node in props.items():
        description = _markdown(str(node.get("description", "")))
        if "properties" in node:
            yield f"| `{prefix}{key}` | | {description} |"
            yield from _schema_rows(node["properties"], f"{prefix}{key}.")
            continue
        text = json.dumps(node.get("default"))
        default = ("(required)" if "default" not in node else
                   f"`{text}`" if len(text) <= 60 else "(long: see the schema)")
        yield f"| `{prefix}{key}` | {default} | {description} |"


def config_reference_page(schema_text: str) -> str:
    import yaml

    schema = yaml.safe_load(schema_text)
    parts = ["# Config reference\n\n"
             "Every key of the run config with its default, from `schemas/config.schema.yaml`. Written by\n"
             "`python -m sandbatch.ops.reference`; do not edit by hand. A config file names only what it\n"
             "changes; `harness.config`'s keys depend on the harness: [harness-options.md](harness-options.md).\n"]
    table = "| key | default | meaning |\n|---|---|---|\n"
    top = {k: v for k, v in schema["properties"].items() if "properties" not in v}
    parts.append(f"\n## Top level\n\n{table}" + "\n".join(_schema_rows(top)) + "\n")
    for key, node in schema["properties"].items():
        if key not in top:
            parts.append(f"\n## {key}\n\n{table}" + "\n".join(_schema_rows({key: node})) + "\n")
    return "".join(parts)


def config_schema() -> str:
    """The config schema, made from the config's models (sandbatch.core.config), the providers'
    options models and the registries' names."""
    import yaml

    from ..core.config import Config
    from ..core.schema import block, document, with_enum
    from ..harness import HARNESSES
    from ..sandbox import PROVIDERS, provider_class

    schema = document(Config)
    props = schema["properties"]
    harness = props["harness"]["properties"]
    harness["name"] = with_enum(harness["name"], list(HARNESSES))
    sandbox = props["sandbox"]
    sandbox["additionalProperties"] = False  # the providers' blocks, named below, are all it takes
    sandbox["properties"]["provider"] = with_enum(sandbox["properties"]["provider"], list(PROVIDERS))
    for name in PROVIDERS:
        sandbox["properties"][name] = block(provider_class(name).options_model)
    return SCHEMA_NOTE + yaml.safe_dump(schema, sort_keys=False, width=100, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbatch.ops.reference", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file differs from what the models give")
    args = parser.parse_args(argv)
    stale = 0
    schema = config_schema()
    for name, text in ((PAGE, harness_options_page()), (SCHEMA, schema), (REFERENCE, config_reference_page(schema))):
        path = REPO_ROOT / name
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        if args.check:
            print(f"{name} is out of date; run python -m sandbatch.ops.reference", file=sys.stderr)
            stale = 1
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
