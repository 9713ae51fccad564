#!/usr/bin/env bash
# PostgreSQL's own instructions per request, for idem's statements and the alternatives
# BENCHMARKS.md discusses, counted by valgrind's callgrind in a single-user backend.
#
# Wall time on a shared two-core machine wobbles; instruction counts do not. Each variant
# runs N and 2N times from a fresh copy of one data directory, and the difference over N
# is the cost of one request, without start-up and schema work. The statements are run
# as prepared statements (PREPARE once, EXECUTE per request), the way sqlx runs them.
#
# usage: idem-bench/profile-postgres.sh [N [variant...]]  (from the repository root; N = 1000;
#        the variants by name, all of them when none is named; KEEP=dir keeps callgrind's
#        output of each run there for callgrind_annotate)
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

# The request's values, bound as parameters the way sqlx binds them: the fingerprint, the
# stored response's header block (`location: /orders/123\r\n`) and its body.
hash="'\\x$(printf '07%.0s' $(seq 32))'::bytea"
headers="'\\x6c6f636174696f6e3a202f6f72646572732f3132330d0a'::bytea"
body="convert_to('{\"id\":123,\"item\":\"tea\",\"quantity\":2,\"amount_cents\":1250,\"created_at\":\"2026-12-01T00:00:00.000000Z\"}', 'UTF8')"

# A statement on one line: single-user mode ends a command at a newline.
line() { tr '\n' ' ' | sed 's/  */ /g'; echo; }

# idem's statements, copied from idem-runtime/src/store/postgres/mod.rs: `claim` is CLAIM
# with its claim_lock_timeout! CTE, `complete` is COMPLETE. `columns` is the claim as it
# was before its existing row became one record (ten columns). `before` is each as it was
# before nextval moved into the CTE and the completion lost its RETURNING clause; the
# other variants are `before` with one thing left out or changed.
# $1 = key table, $2 = claim variant.
claim_sql() {
    local t=$1 v=$2 cfg gen ret from insert guard="AND NOT EXISTS (SELECT FROM ins)"
    cfg="SELECT set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', (\$7::bigint)::text, true)"
    gen="nextval('idem_attempts')"
    ret="set_config('lock_timeout', current_setting('idem.outer_lock_timeout'), true), generation"
    from="FROM cfg"
    case $v in
    # nextval in the CTE: the insert's SELECT then holds no volatile call and is flattened.
    claim | columns | noguard) cfg="$cfg, nextval('idem_attempts') AS next_generation"; gen=next_generation ;;&
    noguard) guard="" ;;
    nonextval) gen=0 ;;
    norestore) ret=generation ;;
    nolock) ret=generation; from="" ;;
    esac
    insert="INSERT INTO $t (scope, idem_key, request_hash, method, path, expires_at, generation)
        SELECT \$1, \$2, \$3, \$4, \$5, now() + \$6, $gen $from
        ON CONFLICT (scope, idem_key) DO NOTHING RETURNING $ret"
    {
        if [ "$v" = function ]; then
            echo "SELECT * FROM idem_claim(\$1, \$2, \$3, \$4, \$5, \$6, \$7)"
        elif [ "$v" = function2 ]; then
            echo "SELECT * FROM idem_claim2(\$1, \$2, \$3, \$4, \$5, \$6, \$7)"
        elif [ "$v" = nounion ]; then
            echo "WITH cfg AS MATERIALIZED ($cfg) $insert"
        elif [ "$v" = claim ]; then
            # The existing row as one record beside its generation and body.
            echo "WITH cfg AS MATERIALIZED ($cfg), ins AS ($insert)
SELECT generation, NULL::record AS existing, NULL::bytea AS response_body FROM ins
UNION ALL
SELECT k.generation, ROW(k.expires_at <= now() AND k.state = 'completed', k.request_hash,
       k.method, k.path, k.state, k.response_status, k.response_headers), k.response_body
  FROM $t k
 WHERE k.scope = \$1 AND k.idem_key = \$2 $guard"
        elif [ "$v" = bare ]; then
            echo "INSERT INTO $t (scope, idem_key, request_hash, method, path, expires_at, generation)
                VALUES (\$1, \$2, \$3, \$4, \$5, now() + \$6, $gen)
                ON CONFLICT (scope, idem_key) DO NOTHING RETURNING generation"
        else
            [ -n "$from" ] && echo "WITH cfg AS MATERIALIZED ($cfg)," || echo "WITH"
            echo "ins AS ($insert)
SELECT true AS claimed, false AS expired, NULL::bytea AS request_hash, NULL::text AS method,
       NULL::text AS path, NULL::text AS state, NULL::smallint AS response_status,
       NULL::bytea AS response_headers, NULL::bytea AS response_body, generation
  FROM ins
UNION ALL
SELECT false, k.expires_at <= now() AND k.state = 'completed', k.request_hash, k.method,
       k.path, k.state, k.response_status, k.response_headers, k.response_body, k.generation
  FROM $t k
 WHERE k.scope = \$1 AND k.idem_key = \$2 $guard"
        fi
    } | line
}

# $1 = key table, $2 = completion variant.
complete_sql() {
    local t=$1 v=$2 ret
    case $v in
    # The marker in the WHERE clause: outside idem's transaction no row is updated (and
    # the runtime then runs COMPLETE_CHECKED, the `before` form, to tell why).
    complete) ret="AND current_setting('idem.outer_lock_timeout', true) <> ''" ;;
    before) ret="RETURNING coalesce(current_setting('idem.outer_lock_timeout', true), '') <> ''" ;;
    noreturning) ret="" ;;
    esac
    echo "UPDATE $t SET state = 'completed', response_status = \$3, response_headers = \$4,
        response_body = \$5, locked_until = NULL WHERE scope = \$1 AND idem_key = \$2 $ret" | line
}

# The claim as a PL/pgSQL function (`function`), measured as an alternative and not what
# the runtime runs: one statement inside for a first execution, no UNION ALL to set up.
function_sql() {
    cat <<'SQL'
CREATE FUNCTION idem_claim(p_scope text, p_key text, p_hash bytea, p_method text, p_path text,
                           p_retention interval, p_wait bigint)
RETURNS TABLE (claimed boolean, expired boolean, request_hash bytea, method text, path text,
               state text, response_status smallint, response_headers bytea,
               response_body bytea, generation bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), true),
            set_config('lock_timeout', p_wait::text, true);
    INSERT INTO idem_keys AS k (scope, idem_key, request_hash, method, path, expires_at, generation)
    VALUES (p_scope, p_key, p_hash, p_method, p_path, now() + p_retention, nextval('idem_attempts'))
    ON CONFLICT (scope, idem_key) DO NOTHING
    RETURNING k.generation INTO generation;
    IF FOUND THEN
        PERFORM set_config('lock_timeout', current_setting('idem.outer_lock_timeout'), true);
        claimed := true;
        expired := false;
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT false, k.expires_at <= now() AND k.state = 'completed', k.request_hash, k.method,
           k.path, k.state, k.response_status, k.response_headers, k.response_body, k.generation
      FROM idem_keys k
     WHERE k.scope = p_scope AND k.idem_key = p_key;
END
$$;
CREATE FUNCTION idem_claim2(p_scope text, p_key text, p_hash bytea, p_method text, p_path text,
                           p_retention interval, p_wait bigint,
                           OUT claimed boolean, OUT expired boolean, OUT request_hash bytea,
                           OUT method text, OUT path text, OUT state text,
                           OUT response_status smallint, OUT response_headers bytea,
                           OUT response_body bytea, OUT generation bigint)
LANGUAGE plpgsql AS $$
DECLARE
    restored text;
BEGIN
    WITH cfg AS MATERIALIZED (
        SELECT set_config('idem.outer_lock_timeout', current_setting('lock_timeout'), true),
               set_config('lock_timeout', p_wait::text, true), nextval('idem_attempts') AS g)
    INSERT INTO idem_keys AS k (scope, idem_key, request_hash, method, path, expires_at, generation)
    SELECT p_scope, p_key, p_hash, p_method, p_path, now() + p_retention, g FROM cfg
    ON CONFLICT (scope, idem_key) DO NOTHING
    RETURNING set_config('lock_timeout', current_setting('idem.outer_lock_timeout'), true), k.generation
    INTO restored, generation;
    IF FOUND THEN
        claimed := true;
        expired := false;
        RETURN;
    END IF;
    SELECT false, k.expires_at <= now() AND k.state = 'completed', k.request_hash, k.method,
           k.path, k.state, k.response_status, k.response_headers, k.response_body, k.generation
      INTO claimed, expired, request_hash, method, path, state, response_status,
           response_headers, response_body, generation
      FROM idem_keys k
     WHERE k.scope = p_scope AND k.idem_key = p_key;
END
$$;
SQL
}

# The schema: idem's migrations, the example's orders, the hand-written baseline's table
# (idem-bench/src/hand.rs) and the claim as a function (function_sql).
{
    cat migrations/postgres/*.sql examples/orders/migrations/postgres/*.sql
    sed -n '/^pub(crate) const SCHEMA/,/";$/p' idem-bench/src/hand.rs | sed '1d;$d' | sed 's/\\$//'
    function_sql
} > "$work/schema.sql"
chmod -R a+rX "$work"
"${as_pg[@]}" "$bin/initdb" -D "$work/template" --auth=trust --no-sync -U postgres \
    --encoding=UTF8 --locale=C > /dev/null
"${as_pg[@]}" "$bin/postgres" --single -D "$work/template" -j -c fsync=off postgres \
    < "$work/schema.sql" > "$work/schema.log" 2>&1
if grep -q ERROR "$work/schema.log"; then grep ERROR "$work/schema.log" >&2; exit 1; fi

prepare() { # $1 = key table, $2 = claim variant, $3 = completion variant
    echo "PREPARE ins(bigint) AS INSERT INTO orders (account_id, item, quantity, amount_cents) VALUES (\$1, 'tea', 2, 1250) RETURNING id, item, quantity, amount_cents, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS created_at;"
    echo "PREPARE claim(text, text, bytea, text, text, interval, bigint) AS $(claim_sql "$1" "$2");"
    echo "PREPARE complete(text, text, smallint, bytea, bytea) AS $(complete_sql "$1" "$3");"
    # idem-bench/src/hand.rs
    echo "PREPARE hclaim(bigint, text, bytea, text, text) AS INSERT INTO hand_keys (account_id, idem_key, request_hash, method, path, locked_until) VALUES (\$1, \$2, \$3, \$4, \$5, now() + interval '60 seconds') ON CONFLICT (account_id, idem_key) DO NOTHING RETURNING true;"
    echo "PREPARE hselect(bigint, text) AS SELECT request_hash, state, coalesce(locked_until > now(), false), response_code, response_location, response_body FROM hand_keys WHERE account_id = \$1 AND idem_key = \$2 FOR UPDATE;"
    echo "PREPARE hcomplete(bigint, text, text, bytea) AS UPDATE hand_keys SET state = 'completed', response_code = 201, response_location = \$3, response_body = \$4, locked_until = NULL WHERE account_id = \$1 AND idem_key = \$2;"
}

# One request of a variant's kind for account $2 and key $3: `bare`, `hand`, `hand-replay`,
# `idem` (BEGIN as idem sends it), `idem-begin` (a plain BEGIN), `idem-replay`.
request() {
    local a=$2 k=$3
    local claim="EXECUTE claim('$a', '$k', $hash, 'POST', '/idem/orders', '24 hours', 1000);"
    local complete="EXECUTE complete('$a', '$k', 201, $headers, $body);"
    case $1 in
    bare) echo "EXECUTE ins($a);" ;;
    # hand.rs sends BEGIN and SET LOCAL as one simple query.
    hand) printf '%s\n' "BEGIN; SET LOCAL lock_timeout = '1s';" \
        "EXECUTE hclaim($a, '$k', $hash, 'POST', '/hand/orders');" "EXECUTE ins($a);" \
        "EXECUTE hcomplete($a, '$k', '/orders/123', $body);" "COMMIT;" ;;
    hand-replay) printf '%s\n' "BEGIN; SET LOCAL lock_timeout = '1s';" \
        "EXECUTE hclaim($a, '$k', $hash, 'POST', '/hand/orders');" "EXECUTE hselect($a, '$k');" "ROLLBACK;" ;;
    idem) printf '%s\n' "BEGIN ISOLATION LEVEL READ COMMITTED;" "$claim" "EXECUTE ins($a);" "$complete" "COMMIT;" ;;
    idem-begin) printf '%s\n' "BEGIN;" "$claim" "EXECUTE ins($a);" "$complete" "COMMIT;" ;;
    idem-replay) printf '%s\n' "BEGIN ISOLATION LEVEL READ COMMITTED;" "$claim" "ROLLBACK;" ;;
    esac
}

# Instructions of a whole single-user session running the script $1; with $KEEP set,
# callgrind's output is kept as $KEEP/$2.out for callgrind_annotate.
count() {
    local dir="$work/run"
    rm -rf "$dir"
    cp -a "$work/template" "$dir"
    "${as_pg[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
        "$bin/postgres" --single -D "$dir" -c fsync=off -c autovacuum=off postgres \
        < "$1" > "$work/run.log" 2>&1
    if grep -q ERROR "$work/run.log"; then grep -m 3 ERROR "$work/run.log" >&2; exit 1; fi
    if [ -n "${KEEP:-}" ]; then cp "$work/cg.out" "$KEEP/$2.out"; fi
    grep -E '^(summary|totals):' "$work/cg.out" | head -n 1 | awk '{ print $2 }'
}

# Instructions per request of one variant: `name label table claim completion kind [first]`,
# where claim and completion name the statements (claim_sql, complete_sql) and kind the
# requests (request). A replay variant needs completed keys: both runs first complete N
# keys with `first`, then the second replays them, so the difference is the replays alone.
measure() {
    local name=$1 label=$2 table=$3 claim=$4 completion=$5 kind=$6 first=${7:-}
    local n i
    for n in "$N" $((2 * N)); do
        {
            prepare "$table" "$claim" "$completion"
            # A warm-up long enough for PostgreSQL to settle on generic plans.
            for i in $(seq 1 20); do request "${first:-$kind}" $((i % 1000 + 1)) "w$i"; done
            if [ -n "$first" ]; then
                for i in $(seq 1 "$N"); do request "$first" $((i % 1000 + 1)) "k$i"; done
                for i in $(seq 1 $((n - N))); do request "$kind" $((i % 1000 + 1)) "k$i"; done
            else
                for i in $(seq 1 "$n"); do request "$kind" $((i % 1000 + 1)) "k$i"; done
            fi
        } > "$work/script.$n.sql"
        chmod a+r "$work/script.$n.sql"
    done
    local a b
    a=$(count "$work/script.$N.sql" "$name.1")
    b=$(count "$work/script.$((2 * N)).sql" "$name.2")
    printf '%-16s %-62s %8d\n' "$name" "$label" $(((b - a) / N))
}

# name, label, table, claim, completion, requests [, requests that complete the keys first]
variants="\
bare|bare insert|idem_keys|claim|complete|bare
hand|hand: first execution|idem_keys|claim|complete|hand
idem|idem: first execution|idem_keys|claim|complete|idem
idem-before|idem: first execution, before|idem_keys|before|before|idem
idem-begin|before, plain BEGIN (no ISOLATION LEVEL)|idem_keys|before|before|idem-begin
idem-nonextval|before, generation 0 (no nextval)|idem_keys|nonextval|before|idem
idem-norestore|before, no restore of the lock timeout in RETURNING|idem_keys|norestore|before|idem
idem-nolock|before, no lock timeout save, set or restore|idem_keys|nolock|before|idem
idem-noreturning|before, completion without RETURNING|idem_keys|before|noreturning|idem
idem-nounion|before, claim without the UNION ALL branch|idem_keys|nounion|before|idem
idem-bare|before, bare claim and completion, plain BEGIN|idem_keys|bare|noreturning|idem-begin
idem-cfgnext|before, nextval in the CTE (ten columns)|idem_keys|columns|before|idem
idem-guarded|before, the completion with the marker in WHERE (this one)|idem_keys|before|complete|idem
idem-columns|idem, the claim returning ten columns (before the record)|idem_keys|columns|complete|idem
idem-noguard|idem, no NOT EXISTS guard on the UNION ALL branch, ten columns|idem_keys|noguard|complete|idem
idem-function|idem, the claim as a PL/pgSQL function|idem_keys|function|complete|idem
idem-function2|idem, the claim as a PL/pgSQL function, one statement when claimed|idem_keys|function2|complete|idem
hand-replay|hand: replay|idem_keys|claim|complete|hand-replay|hand
idem-replay|idem: replay|idem_keys|claim|complete|idem-replay|idem
idem-columns-replay|idem: replay, ten columns|idem_keys|columns|complete|idem-replay|idem
idem-before-replay|idem: replay, before|idem_keys|before|before|idem-replay|idem
idem-function-replay|idem: replay, the claim as a function|idem_keys|function|complete|idem-replay|idem
idem-function2-replay|idem: replay, the claim as function2|idem_keys|function2|complete|idem-replay|idem"

# usage: profile-postgres.sh [N [variant...]]; no variants: all of them.
shift || true
echo "PostgreSQL instructions per request ($("$bin/postgres" --version), $N requests)"
while IFS='|' read -r name label table claim completion kind first; do
    if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx -- "$name"; then continue; fi
    measure "$name" "$label" "$table" "$claim" "$completion" "$kind" "$first"
done <<< "$variants"
