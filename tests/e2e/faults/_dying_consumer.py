"""A trainer that leases one task, reports it on stdout, and then hangs until it is killed.

    python -m tests.e2e.faults._dying_consumer URL TOKEN LEASE_S
"""

from __future__ import annotations

import json
import sys
import time

from propel_sdk.client import PropelClient


def main() -> None:
    url, token, lease_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    client = PropelClient(url, token=token)
    got = client.lease(1, lease_s, "doomed")
    print(json.dumps([{"id": t.id, "token": t.lease_token, "attempts": t.attempts} for t in got]), flush=True)
    time.sleep(3600)  # "training" until SIGKILL


if __name__ == "__main__":
    main()
