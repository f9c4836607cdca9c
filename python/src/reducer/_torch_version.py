"""Which torch the backend supports, checked before reducer.torch imports
torch.distributed.

The backend is a Python subclass of c10d's Backend (reducer._torch_backend),
which torch can dispatch to from 2.15 on (earlier releases bind Backend
without the trampoline that forwards collectives to Python). 2.15 is also
the newest release it is tested against: a newer 2.x is let through with a
warning naming the tested range, a torch older than 2.15 (Debian 12's 1.13
among them) or of another major version is refused.
"""

import re
import warnings

# (major, minor): the oldest torch the backend runs on, the newest tested.
OLDEST_SUPPORTED = (2, 15)
NEWEST_TESTED = (2, 15)


def _name(version):
    return f"{version[0]}.{version[1]}"


SUPPORTED_RANGE = f"torch {_name(OLDEST_SUPPORTED)} to {_name(NEWEST_TESTED)}"


def parse_version(text):
    """(major, minor) of a torch version string ("2.15.0+cu132" -> (2, 15));
    None when it does not start with two numbers."""
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_torch_version(version=None):
    """Raises ImportError naming the supported range when `version` (default:
    the installed torch's) is older than OLDEST_SUPPORTED or not 2.x; warns
    when it is newer than NEWEST_TESTED."""
    if version is None:
        import torch
        version = torch.__version__
    parsed = parse_version(version)
    if parsed is None or parsed < OLDEST_SUPPORTED or parsed[0] != OLDEST_SUPPORTED[0]:
        raise ImportError(
            f"reducer.torch supports {SUPPORTED_RANGE}; this is torch {version}. "
            "Install a supported torch (pip install 'torch==2.15.*') in the "
            "environment that runs reducer.torch")
    if parsed > NEWEST_TESTED:
        warnings.warn(f"reducer.torch is tested with {SUPPORTED_RANGE}; this is "
                      f"torch {version}", RuntimeWarning, stacklevel=3)
