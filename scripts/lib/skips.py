#!/usr/bin/env python3
"""Lists the tests ctest skipped (from its JUnit files) with the reason each
gave, and fails when one is not in the expected list.

Usage: skips.py EXPECTED_FILE LABEL JUNIT...

EXPECTED_FILE: one skip per line, "<regex on the ctest name><TAB or 2+
spaces><why>"; '#' starts a comment line. A regex matches the whole name.
"""
import re
import sys
import xml.etree.ElementTree as ET


def load_expected(path):
    expected = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = re.split(r"\t+| {2,}", line.strip(), maxsplit=1)
            if len(parts) != 2:
                sys.exit(f"{path}:{n}: expected '<regex>  <why>'")
            expected.append((re.compile(parts[0]), parts[1]))
    return expected


def skip_reason(out):
    # gtest prints "<file>:<line>: Skipped\n<message>\n" before "[  SKIPPED ]".
    m = re.search(r"^\S+:\d+: Skipped\n(.*?)\n\[  SKIPPED \]", out, re.S | re.M)
    return " ".join(m.group(1).split()) if m else "(no reason printed)"


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    expected = load_expected(sys.argv[1])
    label = sys.argv[2]
    ran = skipped = 0
    unexpected = []
    for junit in sys.argv[3:]:
        for tc in ET.parse(junit).getroot().iter("testcase"):
            ran += 1
            if tc.find("skipped") is None:
                continue
            skipped += 1
            name = tc.get("name", "").split("  #")[0].strip()
            out = tc.findtext("system-out") or ""
            why = skip_reason(out)
            match = next((w for r, w in expected if r.fullmatch(name)), None)
            if match is None:
                unexpected.append(name)
                print(f"  UNEXPECTED skip: {name}: {why}")
            else:
                print(f"  skipped (expected: {match}): {name}")
    print(f"== {label}: {ran} tests, {skipped} skipped, {len(unexpected)} of them unexpected")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
