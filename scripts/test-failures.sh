#!/usr/bin/env bash
# Prints, for each test that failed in the last `meson test` of a build directory, its name and
# the lines that say why: criterion's assertion and log lines ("[----]") and the output's tail.
# CI calls it after a failed suite, so the reason is at the end of a long verbose log, which is
# the part that gets read.
set -euo pipefail
build=${1:-build}
log="$build/meson-logs/testlog.json"
[ -f "$log" ] || { echo "test-failures: no $log" >&2; exit 2; }
python3 - "$log" <<'EOF'
import json, sys

for line in open(sys.argv[1]):
    t = json.loads(line)
    if t["result"] in ("OK", "SKIP", "EXPECTEDFAIL"):
        continue
    out = (t.get("stdout") or "") + (t.get("stderr") or "")
    lines = out.splitlines()
    why = [l for l in lines if "[----]" in l or "[FAIL]" in l][:80]
    print(f"=== {t['name']}: {t['result']} after {t['duration']:.1f} s")
    print("\n".join(l[:600] for l in why))
    print("--- last lines")
    print("\n".join(l[:600] for l in lines[-40:]))
EOF
