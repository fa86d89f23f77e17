#!/bin/sh
# A fake agent that closes its output and goes on working: it must not be killed early.
exec >/dev/null 2>&1
sleep 1
touch "$1"
