"""An inbox consumer in one file (psycopg2 + redis-py): for each entry, ONE
transaction records the event key in inbox_events and adds the amount to
ledger_totals; the entry is acknowledged only after the COMMIT. A failed
transaction leaves the entry pending; XAUTOCLAIM takes entries idle for a
second back. A known key with the same data is a duplicate (acked, no
effect); with other data an identity conflict, left pending.

Env: DATABASE_URL, REDIS_URL, STREAM, GROUP. BUG picks one known mistake:
  no-retry   a failed transaction is neither retried nor claimed; it reads on
  ack-first  XACK before the transaction
"""
import json
import os
import sys
import time

import psycopg2
import redis

BUG = os.environ.get("BUG", "")
if BUG not in ("", "no-retry", "ack-first"):
    BUG = ""  # a mistake of another service: this consumer is correct


def handle(db, r, stream, group, entry_id, fields, how):
    key, data = fields.get("id"), fields.get("data")
    try:
        payment = json.loads(data or "")
        amount, currency = int(payment["amount"]), str(payment["currency"])
    except (ValueError, KeyError, TypeError):
        print(f"{how} {entry_id}: not a payment ({fields}); left pending", flush=True)
        return
    if BUG == "ack-first":
        r.xack(stream, group, entry_id)
    conflict = False
    try:
        with db:
            with db.cursor() as cur:
                cur.execute(
                    "INSERT INTO inbox_events (group_name, event_key, data) VALUES (%s, %s, %s::jsonb)"
                    " ON CONFLICT (group_name, event_key) DO NOTHING", (group, key, data))
                if cur.rowcount == 0:
                    cur.execute("SELECT data = %s::jsonb FROM inbox_events WHERE group_name = %s AND event_key = %s",
                                (data, group, key))
                    conflict = not cur.fetchone()[0]
                    outcome = "identity conflict: other data under this key; left pending" if conflict else "duplicate"
                else:
                    cur.execute(
                        "INSERT INTO ledger_totals (group_name, currency, amount, n) VALUES (%s, %s, %s, 1)"
                        " ON CONFLICT (group_name, currency) DO UPDATE"
                        " SET amount = ledger_totals.amount + EXCLUDED.amount, n = ledger_totals.n + 1",
                        (group, currency, amount))
                    outcome = f"applied {amount} {currency}"
                if conflict:
                    db.rollback()
    except psycopg2.Error as err:
        print(f"{how} {entry_id} ({key}): {err.pgcode} {str(err).strip()}; left pending", flush=True)
        return
    print(f"{how} {entry_id} ({key}): {outcome}", flush=True)
    if not conflict and BUG != "ack-first":
        r.xack(stream, group, entry_id)


def main():
    stream, group = os.environ["STREAM"], os.environ["GROUP"]
    me = f"py-{os.getpid()}"
    db = psycopg2.connect(os.environ["DATABASE_URL"])
    r = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
    try:
        r.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as err:
        if "BUSYGROUP" not in str(err):
            raise
    print(f"python consumer ready (bug {BUG!r})", flush=True)
    while True:
        if BUG != "no-retry":
            _, claimed, *_ = r.xautoclaim(stream, group, me, min_idle_time=1000, start_id="0-0", count=10)
            for entry_id, fields in claimed:
                if fields:
                    handle(db, r, stream, group, entry_id, fields, "claimed")
        for _, entries in r.xreadgroup(group, me, {stream: ">"}, count=10, block=250) or []:
            for entry_id, fields in entries:
                handle(db, r, stream, group, entry_id, fields, "read")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
