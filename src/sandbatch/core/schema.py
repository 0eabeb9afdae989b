"""A config model as JSON Schema (schemas/config.schema.yaml is written from the models with it).

The schema's dialect is the one the validator fills defaults from (sandbatch.core.config):
every property inline with its `default` and `description`, a nullable value as a type list
(`[string, "null"]`), a nested model as an object with `default: {}`. Pydantic's own
`model_json_schema` writes `anyOf` and `$ref`s instead, which neither fills defaults here nor
reads as the one-line errors the loader makes of the validator's.

A model that is a member of a collection (a list's items, a mapping's values) gets no defaults:
the validator would fill them into every member the user writes.
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel
from pydantic.fields import FieldInfo

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}
_CONSTRAINTS = {"pattern": "pattern", "ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum",
                "lt": "exclusiveMaximum"}


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _value_schema(tp: Any) -> dict[str, Any]:
    """The schema of an annotation: its type (a list when null is allowed), enum, a list's
    items, a mapping's values; a model as its member block."""
    args = get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)
    nullable = type(None) in args
    out: dict[str, Any] = {}
    names: list[str] = []
    for arg in (a for a in args if a is not type(None)):
        if _is_model(arg):
            member = block(arg, member=True)
            names.append(member.pop("type"))
            out.update(member)
            continue
        if get_origin(arg) is Literal:
            values = list(get_args(arg))
            names.append(_TYPES[type(values[0])])
            out["enum"] = values + ([None] if nullable else [])
            continue
        origin = get_origin(arg) or arg
        names.append(_TYPES[origin])
        inner = get_args(arg)
        if origin is list and inner:
            out["items"] = _value_schema(inner[0])
        if origin is dict and inner and inner[1] is not Any:
            out["additionalProperties"] = _value_schema(inner[1])
    types_ = names + (["null"] if nullable else [])
    return {"type": types_[0] if len(types_) == 1 else types_, **out}


def _field_schema(field: FieldInfo, member: bool) -> dict[str, Any]:
    tp = field.annotation
    if _is_model(tp) and not member:
        return block(tp, field.description or "")
    out = _value_schema(tp)
    members = out.pop("properties", None)  # a nullable model's keys: last, after its default
    for meta in field.metadata:
        for attr, key in _CONSTRAINTS.items():
            if getattr(meta, attr, None) is not None:
                out[key] = getattr(meta, attr)
    out.update(field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {})
    if not member and not field.is_required():
        out["default"] = field.get_default(call_default_factory=True)
    if field.description:
        out["description"] = field.description
    if members is not None:
        out["properties"] = members
    return out


def _extra_schema(model: type[BaseModel]) -> dict[str, Any] | bool:
    """What keys beyond the fields take: nothing, or (a model allowing extras, typed by its
    `__pydantic_extra__: dict[str, T]`) values of T."""
    if model.model_config.get("extra") != "allow":
        return False
    return _value_schema(get_type_hints(model)["__pydantic_extra__"])["additionalProperties"]


def block(model: type[BaseModel], description: str | None = None, member: bool = False) -> dict[str, Any]:
    """The schema block of a model: its keys (and no others, unless it takes extras), each with
    its default; `member`: a collection's member, without defaults or a description of its own."""
    out: dict[str, Any] = {"type": "object", "additionalProperties": _extra_schema(model)}
    required = [name for name, field in model.model_fields.items() if field.is_required()]
    if required:  # before the properties: the validator fills defaults as it reads those
        out["required"] = required
    if not member:
        out["default"] = {}
        out["description"] = description if description is not None else " ".join((model.__doc__ or "").split())
    out["properties"] = {name: _field_schema(field, member) for name, field in model.model_fields.items()}
    return out


def with_enum(prop: dict[str, Any], values: list[Any]) -> dict[str, Any]:
    """A property restricted to `values` (a registry's names), listed after its type."""
    return {"type": prop["type"], "enum": values, **{k: v for k, v in prop.items() if k not in ("type", "enum")}}


def document(model: type[BaseModel]) -> dict[str, Any]:
    """A model as a whole schema document: its title (model_config's) and description (the
    docstring), its blocks."""
    out = block(model)
    del out["default"]
    return {"$schema": DIALECT, "title": model.model_config.get("title"), "description": out.pop("description"), **out}
