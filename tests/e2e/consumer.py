"""A trainer stand-in for the end-to-end tests: leases and acks tasks, logging every event as JSONL.

    python -m tests.e2e.consumer URL TOKEN LOG --seconds 120
"""

from __future__ import annotations

import argparse
import json
import time

import httpx

from propel_sdk.client import PropelClient, PropelClientError


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("token")
    ap.add_argument("log")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--lease-s", type=float, default=30)
    args = ap.parse_args()
    deadline = time.monotonic() + args.seconds
    with open(args.log, "a", buffering=1) as log, PropelClient(args.url, token=args.token, timeout_s=10) as client:
        while time.monotonic() < deadline:
            try:
                tasks = client.lease(4, args.lease_s, "e2e-consumer")
            except (PropelClientError, httpx.HTTPError) as err:  # daemon restarting: its API is down a while
                log.write(json.dumps({"event": "error", "error": str(err)[:200], "t": time.time()}) + "\n")
                time.sleep(0.5)
                continue
            for t in tasks:
                log.write(json.dumps({"event": "lease", "id": t.id, "token": t.lease_token,
                                      "until": t.lease_until, "t": time.time()}) + "\n")
                try:
                    status = client.ack(t, solved=t.id % 9, n=8, solver="e2e-trainer")
                except (PropelClientError, httpx.HTTPError) as err:
                    status = f"error: {str(err)[:100]}"
                log.write(json.dumps({"event": "ack", "id": t.id, "status": status, "t": time.time()}) + "\n")
            if not tasks:
                time.sleep(0.3)


if __name__ == "__main__":
    main()
