#!/bin/sh
# upload_checkpoint.sh -- owns the "whole checkpoint through quantd" example of issue 11: creates
# a checkpoint job listing every file of a directory (POST /v1/jobs with "files"), PUTs the small
# files first (the index, config.json, tokenizer files: everything not *.safetensors; the run
# reads the whole index before it opens any shard, so a late index would hold everything back),
# then the shards in parallel with `curl -T` (streamed from disk: `--data-binary @FILE` would load
# each whole shard into curl's memory; in parallel because the run reads every shard header
# before its first tensor, and quantizes while the bytes arrive), waits for the job, then
# downloads all its outputs as one tar into OUT_DIR. Exit status 0 when the job succeeded and OUT_DIR holds its
# outputs, 1 otherwise (with curl's error or the server's answer on stderr), 2 on bad usage.
# Needs sh, curl, tar, xargs, sed; no jq.
#   examples/upload_checkpoint.sh [-u URL] [--cacert FILE] [-l LAYOUT] [-P JOBS] RULESET IN_DIR OUT_DIR
# URL defaults to $QUANTD_URL or http://127.0.0.1:8080; an https:// server with a private CA
# needs its CA certificate (PEM) in --cacert FILE or $QUANTD_CACERT; a server with tokens needs an
# operator token in $QUANTD_TOKEN.
# SPDX-License-Identifier: Apache-2.0
set -eu

url=${QUANTD_URL:-http://127.0.0.1:8080}
cacert=${QUANTD_CACERT:-}
layout=native
par=4
usage() {
    echo "usage: $0 [-u URL] [--cacert FILE] [-l native|compressed-tensors] [-P PARALLEL]" \
        "RULESET IN_DIR OUT_DIR" >&2
    exit 2
}
# --cacert FILE (or --cacert=FILE) taken out first; getopts reads the short options.
n=$#
while [ "$n" -gt 0 ]; do
    arg=$1
    shift
    n=$((n - 1))
    case $arg in
    --cacert=*) cacert=${arg#--cacert=} ;;
    --cacert)
        [ "$n" -gt 0 ] || usage
        cacert=$1
        shift
        n=$((n - 1)) ;;
    *) set -- "$@" "$arg" ;;
    esac
done
while getopts u:l:P:h opt; do
    case $opt in
    u) url=$OPTARG ;;
    l) layout=$OPTARG ;;
    P) par=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 3 ] || usage
ruleset=$1 in=$2 out=$3
[ -d "$in" ] || { echo "$0: $in is not a directory" >&2; exit 2; }
[ -z "$cacert" ] || [ -r "$cacert" ] || { echo "$0: cannot read the CA file $cacert" >&2; exit 2; }

auth=
[ -n "${QUANTD_TOKEN:-}" ] && auth="Authorization: Bearer $QUANTD_TOKEN"
# curl with the token and the CA; on failure its own error (cannot connect, certificate problem,
# ...) goes to stderr (-S), and the server's answer (--fail-with-body) to stdout.
call() { curl -sS --fail-with-body ${auth:+-H "$auth"} ${cacert:+--cacert "$cacert"} "$@"; }

# The regular files of IN_DIR (plain names: no '/', no leading '.'), as a JSON array.
files=$(cd "$in" && for f in *; do [ -f "$f" ] && printf '%s\n' "$f"; done)
[ -n "$files" ] || { echo "$0: no files in $in" >&2; exit 1; }
list=$(printf '%s\n' "$files" | sed 's/\\/\\\\/g; s/"/\\"/g; s/.*/"&"/' | paste -sd, -)

job=$(call -X POST -H 'Content-Type: application/json' \
    -d "{\"ruleset\":\"$ruleset\",\"layout\":\"$layout\",\"files\":[$list]}" "$url/v1/jobs") || {
    echo "$0: creating the job at $url failed${job:+: $job}" >&2; exit 1; }
id=$(printf '%s' "$job" | sed -n 's/^{"id":\([0-9]*\),.*/\1/p')
[ -n "$id" ] || { echo "$0: unexpected answer: $job" >&2; exit 1; }
echo "job $id: uploading $(printf '%s\n' "$files" | wc -l) files"

# One `curl -T` per file, PARALLEL at a time (checkpoint file names are URL-safe:
# letters, digits, "-", "_", ".") -- the small files, then the shards.
export url id auth cacert
put_all() {
    [ -n "$1" ] || return 0
    (cd "$in" && printf '%s\n' "$1" | xargs -P "$par" -I{} sh -c '
        curl -sS --fail-with-body -o /dev/null ${auth:+-H "$auth"} ${cacert:+--cacert "$cacert"} \
            -T "$1" "$url/v1/jobs/$id/inputs/$1" || { echo "upload of $1 failed" >&2; exit 1; }' sh {})
}
small=$(printf '%s\n' "$files" | grep -v '\.safetensors$' || true)
shards=$(printf '%s\n' "$files" | grep '\.safetensors$' || true)
if ! put_all "$small" || ! put_all "$shards"; then
    echo "$0: an upload failed; job $id:" >&2
    call "$url/v1/jobs/$id" >&2 || true
    exit 1
fi

# Wait for the job to end.
while :; do
    state=$(call "$url/v1/jobs/$id" | sed -n 's/^{"id":[0-9]*,"state":"\([a-z]*\)".*/\1/p')
    case $state in
    succeeded) break ;;
    failed | cancelled)
        echo "$0: job $id $state:" >&2
        call "$url/v1/jobs/$id" >&2
        exit 1 ;;
    esac
    sleep 0.1 # a GET of the job is cheap; a longer poll would add up to its length to the run
done

# Into a file first: a failed download then shows curl's error or the server's answer, not tar's
# "This does not look like a tar archive".
mkdir -p "$out"
tarball="$out/.outputs-$id.tar"
if ! call -o "$tarball" "$url/v1/jobs/$id/outputs.tar"; then
    echo "$0: downloading job $id's outputs failed: $(cat "$tarball" 2>/dev/null)" >&2
    rm -f "$tarball"
    exit 1
fi
tar -x -C "$out" -f "$tarball"
rm -f "$tarball"
echo "job $id: outputs in $out"
