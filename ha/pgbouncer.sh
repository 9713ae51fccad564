#!/usr/bin/env bash
# Runs a command with PostgreSQL behind PgBouncer in transaction pooling mode:
#
#   bash ha/pgbouncer.sh cargo test -p idem --test it -- replay::
#
# Starts a private PostgreSQL cluster and a PgBouncer in front of it, both on free loopback
# ports in a temporary directory, runs the command with
#   DATABASE_URL             the server itself (direct: CREATE DATABASE, migrations)
#   IDEM_TESTKIT_POOLER_URL  the same server through PgBouncer (what the tests' pools use)
# and removes everything when the command ends, whatever its outcome. Fails, never skips,
# when PgBouncer or the PostgreSQL server binaries are missing (`.ci/run` installs them).
#
# The PgBouncer settings are the ones README.md's "Behind PgBouncer" section asks for.
set -euo pipefail

die() { printf 'ha/pgbouncer.sh: %s\n' "$*" >&2; exit 1; }
[ "$#" -gt 0 ] || die "usage: bash ha/pgbouncer.sh COMMAND [ARGS..]"

PGBOUNCER=$(command -v pgbouncer || true)
[ -z "$PGBOUNCER" ] && [ -x /usr/sbin/pgbouncer ] && PGBOUNCER=/usr/sbin/pgbouncer
[ -n "$PGBOUNCER" ] || die "pgbouncer not found: install it (Debian: apt-get install pgbouncer)"
PGBIN=""
for dir in /usr/lib/postgresql/*/bin; do
    [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] && PGBIN=$dir
done
[ -n "$PGBIN" ] || die "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin"

# PostgreSQL and PgBouncer both refuse to run as root: as root they run as `postgres`.
as_server() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
# Two free ports, distinct: both are held until both are known, because two separate picks
# of port 0 hand out the same port often enough (idem_testkit::free_port says how often).
free_ports() {
    python3 -c 'import socket
held = [socket.socket() for _ in range(2)]
for s in held: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))'
}

dir=$(mktemp -d /tmp/idem-pgbouncer.XXXXXX)
chmod 755 "$dir"
[ "$(id -u)" = 0 ] && chown postgres: "$dir"
read -r pg_port pgb_port < <(free_ports) || die "no two free ports on 127.0.0.1"
cleanup() {
    set +e
    [ -s "$dir/pgbouncer.pid" ] && kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null
    as_server "$PGBIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1
    rm -rf "$dir"
}
trap cleanup EXIT

as_server "$PGBIN/initdb" -D "$dir/data" --auth=trust -U postgres --no-sync \
    --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
as_server "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $dir -c fsync=off -c max_connections=300" \
    start >/dev/null || { cat "$dir/server.log" >&2; die "PostgreSQL did not start"; }

# Trust authentication still needs the user in auth_file.
printf '"postgres" ""\n' >"$dir/userlist.txt"
cat >"$dir/pgbouncer.ini" <<INI
[databases]
; Every database name is forwarded to the server of the same name (tests create their own).
* = host=127.0.0.1 port=$pg_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $pgb_port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pidfile = $dir/pgbouncer.pid
logfile = $dir/pgbouncer.log
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
max_db_connections = 40
; sqlx names the statements it prepares (sqlx_s_1, ..) per client connection, even with its
; statement cache off; PgBouncer 1.18 does not track them, so two clients sharing a server
; connection would collide. Dropping them when a transaction hands the server back keeps
; each transaction's statements its own.
server_reset_query = DEALLOCATE ALL
server_reset_query_always = 1
; sqlx sends it at startup; PgBouncer does not forward it.
ignore_startup_parameters = extra_float_digits
INI
[ "$(id -u)" = 0 ] && chown postgres: "$dir"/userlist.txt "$dir"/pgbouncer.ini
as_server "$PGBOUNCER" -d "$dir/pgbouncer.ini" || die "pgbouncer did not start"
for _ in $(seq 1 100); do
    "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$pgb_port" -d postgres && break
    sleep 0.1
done
"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$pgb_port" -d postgres \
    || { cat "$dir/pgbouncer.log" >&2; die "pgbouncer does not accept connections on 127.0.0.1:$pgb_port"; }

export DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/postgres"
export IDEM_TESTKIT_POOLER_URL="postgres://postgres@127.0.0.1:$pgb_port/postgres"
printf '==> PostgreSQL on 127.0.0.1:%s, PgBouncer %s (transaction pooling) on 127.0.0.1:%s\n' \
    "$pg_port" "$("$PGBOUNCER" --version | head -n 1)" "$pgb_port"
rc=0
"$@" || rc=$?
if [ "$rc" != 0 ]; then
    echo "ha/pgbouncer.sh: the command failed (exit $rc); PgBouncer's log tail:" >&2
    tail -n 30 "$dir/pgbouncer.log" >&2
fi
exit "$rc"
