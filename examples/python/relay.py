"""An outbox relay in one file (psycopg2 + redis-py): publish each unpublished
row of events_outbox with XADD, then mark it published, in the transaction
that locked it. A crash between the two publishes it again on restart.

Env: DATABASE_URL, REDIS_URL, STREAM. BUG=cursor plants the watermill#311
mistake: the relay remembers the last seq it published and reads only
rows past it (WHERE seq > cursor), so a row whose transaction commits after
a higher seq was published is never published.
"""
import os
import sys
import time

import psycopg2
import redis


BUG = os.environ.get("BUG", "")
if BUG not in ("", "cursor"):
    BUG = ""  # a mistake of another service: this relay is correct


def main():
    stream = os.environ["STREAM"]
    db = psycopg2.connect(os.environ["DATABASE_URL"])
    r = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
    print(f"python relay ready (bug '{BUG}')", flush=True)
    last = 0  # BUG=cursor: the highest seq published, in memory
    while True:
        with db:  # one transaction: commit on success, rollback on error
            with db.cursor() as cur:
                if BUG == "cursor":
                    cur.execute(
                        "SELECT seq, event_key, data::text FROM events_outbox"
                        " WHERE NOT published AND seq > %s ORDER BY seq LIMIT 50", (last,))
                else:
                    cur.execute(
                        "SELECT seq, event_key, data::text FROM events_outbox"
                        " WHERE NOT published ORDER BY seq LIMIT 50 FOR UPDATE SKIP LOCKED")
                rows = cur.fetchall()
                for seq, key, data in rows:
                    entry = r.xadd(stream, {"id": key, "data": data})
                    cur.execute("UPDATE events_outbox SET published = true WHERE seq = %s", (seq,))
                    last = max(last, seq)
                    print(f"published {key} as {entry}", flush=True)
        if not rows:
            time.sleep(0.025)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
