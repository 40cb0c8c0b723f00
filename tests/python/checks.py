"""What the client check scripts share: run the named checks (all when none is named) against one
client, each failure reported with its traceback while the others still run, and print one JSON
object {"passed": {check: result}, "failed": {check: error}} for the Rust test to read.

Usage of a script built on it: SCRIPT BASE_URL MODEL API_KEY [CHECK ...]
"""

import json
import sys
import traceback


def run(checks, connect):
    """Runs `checks` with the client `connect(base_url, api_key)` makes; exits 1 if any failed."""
    base_url, model, api_key = sys.argv[1:4]
    wanted = set(sys.argv[4:])
    unknown = wanted - {c.__name__ for c in checks}
    if unknown:
        sys.exit(f"unknown checks: {sorted(unknown)}")
    client = connect(base_url, api_key)
    out = {"passed": {}, "failed": {}}
    for check in checks:
        if wanted and check.__name__ not in wanted:
            continue
        try:
            out["passed"][check.__name__] = check(client, model)
        except Exception as e:  # noqa: BLE001 - every failure is reported, and the others still run
            out["failed"][check.__name__] = f"{type(e).__name__}: {e}"
            print(traceback.format_exc(), file=sys.stderr)
    print(json.dumps(out, default=str))
    sys.exit(1 if out["failed"] else 0)
