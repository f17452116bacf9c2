#!/bin/sh
# One-shot, against a cluster with security on: the passwords and roles hopsearch's stack runs with.
#   kibana_system            Kibana's own user (password KIBANA_PASSWORD)
#   hopsearch_service        the service: everything on <prefix>-* (its indices), cluster monitor
#   hopsearch_trace_auditor  an auditor in Kibana: read on <prefix>-traces, Discover/Dashboard/Visualize
#                            read in the default space, NOTHING on passages or outlines
# and the users `hopsearch` (HOPSEARCH_ES_PASSWORD) and `auditor` (AUDITOR_PASSWORD) with those roles.
# Idempotent: PUT replaces. Fails (non-zero) on any refusal.
set -eu
ES_URL="${ES_URL:-http://elasticsearch:9200}"
PREFIX="${HOPSEARCH_INDEX_PREFIX:-hopsearch}"
call() {  # METHOD PATH BODY
  code="$(curl -sS -o /tmp/answer -w '%{http_code}' -u "elastic:${ELASTIC_PASSWORD}" -X "$1" "${ES_URL}$2" \
    -H 'Content-Type: application/json' -d "$3")"
  cat /tmp/answer; echo
  [ "${code}" -lt 300 ]
}
call POST /_security/user/kibana_system/_password "{\"password\": \"${KIBANA_PASSWORD}\"}"
call PUT /_security/role/hopsearch_service "{
  \"cluster\": [\"monitor\"],
  \"indices\": [{\"names\": [\"${PREFIX}-*\"], \"privileges\": [\"all\"]}]
}"
call PUT /_security/role/hopsearch_trace_auditor "{
  \"indices\": [{\"names\": [\"${PREFIX}-traces\"], \"privileges\": [\"read\", \"view_index_metadata\"]}],
  \"applications\": [{
    \"application\": \"kibana-.kibana\",
    \"privileges\": [\"feature_discover.read\", \"feature_dashboard.read\", \"feature_visualize.read\"],
    \"resources\": [\"space:default\"]
  }]
}"
call PUT /_security/user/hopsearch "{\"password\": \"${HOPSEARCH_ES_PASSWORD}\", \"roles\": [\"hopsearch_service\"]}"
call PUT /_security/user/auditor "{\"password\": \"${AUDITOR_PASSWORD}\", \"roles\": [\"hopsearch_trace_auditor\"]}"
