#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Library code reads the process environment in one place: runtime/config/env.c.

Every object of the static library that references getenv or secure_getenv is listed; any
object but env.c's is a failure (a variable read behind the parameter table's back, so it
escapes its precedence, its one-line errors and `remora info`). The objects of the tree before
this rule (db.c, transport.c, fault.c, ctl.c, mn.c) are what it catches.
Usage: env_reads.py LIBREMORA_STATIC_A
"""
import subprocess
import sys

READERS = {"getenv", "secure_getenv"}


def readers(archive):
    """Objects of the archive with an undefined reference to an environment reader."""
    out = subprocess.run(["nm", "-A", "-u", archive], check=True, capture_output=True,
                         text=True).stdout
    found = set()
    for line in out.splitlines():
        where, _, rest = line.rpartition(":")
        words = rest.split()
        if words and words[-1].split("@")[0] in READERS:
            found.add(where.rsplit("/", 1)[-1])
    return found


def main():
    found = readers(sys.argv[1])
    if not any(o.endswith("config_env.c.o") for o in found):
        print("env_reads: runtime/config/env.c reads no variable; wrong library?")
        return 1
    bad = sorted(o for o in found if not o.endswith("config_env.c.o"))
    for o in bad:
        print(f"env_reads: {o} reads the environment; ask config/env.h instead")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
