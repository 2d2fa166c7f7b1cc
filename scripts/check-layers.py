#!/usr/bin/env python3
"""Checks the include graph of the product against the layers drawn in
docs/design.md ("Parts and their arrows", read from there): a part may
include only itself and the parts below it. Prints every forbidden #include
(file:line, the arrow), and every cycle or unknown part in the table, and
exits 1 if there is one; 0 and a one-line summary otherwise.

    scripts/check-layers.py [REPO_ROOT]
"""
import os
import re
import sys

# The layers are docs/design.md's ("Parts and their arrows"): the code block
# there lists each part with the parts it includes directly ("b <- a, c"),
# one layer per line. A part may include what its parts may too. A part in
# its own closure (a cycle) fails the check, and so does a table that cannot
# be read.
ARROW = re.compile(r"([a-z0-9_]+)\s+<-\s+([a-z0-9_]+(?:,\s*[a-z0-9_]+)*)")
ALONE = re.compile(r"^layer\s+\d+\s+([a-z0-9_]+)\s*$")


def read_layers(root):
    with open(os.path.join(root, "docs", "design.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"## Parts and their arrows\s*```\n(.*?)```", text, re.S)
    if not m:
        raise SystemExit("check-layers: no layers table in docs/design.md")
    below = {}
    for line in m.group(1).splitlines():
        if not line.startswith("layer"):
            continue
        alone = ALONE.match(line)
        if alone:
            below.setdefault(alone.group(1), [])
        for part, deps in ARROW.findall(line):
            below[part] = [d.strip() for d in deps.split(",")]
    if not below:
        raise SystemExit("check-layers: the layers table in docs/design.md lists no part")
    return below


def closure(below, part, seen=None):
    seen = set() if seen is None else seen
    for p in below.get(part, []):
        if p not in seen:
            seen.add(p)
            closure(below, p, seen)
    return seen


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')


def main() -> int:
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    below = read_layers(root)
    ALLOWED = {part: closure(below, part) for part in below}
    bad, files = [], 0
    for part, deps in below.items():
        for d in deps:
            if d not in below:
                bad.append(f"docs/design.md: {part} <- {d}, a part the table does not list")
    for part, allowed in ALLOWED.items():
        if part in allowed:
            bad.append(f"docs/design.md: the layers have a cycle through {part}")
    for part, allowed in ALLOWED.items():
        top = os.path.join(root, part)
        for dirpath, _, names in os.walk(top):
            for name in names:
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(dirpath, name)
                files += 1
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        if target == part or target in allowed or target not in ALLOWED:
                            continue
                        bad.append(f"{os.path.relpath(path, root)}:{n}: {part} -> {target}")
    for b in bad:
        print(f"check-layers: {b}")
    if bad:
        print(f"check-layers: {len(bad)} problem(s) in {files} files")
        return 1
    print(f"check-layers: {files} files, no include against the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
