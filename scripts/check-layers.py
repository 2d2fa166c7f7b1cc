#!/usr/bin/env python3
"""Checks the include graph of the product against the layers of
docs/design.md ("Parts and their arrows"): a part may include only itself
and the parts below it. Prints every forbidden #include (file:line, the
arrow) and exits 1 if there is one; 0 and a one-line summary otherwise.

    scripts/check-layers.py [REPO_ROOT]
"""
import os
import re
import sys

# Part -> the parts it may include (besides itself). Each part is one
# top-level folder; the set is closed downwards (a part may include what its
# allowed parts may), so the graph is acyclic by construction.
BELOW = {
    "common": [],
    "m2m": ["common"],
    "cluster": ["m2m"],
    "nodefs": ["common"],
    "watch": ["common"],
    "files": ["nodefs", "m2m"],
    "vd": ["nodefs", "cluster"],
    "dirops": ["vd"],
    "vfs": ["vd"],
    "fuse": ["vfs"],
    "node": ["files", "dirops", "vfs", "watch"],
    "fedfsd": ["fuse", "node"],
    "tools": ["fedfsd"],
    "bench": ["node"],
}


def closure(part, seen=None):
    seen = set() if seen is None else seen
    for p in BELOW[part]:
        if p not in seen:
            seen.add(p)
            closure(p, seen)
    return seen


ALLOWED = {part: closure(part) for part in BELOW}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')


def main() -> int:
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    bad, files = [], 0
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
        print(f"forbidden include: {b}")
    if bad:
        print(f"check-layers: {len(bad)} forbidden include(s) in {files} files")
        return 1
    print(f"check-layers: {files} files, no include against the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
