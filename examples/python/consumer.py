"""An inbox consumer in one file (psycopg2 + redis-py): for each entry, ONE
transaction records the event key in inbox_events and adds the amount to
ledger_totals; the entry is acknowledged only after the COMMIT. A failed
transaction leaves the entry pending; XAUTOCLAIM takes entries idle for a
second back. A known key with the same data is a duplicate (acked, no
effect); with other data an identity conflict, left pending.

An entry delivered DEAD_AFTER (3) times without success is poison: it is
moved to the dead-letter stream STREAM:dead (its event id, data and the
reason) and acked. A database connection that broke is opened again; an
error from Redis is retried.

Env: DATABASE_URL, REDIS_URL, STREAM, GROUP. BUG picks one known mistake:
  no-retry        a failed transaction is neither retried nor claimed; it reads on
  ack-first       XACK before the transaction
  no-reconnect    a broken database connection is kept: every retry fails
                  ("connection already closed") for ever
  dead-thread     the reading loop runs in a worker thread that an error from
                  Redis ends; the process stays up and reads nothing again
  no-dead-letter  a poison entry is retried for ever, never moved aside
"""
import json
import os
import sys
import threading
import time

import psycopg2
import redis

BUG = os.environ.get("BUG", "")
if BUG not in ("", "no-retry", "ack-first", "no-reconnect", "dead-thread", "no-dead-letter"):
    BUG = ""  # a mistake of another service: this consumer is correct
DEAD_AFTER = 3


class Inbox:
    """The consumer's database connection, opened again when it broke."""

    def __init__(self, url):
        self.url = url
        self.db = psycopg2.connect(url)

    def conn(self):
        if self.db.closed and BUG != "no-reconnect":
            print("database connection broken: connecting again", flush=True)
            self.db = psycopg2.connect(self.url)
        return self.db


def dead_letter(r, stream, group, entry_id, fields, reason):
    """Moves a poison entry aside, keeping its event id and data, then acks it."""
    r.xadd(stream + ":dead", {"id": fields.get("id", ""), "data": fields.get("data", ""), "reason": reason})
    r.xack(stream, group, entry_id)
    print(f"dead-lettered {entry_id} ({fields.get('id')}): {reason}", flush=True)


def deliveries(r, stream, group, entry_id):
    """How often the group's PEL says the entry was delivered."""
    pend = r.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
    return pend[0]["times_delivered"] if pend else 0


def handle(inbox, r, stream, group, entry_id, fields, how):
    db = inbox.conn()
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
        reason = f"{err.pgcode} {str(err).strip()}"
        if BUG != "no-dead-letter" and err.pgcode and deliveries(r, stream, group, entry_id) >= DEAD_AFTER:
            dead_letter(r, stream, group, entry_id, fields, reason)
            return
        print(f"{how} {entry_id} ({key}): {reason}; left pending", flush=True)
        return
    print(f"{how} {entry_id} ({key}): {outcome}", flush=True)
    if not conflict and BUG != "ack-first":
        r.xack(stream, group, entry_id)


def poll(inbox, r, stream, group, me):
    """One pass: take back what idled a second, then read new entries."""
    if BUG != "no-retry":
        _, claimed, *_ = r.xautoclaim(stream, group, me, min_idle_time=1000, start_id="0-0", count=10)
        for entry_id, fields in claimed:
            if fields:
                handle(inbox, r, stream, group, entry_id, fields, "claimed")
    for _, entries in r.xreadgroup(group, me, {stream: ">"}, count=10, block=250) or []:
        for entry_id, fields in entries:
            handle(inbox, r, stream, group, entry_id, fields, "read")


def work(inbox, r, stream, group, me):
    while True:
        if BUG == "dead-thread":
            poll(inbox, r, stream, group, me)  # an error ends the thread
            continue
        try:
            poll(inbox, r, stream, group, me)
        except redis.RedisError as err:
            print(f"redis: {err}; trying again", flush=True)
            time.sleep(0.1)


def main():
    stream, group = os.environ["STREAM"], os.environ["GROUP"]
    me = f"py-{os.getpid()}"
    inbox = Inbox(os.environ["DATABASE_URL"])
    r = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
    try:
        r.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as err:
        if "BUSYGROUP" not in str(err):
            raise
    print(f"python consumer ready (bug {BUG!r})", flush=True)
    # The work runs in a thread, as a service with a supervisor thread
    # (health checks, metrics) would run it: the process outlives it.
    worker = threading.Thread(target=work, args=(inbox, r, stream, group, me), daemon=True)
    worker.start()
    while True:
        time.sleep(1)
        if not worker.is_alive() and BUG != "dead-thread":
            sys.exit("the worker thread ended")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
