"""An outbox relay on Kafka in one file (psycopg2 + confluent-kafka, that is
librdkafka): each unpublished row of events_outbox is handed to the
producer (key: the event key, value: the data) and marked published in the
transaction that locked it, without waiting for its delivery report. The
record then sits in librdkafka's queue for LINGER_MS before it is sent: a
row marked published is not on the broker yet. Nothing is lost, but a
verdict read in that window would call the event lost.

Env: DATABASE_URL, BROKERS (host:port[,host:port]), TOPIC, LINGER_MS
(default 100).
"""
import os
import sys
import time

import psycopg2
from confluent_kafka import Producer


def delivered(err, msg):
    if err is not None:
        print(f"delivery of {msg.key()} failed: {err}", flush=True)
    else:
        print(f"delivered {msg.key().decode()} at {msg.partition()}/{msg.offset()}", flush=True)


def main():
    topic = os.environ["TOPIC"]
    db = psycopg2.connect(os.environ["DATABASE_URL"])
    producer = Producer({"bootstrap.servers": os.environ["BROKERS"], "linger.ms": int(os.environ.get("LINGER_MS", "100")),
                         "acks": "all", "enable.idempotence": False})
    print("python kafka relay ready", flush=True)
    while True:
        with db:
            with db.cursor() as cur:
                cur.execute("SELECT seq, event_key, data::text FROM events_outbox"
                            " WHERE NOT published ORDER BY seq LIMIT 50 FOR UPDATE SKIP LOCKED")
                rows = cur.fetchall()
                for seq, key, data in rows:
                    producer.produce(topic, key=key, value=data, on_delivery=delivered)
                    cur.execute("UPDATE events_outbox SET published = true WHERE seq = %s", (seq,))
                    print(f"handed {key} to the producer and marked it", flush=True)
        producer.poll(0)  # serve delivery reports
        if not rows:
            time.sleep(0.025)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
