"""The type stubs of the `reducer` package's extension modules
(python/src/reducer/_reducer.pyi, _torch_c.pyi) against the modules as built:
every name either defines is in the other, and every function's parameters
(names, order, which have defaults, which are keyword-only) are those of its
pybind11 signature. The package is marked typed (py.typed).
"""

import ast
import importlib
import os

import pytest

import reducer
from module_testing import time_limit  # noqa: F401  (a fixture)

PACKAGE_DIR = os.path.dirname(reducer.__file__)
EXTENSIONS = ["_reducer", "_torch_c"]


def stub_of(module_name):
    path = os.path.join(PACKAGE_DIR, module_name + ".pyi")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return ast.parse(f.read(), path)


def defined_names(body):
    """Name -> node of what a stub body defines (not what it imports)."""
    names = {}
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign):
            names[node.target.id] = node
    return names


def runtime_names(namespace):
    """The names a module or class defines itself, but Python's and
    pybind11's own (a class without a constructor has pybind11's __init__,
    which raises)."""
    own = vars(namespace)
    names = {n for n in own if not (n.startswith("__") and n.endswith("__"))}
    names.discard("_pybind11_conduit_v1_")
    if "__cuda_array_interface__" in own:
        names.add("__cuda_array_interface__")
    if (own.get("__init__").__doc__ or "").startswith("__init__("):
        names.add("__init__")
    return names


def split_top_level(text):
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def pybind_parameters(function):
    """[(name, has_default, keyword_only)] from the first line of a pybind11
    docstring: "name(self: T, x: object, *, group: ... = None) -> R"."""
    first = function.__doc__.splitlines()[0]
    inside = first[first.index("(") + 1:first.rindex(") ->")]
    params, keyword_only = [], False
    for part in split_top_level(inside):
        if part == "*":
            keyword_only = True
            continue
        params.append((part.split(":")[0].strip(), " = " in part, keyword_only))
    return params


def stub_parameters(node):
    args = node.args
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    params = [(a.arg, i >= first_default, False) for i, a in enumerate(positional)]
    params += [(a.arg, d is not None, True) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return params


def compare(namespace, stub_body, where):
    stub = defined_names(stub_body)
    runtime = runtime_names(namespace)
    assert sorted(runtime - set(stub)) == [], f"{where}: in the module, not the stub"
    assert sorted(set(stub) - runtime) == [], f"{where}: in the stub, not the module"
    for name, node in stub.items():
        value = vars(namespace)[name]
        if isinstance(node, ast.ClassDef):
            compare(value, node.body, f"{where}.{name}")
        elif isinstance(node, ast.FunctionDef) and not isinstance(value, property):
            assert stub_parameters(node) == pybind_parameters(value), f"{where}.{name}"


@pytest.mark.parametrize("module_name", EXTENSIONS)
def test_stub_names_and_parameters_are_the_modules(module_name):
    stub = stub_of(module_name)
    try:
        module = importlib.import_module("reducer." + module_name)
    except ImportError:
        assert stub is None, f"{module_name}.pyi is shipped without its extension"
        pytest.skip(f"this package has no reducer.{module_name}")
    assert stub is not None, f"reducer.{module_name} has no {module_name}.pyi"
    compare(module, stub.body, module_name)


def test_package_is_marked_typed():
    assert os.path.isfile(os.path.join(PACKAGE_DIR, "py.typed"))
