#!/bin/bash
# One memfs sandbox per work item, for the official poller (docs/OPERATIONS.md section 7, docs/SEMANTICS.md#d-worker):
#
#   ant beta:worker poll --on-work /path/to/spawn-worker-sandbox.sh
#
# The poller gives the claimed work item as JSON on stdin (`id`, `environment_id`, `data.id` = the
# session, `secret` = the work secret) and does not export the secret. This script starts the
# sandbox image in worker mode (MEMFS_MODE=worker: mount first, then `memfs worker` as the
# unprivileged agent user) and waits for it. The secret goes to the container through a 0600 env
# file that is deleted as soon as the container is created: never on a command line, so never in
# `ps`. When the sandbox cannot start (docker itself fails), the work item is force-stopped here so
# it does not sit until its lease expires; a failed mount is force-stopped inside the sandbox.
#
# Environment (all optional):
#   MEMFS_SANDBOX_IMAGE   the image (memfs-sandbox)
#   ANTHROPIC_BASE_URL    the platform (https://api.anthropic.com)
#   MEMFS_STORE_URL       the memory store service when it is not the platform
#   MEMFS_DOCKER_ARGS     more `docker create` arguments (a network, a state-dir volume, limits)
#   MEMFS_STOP_TIMEOUT    seconds docker gives the sandbox after SIGTERM (75: worker 40 + unmount 30)
# Exit status: the sandbox's (0 when the item was served and every memory change is on the store).
set -euo pipefail

IMAGE="${MEMFS_SANDBOX_IMAGE:-memfs-sandbox}"
BASE_URL="${ANTHROPIC_BASE_URL:-https://api.anthropic.com}"
STOP_TIMEOUT="${MEMFS_STOP_TIMEOUT:-75}"
say() { echo "spawn-worker-sandbox: $*" >&2; }

umask 077
TMP="$(mktemp -d)"
CID=""
cleanup() {
    rm -rf "$TMP"
    if [ -n "$CID" ]; then docker rm -f "$CID" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
# docker stop of this script (the poller stopping): pass it on, with the sandbox's stop timeout.
trap 'if [ -n "$CID" ]; then docker stop -t "$STOP_TIMEOUT" "$CID" >/dev/null 2>&1 || true; fi' TERM INT

# The work item from stdin -> an env file (0600, umask) that only docker reads.
read -r -d '' PARSE_ITEM <<'PY' || true
import base64, json, os, sys

item = json.load(sys.stdin)
env_path, headers_path, base_url = sys.argv[1:4]
values = {
    "ANTHROPIC_WORK_ID": item.get("id") or os.environ.get("ANTHROPIC_WORK_ID", ""),
    "ANTHROPIC_ENVIRONMENT_ID": item.get("environment_id") or os.environ.get("ANTHROPIC_ENVIRONMENT_ID", ""),
    "ANTHROPIC_SESSION_ID": (item.get("data") or {}).get("id") or os.environ.get("ANTHROPIC_SESSION_ID", ""),
    "ANTHROPIC_WORK_SECRET": item.get("secret") or os.environ.get("ANTHROPIC_WORK_SECRET", ""),
    "ANTHROPIC_BASE_URL": base_url,
}
if os.environ.get("MEMFS_STORE_URL"):
    values["MEMFS_STORE_URL"] = os.environ["MEMFS_STORE_URL"]
missing = [k for k, v in values.items() if not v]
if missing:
    sys.exit(f"spawn-worker-sandbox: the work item lacks {', '.join(missing)}")
if any("\n" in v for v in values.values()):
    sys.exit("spawn-worker-sandbox: a work item value holds a newline")
with open(env_path, "w") as f:
    f.writelines(f"{k}={v}\n" for k, v in values.items())
# For a force-stop from here (curl reads headers from a file: the token stays off the command line).
secret = values["ANTHROPIC_WORK_SECRET"]
token = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4))).get("sessions_token", "")
with open(headers_path, "w") as f:
    f.write(f"Authorization: Bearer {token}\nanthropic-version: 2023-06-01\n"
            "anthropic-beta: managed-agents-2026-04-01\ncontent-type: application/json\n")
print(values["ANTHROPIC_WORK_ID"], values["ANTHROPIC_ENVIRONMENT_ID"])
PY
ids="$(python3 -c "$PARSE_ITEM" "$TMP/item.env" "$TMP/stop.headers" "$BASE_URL")"  # stdin: the work item
read -r WORK_ID ENV_ID <<<"$ids"

force_stop() {
    say "force-stopping work item $WORK_ID: $1"
    curl -fsS -X POST -H @"$TMP/stop.headers" --data '{"force": true}' \
        "$BASE_URL/v1/environments/$ENV_ID/work/$WORK_ID/stop" >/dev/null \
        || say "the force-stop of $WORK_ID failed (it ends when its lease expires)"
}

# shellcheck disable=SC2086  # MEMFS_DOCKER_ARGS is a list of arguments
if ! CID="$(docker create --label memfs-work-item="$WORK_ID" --env-file "$TMP/item.env" -e MEMFS_MODE=worker \
        --cap-add SYS_ADMIN --device /dev/fuse --security-opt apparmor=unconfined \
        --stop-timeout "$STOP_TIMEOUT" ${MEMFS_DOCKER_ARGS:-} "$IMAGE")"; then
    CID=""
    force_stop "docker create failed"
    exit 125
fi
rm -f "$TMP/item.env"  # docker holds it now; nothing on this host keeps the secret in a file
if ! docker start "$CID" >/dev/null; then
    force_stop "docker start failed"
    exit 125
fi
rm -f "$TMP/stop.headers"  # from here on the sandbox stops its own item
say "work item $WORK_ID in sandbox ${CID:0:12}"
# `docker wait` in the background so the TERM trap can run while we wait.
docker wait "$CID" >"$TMP/status" &
wait $! || wait $! || true
status="$(cat "$TMP/status" 2>/dev/null || echo 1)"
docker logs "$CID" >&2 2>&1 || true
exit "${status:-1}"
