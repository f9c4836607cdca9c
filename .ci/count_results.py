"""Counts test cases in the Bazel test.xml files under a folder.

Prints one line "N passed, M failed" (skipped cases count as neither). A test target whose XML has no test
case (a crash before the first test, a timeout) counts as one failure, and so
does each marker file named *_failed or *_dep (a failed build or check).
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def count(root: pathlib.Path) -> tuple[int, int]:
    passed = failed = 0
    for xml_path in root.rglob("test.xml"):
        try:
            tree = ET.parse(xml_path)
        except ET.ParseError:
            failed += 1
            continue
        cases = list(tree.iter("testcase"))
        if not cases:
            failed += 1
            continue
        for case in cases:
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is None and case.get("result") != "skipped":
                passed += 1
    failed += sum(1 for p in root.iterdir() if p.is_file())
    return passed, failed


if __name__ == "__main__":
    p, f = count(pathlib.Path(sys.argv[1]))
    print(f"{p} passed, {f} failed")
