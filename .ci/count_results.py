"""Counts test cases in the Bazel test.xml files under a folder.

Prints one line "FAILED: ..." per failure (the config, the test target's
path, the case and the start of its message), then, last, one line
"N passed, M failed" (skipped cases count as neither). A test target whose
XML has no test case (a crash before the first test, a timeout) counts as
one failure, and so does each marker file named *_failed or *_dep (a failed
build or check).
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def summary(element) -> str:
    """The failure's first three non-empty lines, joined, at most 300 chars."""
    text = element.get("message") or element.text or ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[:3])[:300]


def count(root: pathlib.Path) -> tuple[int, int, list[str]]:
    passed = failed = 0
    failures = []
    for xml_path in sorted(root.rglob("test.xml")):
        where = str(xml_path.parent.relative_to(root))
        try:
            tree = ET.parse(xml_path)
        except ET.ParseError as e:
            failed += 1
            failures.append(f"{where}: unreadable test.xml ({e})")
            continue
        cases = list(tree.iter("testcase"))
        if not cases:
            failed += 1
            failures.append(f"{where}: no test case ran (crash or timeout)")
            continue
        for case in cases:
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                failed += 1
                failures.append(
                    f"{where}::{case.get('name')}: {summary(problem)}")
            elif case.find("skipped") is None and case.get("result") != "skipped":
                passed += 1
    for marker in sorted(p for p in root.iterdir() if p.is_file()):
        failed += 1
        failures.append(f"{marker.name}: {marker.read_text().strip()[:200]}")
    return passed, failed, failures


if __name__ == "__main__":
    p, f, failures = count(pathlib.Path(sys.argv[1]))
    for failure in failures:
        print(f"FAILED: {failure}")
    print(f"{p} passed, {f} failed")
