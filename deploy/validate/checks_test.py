"""Tests of checks.py: the rendered overlays pass, and each kind of mistake
made in a copy of them is caught. The one entry point of the tests, which
live in modules by concern:

  checks_tls_tokens_test.py  TLS, job tokens, cert-manager, NetworkPolicy
  checks_workloads_test.py   images, spread, probes, security context,
                             resources, selectors, flags, schemas, parsing
  checks_jobs_test.py        the worker Job and the PyTorch Jobs
  checks_testing.py          what they share: the overlays, accessors

  DEPLOY_RENDERED=DIR python checks_test.py [TEST...]

DIR holds OVERLAY.yaml for each overlay of checks_testing.kOverlays
(`kubectl kustomize` of each), reducerd.help and worker.help (`--helpfull`
of reducerd and metric_sync_worker). Runs with unittest (every test of the
modules above, or the TESTs named as MODULE.CLASS.TEST); ends with
"# pass N" and "# fail N" lines (N tests passed, failed or errored) and
exits 0 when every test passed (and at least one ran).
"""
import sys
import unittest

import checks_jobs_test
import checks_tls_tokens_test
import checks_workloads_test
from checks_testing import kDir

# The modules whose tests run; a TEST named names one of them first.
kTestModules = [checks_tls_tokens_test, checks_workloads_test, checks_jobs_test]


def main():
    if not kDir:
        print("checks_test.py: DEPLOY_RENDERED names the folder of rendered overlays", file=sys.stderr)
        return 2
    # Names resolve in this module, which imports kTestModules.
    result = unittest.main(module=sys.modules[__name__], defaultTest=[m.__name__ for m in kTestModules],
                           argv=[sys.argv[0]] + sys.argv[1:], exit=False, verbosity=2).result
    # A test whose subTests failed has one failure per subTest: count tests.
    failed = {getattr(t, "test_case", t).id() for t, _ in result.failures + result.errors}
    print(f"# pass {max(0, result.testsRun - len(failed) - len(result.skipped))}")
    print(f"# fail {len(failed)}")
    if result.testsRun == 0:
        print("checks_test.py: no test ran", file=sys.stderr)
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
