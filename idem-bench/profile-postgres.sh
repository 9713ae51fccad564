#!/usr/bin/env bash
# PostgreSQL's own instructions per request, for idem's statements and the alternatives
# BENCHMARKS.md discusses, counted by valgrind's callgrind in a single-user backend.
#
# Wall time on a shared two-core machine wobbles; instruction counts do not. Each variant
# runs N and 2N times from a fresh copy of one data directory, and the difference over N
# is the cost of one request, without start-up and schema work. The statements are run
# as prepared statements (PREPARE once, EXECUTE per request), the way sqlx runs them.
#
# usage: idem-bench/profile-postgres.sh [N]        (from the repository root; N = 1000)
# needs: PostgreSQL server binaries (initdb, postgres), valgrind. Takes a few minutes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-1000}

bin=$(dirname "$(command -v postgres 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n 1)")
work=$(mktemp -d "${TMPDIR:-/tmp}/idem-pg-profile.XXXXXX")
trap 'rm -rf "$work"' EXIT
as_pg=()
if [ "$(id -u)" = 0 ]; then
    as_pg=(runuser -u postgres --)
    chown postgres "$work"
fi

# The schema: idem's migrations, the example's orders, the hand-written baseline's table
# (idem-bench/src/hand.rs) and a copy of idem_keys without its CHECK constraints.
{
    cat migrations/postgres/*.sql examples/orders/migrations/postgres/*.sql
    sed -n '/^pub(crate) const SCHEMA/,/";$/p' idem-bench/src/hand.rs | sed '1d;$d' | sed 's/\\$//'
    printf '\nCREATE TABLE keys_nocheck (LIKE idem_keys INCLUDING DEFAULTS INCLUDING INDEXES);\n'
} > "$work/schema.sql"
chmod -R a+rX "$work"
"${as_pg[@]}" "$bin/initdb" -D "$work/template" --auth=trust --no-sync -U postgres \
    --encoding=UTF8 --locale=C > /dev/null
"${as_pg[@]}" "$bin/postgres" --single -D "$work/template" -j -c fsync=off postgres \
    < "$work/schema.sql" > "$work/schema.log" 2>&1
if grep -q ERROR "$work/schema.log"; then grep ERROR "$work/schema.log" >&2; exit 1; fi

hash="'\\x$(printf '07%.0s' $(seq 32))'::bytea"
body="convert_to('{\"id\":123,\"item\":\"tea\",\"quantity\":2,\"amount_cents\":1250,\"created_at\":\"2026-12-01T00:00:00.000000Z\"}', 'UTF8')"
prepare() { # $1 = key table
    local t=$1
    cat <<SQL
PREPARE ins(bigint) AS INSERT INTO orders (account_id, item, quantity, amount_cents) VALUES (\$1, 'tea', 2, 1250) RETURNING id, item, quantity, amount_cents, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at;
PREPARE claim(text, text) AS WITH ins AS (INSERT INTO $t (scope, idem_key, request_hash, method, path, expires_at) VALUES (\$1, \$2, $hash, 'POST', '/idem/orders', now() + interval '24 hours') ON CONFLICT (scope, idem_key) DO NOTHING RETURNING set_config('lock_timeout', current_setting('idem.outer_lock_timeout'), true)) SELECT true AS claimed, false AS expired, NULL::bytea AS request_hash, NULL::text AS method, NULL::text AS path, NULL::text AS state, NULL::smallint AS response_status, NULL::bytea AS response_headers, NULL::bytea AS response_body FROM ins UNION ALL SELECT false, k.expires_at <= now(), k.request_hash, k.method, k.path, k.state, k.response_status, k.response_headers, k.response_body FROM $t k WHERE k.scope = \$1 AND k.idem_key = \$2 AND NOT EXISTS (SELECT FROM ins);
PREPARE fold(text, text) AS WITH cfg AS MATERIALIZED (SELECT set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), true) AS o, set_config('lock_timeout', '1000', true) AS c), ins AS (INSERT INTO $t (scope, idem_key, request_hash, method, path, expires_at) SELECT \$1, \$2, $hash, 'POST', '/idem/orders', now() + interval '24 hours' FROM cfg ON CONFLICT (scope, idem_key) DO NOTHING RETURNING set_config('lock_timeout', current_setting('idem.outer_lock_timeout'), true)) SELECT true AS claimed, false AS expired, NULL::bytea AS request_hash, NULL::text AS method, NULL::text AS path, NULL::text AS state, NULL::smallint AS response_status, NULL::bytea AS response_headers, NULL::bytea AS response_body FROM ins UNION ALL SELECT false, k.expires_at <= now(), k.request_hash, k.method, k.path, k.state, k.response_status, k.response_headers, k.response_body FROM $t k WHERE k.scope = \$1 AND k.idem_key = \$2 AND NOT EXISTS (SELECT FROM ins);
PREPARE complete(text, text) AS UPDATE $t SET state = 'completed', response_status = 201, response_headers = '\\x6c6f636174696f6e3a202f6f72646572732f3132330d0a'::bytea, response_body = $body, locked_until = NULL WHERE scope = \$1 AND idem_key = \$2 RETURNING coalesce(current_setting('idem.outer_lock_timeout', true), '') <> '';
PREPARE hclaim(bigint, text) AS INSERT INTO hand_keys (account_id, idem_key, request_hash, method, path, locked_until) VALUES (\$1, \$2, $hash, 'POST', '/hand/orders', now() + interval '60 seconds') ON CONFLICT (account_id, idem_key) DO NOTHING RETURNING true;
PREPARE hselect(bigint, text) AS SELECT request_hash, state, coalesce(locked_until > now(), false), response_code, response_location, response_body FROM hand_keys WHERE account_id = \$1 AND idem_key = \$2 FOR UPDATE;
PREPARE hcomplete(bigint, text) AS UPDATE hand_keys SET state = 'completed', response_code = 201, response_location = '/orders/123', response_body = $body, locked_until = NULL WHERE account_id = \$1 AND idem_key = \$2;
SQL
}

# One request of a variant for account $2 and key $3.
request() {
    local a=$2 k=$3
    case $1 in
    bare) echo "EXECUTE ins($a);" ;;
    hand) printf '%s\n' "BEGIN;" "SET LOCAL lock_timeout = '1s';" "EXECUTE hclaim($a, '$k');" \
        "EXECUTE ins($a);" "EXECUTE hcomplete($a, '$k');" "COMMIT;" ;;
    hand-replay) printf '%s\n' "BEGIN;" "SET LOCAL lock_timeout = '1s';" \
        "EXECUTE hclaim($a, '$k');" "EXECUTE hselect($a, '$k');" "ROLLBACK;" ;;
    idem) printf '%s\n' "BEGIN;" \
        "SELECT set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), true);" \
        "SET LOCAL lock_timeout = 1000;" "EXECUTE claim('$a', '$k');" "EXECUTE ins($a);" \
        "EXECUTE complete('$a', '$k');" "COMMIT;" ;;
    idem-replay) printf '%s\n' "BEGIN;" \
        "SELECT set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), true);" \
        "SET LOCAL lock_timeout = 1000;" "EXECUTE claim('$a', '$k');" "ROLLBACK;" ;;
    fold) printf '%s\n' "BEGIN;" "EXECUTE fold('$a', '$k');" "EXECUTE ins($a);" \
        "EXECUTE complete('$a', '$k');" "COMMIT;" ;;
    fold-replay) printf '%s\n' "BEGIN;" "EXECUTE fold('$a', '$k');" "ROLLBACK;" ;;
    esac
}

# Instructions of a whole single-user session running the script $1.
count() {
    local dir="$work/run"
    rm -rf "$dir"
    cp -a "$work/template" "$dir"
    "${as_pg[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
        "$bin/postgres" --single -D "$dir" -c fsync=off -c autovacuum=off postgres \
        < "$1" > "$work/run.log" 2>&1
    if grep -q ERROR "$work/run.log"; then grep -m 3 ERROR "$work/run.log" >&2; exit 1; fi
    grep -E '^(summary|totals):' "$work/cg.out" | head -n 1 | awk '{ print $2 }'
}

# Instructions per request of `variant` on `table`. A replay variant needs completed
# keys: both runs first complete N keys with `first`, then the second replays them, so
# the difference is the replays alone.
measure() { # label table variant [first]
    local label=$1 table=$2 variant=$3 first=${4:-}
    local n i
    for n in "$N" $((2 * N)); do
        {
            prepare "$table"
            # A warm-up long enough for PostgreSQL to settle on generic plans.
            for i in $(seq 1 20); do request "${first:-$variant}" $((i % 1000 + 1)) "w$i"; done
            if [ -n "$first" ]; then
                for i in $(seq 1 "$N"); do request "$first" $((i % 1000 + 1)) "k$i"; done
                for i in $(seq 1 $((n - N))); do request "$variant" $((i % 1000 + 1)) "k$i"; done
            else
                for i in $(seq 1 "$n"); do request "$variant" $((i % 1000 + 1)) "k$i"; done
            fi
        } > "$work/script.$n.sql"
        chmod a+r "$work/script.$n.sql"
    done
    local a b
    a=$(count "$work/script.$N.sql")
    b=$(count "$work/script.$((2 * N)).sql")
    printf '%-58s %8d\n' "$label" $(((b - a) / N))
}

echo "PostgreSQL instructions per request ($("$bin/postgres" --version), $N requests)"
measure "bare insert"                                      idem_keys    bare
measure "hand: first execution"                            idem_keys    hand
measure "idem: first execution"                            idem_keys    idem
measure "idem: first execution, no CHECK constraints"      keys_nocheck idem
measure "idem: first execution, lock timeout in the claim" idem_keys    fold
measure "idem: both changes"                               keys_nocheck fold
measure "hand: replay"                                     idem_keys    hand-replay hand
measure "idem: replay"                                     idem_keys    idem-replay idem
measure "idem: replay, both changes"                       keys_nocheck fold-replay fold
