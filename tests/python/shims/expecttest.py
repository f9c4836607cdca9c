"""Stand-in for the `expecttest` package (PyPI; Debian does not ship it),
which torch.testing._internal.common_utils imports for its TestCase base
class and its ACCEPT flag. torch_suite_test puts this directory on
PYTHONPATH only where the real package is missing. The distributed tests it
runs use no expect-file assertion, so a plain unittest.TestCase serves."""

import unittest

ACCEPT = False  # common_utils sets it from --accept


class TestCase(unittest.TestCase):
    pass
