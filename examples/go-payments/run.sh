#!/bin/sh
# Runs the payments service: $PAYMENTS_BIN when set (the tests build it
# once), else ./payments, built from this directory the first time (delete
# it to rebuild after a change).
bin=${PAYMENTS_BIN:-./payments}
if [ -z "$PAYMENTS_BIN" ] && [ ! -x "$bin" ]; then
  go build -o "$bin" . || exit 1
fi
exec "$bin" "$@"
