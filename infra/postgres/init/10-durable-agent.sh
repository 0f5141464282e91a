#!/bin/sh
# Run by the postgres image on its first start (an empty data volume) only: the role and the
# database of durable-agent's shared store (DURABLE_AGENT_STORE), beside Temporal's own
# databases (`temporal`, `temporal_visibility`, made by infra/temporal/setup-postgres.sh).
# The store creates and migrates its schema itself on first use.
set -eu
: "${DURABLE_AGENT_DB_PASSWORD:?DURABLE_AGENT_DB_PASSWORD is required (infra/.env)}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    --set=password="$DURABLE_AGENT_DB_PASSWORD" <<'SQL'
CREATE ROLE durable_agent LOGIN PASSWORD :'password';
CREATE DATABASE durable_agent OWNER durable_agent;
SQL
