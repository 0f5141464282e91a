#!/bin/sh
# The namespace the workers use, made once the server answers (the temporal-namespace service
# of infra/docker-compose.yml, in the temporalio/admin-tools image, whose `temporal` CLI reads
# TEMPORAL_ADDRESS). An existing namespace is left as it is.
set -eu
namespace="${TEMPORAL_NAMESPACE:-default}"
retention="${TEMPORAL_NAMESPACE_RETENTION:-72h}"

tries=0
until temporal operator cluster health >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
        echo "Temporal at ${TEMPORAL_ADDRESS:-localhost:7233} is not healthy" >&2
        exit 1
    fi
    sleep 2
done

if temporal operator namespace describe --namespace "$namespace" >/dev/null 2>&1; then
    echo "namespace ${namespace} exists"
else
    temporal operator namespace create --namespace "$namespace" --retention "$retention"
    echo "namespace ${namespace} created (retention ${retention})"
fi
