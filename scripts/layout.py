#!/usr/bin/env python3
"""Prints the product's layout: per top-level folder (one part), its files and
lines of C++ (.h, .cc), and its share of all product lines; then the largest
files. Product = everything but tests/, bench/ and third-party code.

    scripts/layout.py [GIT_REV]     (default: the work tree)
"""
import os
import subprocess
import sys

EXCLUDE = ("tests/", "bench/", "build")


def files_at(rev):
    if rev is None:
        out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout
        for path in out.split():
            if os.path.exists(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    yield path, f.read().count("\n")
        return
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev],
                         capture_output=True, text=True, check=True).stdout
    for path in out.split():
        if path.endswith((".h", ".cc")) and not path.startswith(EXCLUDE):
            blob = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True,
                                  check=True).stdout
            yield path, blob.count(b"\n")


def main() -> int:
    rev = sys.argv[1] if len(sys.argv) > 1 else None
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    per, files = {}, []
    for path, n in files_at(rev):
        if not path.endswith((".h", ".cc")) or path.startswith(EXCLUDE):
            continue
        folder = path.split("/")[0] if "/" in path else "."
        f, l = per.get(folder, (0, 0))
        per[folder] = (f + 1, l + n)
        files.append((n, path))
    total = sum(l for _, l in per.values())
    print(f"{'folder':<12} {'files':>5} {'lines':>7} {'share':>6}")
    for folder, (f, l) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{folder + '/':<12} {f:>5} {l:>7} {100.0 * l / total:>5.1f}%")
    print(f"{'total':<12} {sum(f for f, _ in per.values()):>5} {total:>7}")
    print("largest files:")
    for n, path in sorted(files, reverse=True)[:5]:
        print(f"  {n:>5} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
