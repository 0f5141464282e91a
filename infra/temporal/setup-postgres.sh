#!/bin/sh
# Temporal's schema on PostgreSQL, run by the temporalio/admin-tools image before the server
# starts (the temporal-schema service of infra/docker-compose.yml), as Temporal's own compose
# files do. Run on every `docker compose up`: creating what exists is a no-op for
# temporal-sql-tool, and update-schema brings a database made by an older image up to this
# image's schema (so raising TEMPORAL_VERSION upgrades the schema first).
set -eu
: "${POSTGRES_SEEDS:?POSTGRES_SEEDS is required}"
: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${SQL_PASSWORD:?SQL_PASSWORD is required}"
port="${DB_PORT:-5432}"
schema=/etc/temporal/schema/postgresql/v12

echo "waiting for PostgreSQL at ${POSTGRES_SEEDS}:${port}"
tries=0
until nc -z -w 5 "$POSTGRES_SEEDS" "$port"; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
        echo "PostgreSQL did not answer at ${POSTGRES_SEEDS}:${port}" >&2
        exit 1
    fi
    sleep 2
done

for db in temporal temporal_visibility; do
    if [ "$db" = temporal ]; then dir="$schema/temporal/versioned"; else dir="$schema/visibility/versioned"; fi
    sql() {
        temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -u "$POSTGRES_USER" \
            -p "$port" --db "$db" "$@"
    }
    sql create
    sql setup-schema -v 0.0
    sql update-schema -d "$dir"
done
echo "Temporal schema is up to date"
