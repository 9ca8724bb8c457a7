#!/usr/bin/env bash
# Baseline for bench_reconcile.py: the same owned-field edits a gitscale pass makes, done the
# "hand-rolled" way: one yq call per manifest, then git add, git commit, git push.
#
#   baseline_yq.sh CHECKOUT EDITS_FILE
#
# EDITS_FILE has one line per runner set to edit:  MANIFEST REPLICAS FINGERPRINT
# (MANIFEST relative to CHECKOUT). The script does not read demand or decide anything: it is
# handed the answers, so it measures only the mechanics (edit + commit + push).
#
# Fields written per manifest (as gitscale does for a scale-up): spec.replicas = REPLICAS,
# spec.patchID += 1, spec.effectiveTime = now, annotations gitscale.dev/jobs = FINGERPRINT and
# gitscale.dev/last-scale-up = now.
#
# yq flavour: YQ_FLAVOR=kislyuk|mikefarah (bench_reconcile.py detects it once and passes it);
# detected here when unset. kislyuk's (Debian/Ubuntu `apt-get install yq`, a jq wrapper) runs
# with -Y (round-trip: keeps quoting and flow style, but still drops comments); YQ_KISLYUK_MODE=y
# uses plain -y instead.
set -euo pipefail

checkout=$1
edits=$2
cd "$checkout"

flavor=${YQ_FLAVOR:-}
if [[ -z $flavor ]]; then
  if ! command -v yq >/dev/null; then
    echo "baseline_yq.sh: yq not found (apt-get install yq)" >&2
    exit 3
  fi
  if yq --version 2>&1 | grep -qi mikefarah; then flavor=mikefarah; else flavor=kislyuk; fi
fi

now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
paths=()
while read -r manifest replicas fingerprint; do
  [[ -z $manifest ]] && continue
  filter=".spec.replicas = ${replicas} | .spec.patchID += 1 | .spec.effectiveTime = \"${now}\""
  filter+=" | .metadata.annotations[\"gitscale.dev/jobs\"] = \"${fingerprint}\""
  filter+=" | .metadata.annotations[\"gitscale.dev/last-scale-up\"] = \"${now}\""
  case $flavor in
    mikefarah) yq -i "$filter" "$manifest" ;;
    kislyuk) yq "-${YQ_KISLYUK_MODE:-Y}" -i "$filter" "$manifest" ;;
    *) echo "baseline_yq.sh: unknown YQ_FLAVOR $flavor" >&2; exit 3 ;;
  esac
  paths+=("$manifest")
done < "$edits"

git add -- "${paths[@]}"
git commit --quiet --no-verify -m "scale ${#paths[@]} runner sets (yq baseline)"
git push --quiet
