#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The remora_ prefix belongs to the public API alone.

Every symbol the static library defines under the remora_ prefix (functions and data, global or
file-local) must be declared in include/remora/. An internal function or table named remora_*
would read as API to anyone browsing the code, and would be one visibility attribute away from
becoming ABI. Internal names take their module's prefix (store_, txn_, rt_cost_, ...).
Usage: internal_names.py LIBREMORA_STATIC_A INCLUDE_DIR
"""
import re
import subprocess
import sys
from pathlib import Path


def declared(include_dir):
    names = set()
    for h in sorted(Path(include_dir).glob("*.h")):
        names |= set(re.findall(r"\bremora_\w+\b", h.read_text()))
    return names


def defined(archive):
    out = subprocess.run(["nm", "--defined-only", archive], check=True, capture_output=True,
                         text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].startswith("remora_"):
            names.add(parts[2].split(".")[0])  # "remora_x.part.0" and friends
    return names


def main():
    lib, include_dir = sys.argv[1], sys.argv[2]
    found = defined(lib)
    if not found:
        print("internal_names: the library defines no remora_ symbol; wrong library?")
        return 1
    bad = sorted(found - declared(include_dir))
    for name in bad:
        print(f"internal_names: {name} is not in include/remora: give it its module's prefix")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
