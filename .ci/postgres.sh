#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests on Postgres storage, under a temp directory
# on a free local port; nothing outside that directory is touched.
#
#   eval "$(.ci/postgres.sh start)"   # starts it; prints the variables to export
#   .venv/bin/pytest -q tests/test_pipeline.py ...
#   .ci/postgres.sh stop              # stops it and removes the directory ($DEEP_PIPELINE_PG_DIR)
#
# Needs PostgreSQL's server binaries (Debian: apt-get install postgresql). initdb refuses
# to run as root, so as root the server runs as the `postgres` user Debian's package makes.
# Everything but the export lines goes to stderr.
set -euo pipefail

pg_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$dir" ] && command -v pg_ctl >/dev/null 2>&1; then dir=$(dirname "$(command -v pg_ctl)"); fi
  [ -x "$dir/initdb" ] || { echo "postgres.sh: no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql" >&2; exit 1; }
  echo "$dir"
}

# The server's user: ourselves, or `postgres` when we are root.
as_server() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  local bin port password
  bin=$(pg_bin)
  # Not local: the EXIT trap below runs after this function has returned.
  dir=$(mktemp -d "${TMPDIR:-/tmp}/deep-pipeline-pg.XXXXXX")
  # A start that fails part-way leaves no server and no directory behind.
  trap 'stop "$dir" >/dev/null 2>&1 || true' EXIT
  password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
  printf '%s\n' "$password" > "$dir/pwfile"
  if [ "$(id -u)" = 0 ]; then chown -R postgres: "$dir"; fi
  # A superuser `deep` with a password (scram, as a real server would ask); no fsync: the
  # cluster lives for one test run.
  as_server "$bin/initdb" -D "$dir/data" -U deep --pwfile="$dir/pwfile" --auth=scram-sha-256 -E UTF8 \
    --no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
  rm -f "$dir/pwfile"
  port=$(free_port)
  # Each Dagster instance and run worker opens its own connections: more than the default 100.
  as_server "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" start >&2 \
    || { cat "$dir/server.log" >&2; exit 1; }
  PGPASSWORD=$password "$bin/createdb" -h 127.0.0.1 -p "$port" -U deep deep_pipeline
  trap - EXIT
  echo "postgres.sh: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $dir" >&2
  cat <<EOF
export DEEP_PIPELINE_PG_DIR='$dir'
export DEEP_PIPELINE_STORAGE=postgres
export DAGSTER_PG_USERNAME=deep
export DAGSTER_PG_PASSWORD='$password'
export DAGSTER_PG_HOSTNAME=127.0.0.1
export DAGSTER_PG_PORT=$port
export DAGSTER_PG_DB=deep_pipeline
EOF
}

stop() {
  local dir=${1:-${DEEP_PIPELINE_PG_DIR:-}}
  [ -n "$dir" ] && [ -d "$dir" ] || { echo "postgres.sh stop: no cluster directory (give it, or set DEEP_PIPELINE_PG_DIR)" >&2; exit 2; }
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_server "$(pg_bin)/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  *) echo "usage: $0 start | stop [DIR]" >&2; exit 2 ;;
esac
