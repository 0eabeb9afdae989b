"""An options model as a block of the config's JSON Schema (schemas/config.schema.yaml).

The schema's dialect is the one the validator fills defaults from (sandbatch.core.config):
every property inline with its `default` and `description`, a nullable value as a type list
(`[string, "null"]`), a nested model as an object with `default: {}`. Pydantic's own
`model_json_schema` writes `anyOf` and `$ref`s instead, which neither fills defaults here nor
reads as the one-line errors the loader makes of the validator's.
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel
from pydantic.fields import FieldInfo

_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}
_CONSTRAINTS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum",
                "pattern": "pattern"}


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _value_schema(tp: Any) -> dict[str, Any]:
    """type (a list when null is allowed), enum, and a mapping's value schema, of an annotation."""
    args = get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)
    nullable = type(None) in args
    out: dict[str, Any] = {}
    names: list[str] = []
    for arg in (a for a in args if a is not type(None)):
        if get_origin(arg) is Literal:
            values = list(get_args(arg))
            names.append(_TYPES[type(values[0])])
            out["enum"] = values + ([None] if nullable else [])
            continue
        origin = get_origin(arg) or arg
        names.append(_TYPES[origin])
        if origin is dict and get_args(arg) and get_args(arg)[1] is not Any:
            out["additionalProperties"] = {"type": _TYPES[get_args(arg)[1]]}
    types_ = names + (["null"] if nullable else [])
    return {"type": types_[0] if len(types_) == 1 else types_, **out}


def _field_schema(field: FieldInfo) -> dict[str, Any]:
    if _is_model(field.annotation):
        return block(field.annotation, field.description or "")
    out = _value_schema(field.annotation)
    for meta in field.metadata:
        for attr, key in _CONSTRAINTS.items():
            if getattr(meta, attr, None) is not None:
                out[key] = getattr(meta, attr)
    out["default"] = field.get_default(call_default_factory=True)
    out["description"] = field.description
    return out


def _extra_schema(model: type[BaseModel]) -> dict[str, Any] | bool:
    """What keys beyond the fields take: nothing, or (a model allowing extras, typed by its
    `__pydantic_extra__: dict[str, T]`) values of T."""
    if model.model_config.get("extra") != "allow":
        return False
    return _value_schema(get_type_hints(model)["__pydantic_extra__"])["additionalProperties"]


def block(model: type[BaseModel], description: str | None = None) -> dict[str, Any]:
    """The schema block of an options model: its keys (and no others, unless it takes extras),
    each with its default."""
    return {"type": "object", "additionalProperties": _extra_schema(model), "default": {},
            "description": description if description is not None else " ".join((model.__doc__ or "").split()),
            "properties": {name: _field_schema(field) for name, field in model.model_fields.items()}}
