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

# Part -> the parts it may include (besides itself), lowest first.
ALLOWED = {
    "common": set(),
    "m2m": {"common"},
    "cluster": {"common", "m2m"},
    "namespace": {"common", "m2m", "cluster"},
    "fuse": {"common", "m2m", "cluster", "namespace"},
    "fedfsd": {"common", "m2m", "cluster", "namespace", "fuse"},
    "tools": {"common", "m2m", "cluster", "fedfsd"},
    "bench": {"common", "m2m", "cluster", "namespace"},
}
# Inside namespace/: sub-part -> the sub-parts it may include. Files directly
# in namespace/ (paths, the cluster view, kernel-cache hooks) are below all of
# them and include none.
NS_ALLOWED = {
    "nodefs": set(),
    "files": {"nodefs"},
    "vd": {"nodefs"},
    "dirops": {"nodefs", "vd"},
    "watch": set(),
    "vfs": {"nodefs", "vd"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')
NS_INCLUDE = re.compile(r'^\s*#\s*include\s+"namespace/([^"/]+)/')


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
                        if part == "namespace":
                            ns = NS_INCLUDE.match(line)
                            rel = os.path.relpath(path, top).split(os.sep)
                            mine = rel[0] if len(rel) > 1 else None
                            if ns and ns.group(1) != mine and (
                                    mine is None or ns.group(1) not in NS_ALLOWED.get(mine, set())):
                                bad.append(f"{os.path.relpath(path, root)}:{n}: namespace/"
                                           f"{mine or '.'} -> namespace/{ns.group(1)}")
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
