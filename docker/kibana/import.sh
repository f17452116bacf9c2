#!/bin/sh
# Import the hopsearch saved objects into Kibana (7.17; 8.x accepts them too). Overwrites, so re-running
# updates them. Fails (non-zero) unless Kibana reports success.
set -eu
KIBANA_URL="${KIBANA_URL:-http://localhost:5601}"
FILE="$(dirname "$0")/hopsearch.ndjson"
# security on: as the elastic superuser (ELASTIC_PASSWORD), who may write saved objects
response="$(curl -sS -u "elastic:${ELASTIC_PASSWORD:?set ELASTIC_PASSWORD}" \
  -X POST "${KIBANA_URL}/api/saved_objects/_import?overwrite=true" -H "kbn-xsrf: true" --form "file=@${FILE}")"
echo "${response}"
echo "${response}" | grep -q '"success":true'
