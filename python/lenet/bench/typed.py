"""Dataclasses to and from JSON, and the JSON schema they imply: what makes `results.py` the one
definition of the benchmark's files.

Supported field types: str, int, float, bool, Literal[...], X | None, list[X], dict[str, X],
bare dict/list (free-form JSON) and nested dataclasses. A field's `metadata` adds JSON-schema
keywords to its value (e.g. {"minimum": 0}); a class's `__schema_extra__` adds keywords to its
own schema (e.g. "allOf").
"""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Literal, Union

_PLAIN = {str: "string", int: "integer", float: "number", bool: "boolean"}


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _optional(tp) -> tuple[bool, Any]:
    """(True, X) for X | None, else (False, tp)."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def to_json(value):
    """A dataclass (or anything holding them) as plain JSON values; every field is written."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    return value


def from_json(tp, value, where: str = "$"):
    """`value` (parsed JSON) as type `tp`; ValueError naming the place (`where`) of the first mismatch."""
    optional, tp = _optional(tp)
    if tp is Any:
        return value
    if value is None:
        if optional:
            return None
        raise ValueError(f"{where}: null where {_name(tp)} is expected")
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: {type(value).__name__} where an object ({tp.__name__}) is expected")
        value = getattr(tp, "upgrade", lambda d: d)(dict(value))
        hints, names = _hints(tp), {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ValueError(f"{where}: unknown field {unknown[0]!r} in {tp.__name__}")
        missing = [f.name for f in dataclasses.fields(tp) if f.name not in value
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"{where}: {tp.__name__} lacks {missing[0]!r}")
        return tp(**{k: from_json(hints[k], v, f"{where}.{k}") for k, v in value.items()})
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ValueError(f"{where}: {value!r} is not one of {', '.join(map(repr, typing.get_args(tp)))}")
        return value
    if origin is list or tp is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: {type(value).__name__} where a list is expected")
        (item,) = typing.get_args(tp) or (Any,)
        return [from_json(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: {type(value).__name__} where an object is expected")
        _, item = typing.get_args(tp) or (str, Any)
        return {k: from_json(item, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not tp:
        raise ValueError(f"{where}: {type(value).__name__} {value!r} where {_name(tp)} is expected")
    return value


def _name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


def schema(root) -> dict:
    """The JSON schema (draft 2020-12) of dataclass `root`, each nested dataclass in $defs."""
    defs: dict = {}
    top = _schema(root, defs)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **top, "$defs": dict(sorted(defs.items()))}


def _schema(tp, defs: dict, extra: dict | None = None) -> dict:
    optional, tp = _optional(tp)
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if tp.__name__ not in defs:
            defs[tp.__name__] = {}                 # recursion guard
            hints = _hints(tp)
            defs[tp.__name__] = {
                "type": "object", "description": " ".join((tp.__doc__ or "").split("\n\n")[0].split()),
                "required": [f.name for f in dataclasses.fields(tp)],
                "properties": {f.name: _schema(hints[f.name], defs, dict(f.metadata)) for f in dataclasses.fields(tp)},
                "additionalProperties": False, **getattr(tp, "__schema_extra__", {})}
        out = {"$ref": f"#/$defs/{tp.__name__}"}
    elif origin is Literal:
        out = {"enum": list(typing.get_args(tp))}
    elif origin is list or tp is list:
        (item,) = typing.get_args(tp) or (Any,)
        out = {"type": "array"} if item is Any else {"type": "array", "items": _schema(item, defs)}
    elif origin is dict or tp is dict:
        _, item = typing.get_args(tp) or (str, Any)
        out = {"type": "object"} if item is Any else {"type": "object", "additionalProperties": _schema(item, defs)}
    elif tp is Any:
        out = {}
    else:
        out = {"type": _PLAIN[tp]}
    extra = dict(extra or {})
    description = extra.pop("description", None)
    out.update(extra)
    if optional:
        out = {"anyOf": [{"type": "null"}, out]}
    if description:
        out["description"] = description
    return out
