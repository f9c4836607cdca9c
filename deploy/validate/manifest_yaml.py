"""Rendered overlays read as YAML 1.2's core schema does (what kubectl
writes): "yes" and "on" stay strings, 0644 is decimal, no string becomes a
date, and a duplicate key is an error.
"""
import re

import yaml


class _CoreLoader(yaml.SafeLoader):
    """YAML 1.2's core schema: null, true/false, decimal, 0o and 0x
    integers, floats; every other plain scalar is a string."""


_CoreLoader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in [
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", list("~nN") + [""]),
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("tag:yaml.org,2002:int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
    ("tag:yaml.org,2002:float",
     r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
     r"|[-+]?(?:\.inf|\.Inf|\.INF)|\.nan|\.NaN|\.NAN",
     list("-+.0123456789")),
]:
    _CoreLoader.add_implicit_resolver(_tag, re.compile(f"^(?:{_pattern})$"), _first)


def _core_int(loader, node):
    value = loader.construct_scalar(node)
    if value.startswith("0o"):
        return int(value[2:], 8)
    if value.startswith("0x"):
        return int(value[2:], 16)
    return int(value, 10)


def _unique_mapping(loader, node):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r}", key_node.start_mark)
        if isinstance(key, (str, int, float, bool)):
            seen.add(key)
    return loader.construct_yaml_map(node)


_CoreLoader.add_constructor("tag:yaml.org,2002:int", _core_int)
_CoreLoader.add_constructor("tag:yaml.org,2002:map", _unique_mapping)


def load_objects(yaml_text):
    """The non-empty documents of a multi-document YAML text."""
    return [d for d in yaml.load_all(yaml_text, Loader=_CoreLoader) if d is not None]
