#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""libremora exports exactly the functions that include/remora/ declares with REMORA_API.

An exported symbol missing from the headers is an internal function that leaked (it would
become part of the ABI by accident); a declared one missing from the library is an API that
does not link. Every export carries the version node of libremora.map.
Usage: exports.py LIBREMORA_SO INCLUDE_DIR
"""
import re
import subprocess
import sys
from pathlib import Path

DECL = re.compile(r"REMORA_API\b[^;{]*?\b(remora_\w+)\s*\(", re.S)


def declared(include_dir):
    names = set()
    for h in sorted(Path(include_dir).glob("*.h")):
        names |= set(DECL.findall(h.read_text()))
    return names


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", "--with-symbol-versions", lib],
                         check=True, capture_output=True, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWwDdBbRr":
            name, _, version = parts[2].partition("@")
            syms[name] = version.lstrip("@")
    return syms


def main():
    lib, include_dir = sys.argv[1], sys.argv[2]
    decl, syms = declared(include_dir), exported(lib)
    names = {n for n in syms if n not in ("REMORA_0.1",)}
    leaked = sorted(names - decl)
    missing = sorted(decl - names)
    unversioned = sorted(n for n in names if syms[n] != "REMORA_0.1")
    for n in leaked:
        print(f"exported but not declared with REMORA_API in include/remora/: {n}")
    for n in missing:
        print(f"declared with REMORA_API but not exported: {n}")
    for n in unversioned:
        print(f"exported without the REMORA_0.1 version: {n} ({syms[n] or 'none'})")
    print(f"{len(names)} exported, {len(decl)} declared")
    bad = len(leaked) + len(missing) + len(unversioned)
    print(f"{1 if bad == 0 else 0} passed, {1 if bad else 0} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
