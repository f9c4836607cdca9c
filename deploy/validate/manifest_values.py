"""Values of rendered Kubernetes objects as the checks read, compare and
print them: strictly (True is not 1, "8081" is not 8081), with an empty
mapping or list counting as given, and in messages true and false in lower
case, whole numbers without ".0" and a missing value as "undefined"; and
the quantities and durations in them.
"""
import math
import re


NaN = math.nan


def get(obj, *keys):
    """obj[k0][k1]..., or None where a level is missing or not a mapping
    (a list takes an int key)."""
    for key in keys:
        if isinstance(obj, dict):
            obj = obj.get(key)
        elif isinstance(obj, list) and isinstance(key, int) and 0 <= key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


def truthy(value):
    """Whether a field counts as given: {} and [] do; None, false, 0, "" and
    NaN do not."""
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)):
        return value == value and value != 0
    if isinstance(value, str):
        return value != ""
    return True


def same(a, b):
    """Strict equality: True is not 1, a string never a number, None only
    None; a mapping or list is only itself."""
    if a is None or b is None:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is b


def text(value):
    """A value as a message prints it: true, 20 (a whole float too), NaN,
    "undefined" for a missing one, a list comma-separated."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, list):
        return ",".join("" if v is None else text(v) for v in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


_kNumber = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def number(value):
    """A flag's text as a number: decimal with an optional exponent, 0x, 0o
    or 0b, Infinity; "" is 0; NaN if it is none of these."""
    if value is None:
        return NaN
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, (int, float)):
        return value
    s = text(value).strip()
    if s == "":
        return 0
    if _kNumber.fullmatch(s):
        f = float(s)
        return int(f) if f.is_integer() and abs(f) < 2**53 else f
    for prefix, base in (("0x", 16), ("0o", 8), ("0b", 2)):
        if s[:2].lower() == prefix:
            try:
                return int(s[2:], base)
            except ValueError:
                return NaN
    if re.fullmatch(r"[+-]?Infinity", s):
        return -math.inf if s.startswith("-") else math.inf
    return NaN


def is_nan(value):
    return isinstance(value, float) and value != value


def describe(obj):
    kind = get(obj, "kind")
    name = get(obj, "metadata", "name")
    return f"{'?' if kind is None else text(kind)}/{'?' if name is None else text(name)}"


# --- quantities and durations ----------------------------------------------

kSuffix = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
           "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "": 1}


def bytes_of(quantity):
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T|)", text(quantity))
    return number(m.group(1)) * kSuffix[m.group(2)] if m else NaN


def seconds_of(duration):
    """Seconds in an absl duration ("20s", "1m30s", "500ms")."""
    unit = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    total = 0
    rest = duration
    while rest:
        m = re.match(r"([0-9.]+)(h|ms|m|s|us|ns)", rest)
        if not m:
            return NaN
        total += number(m.group(1)) * unit[m.group(2)]
        rest = rest[m.end():]
    return total if duration else NaN
