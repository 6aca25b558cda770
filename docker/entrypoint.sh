#!/bin/bash
# The sandbox's PID 1 (docker/sandbox.Dockerfile; docs/OPERATIONS.md):
#   1. mounts the session's memory stores at $MEMFS_ROOT (memfs runs as root; the files belong to the
#      agent user and --allow-other lets that user in) and waits until every store is readable;
#      memfs answers EROFS to every user for the root and the read_only stores;
#   2. runs the agent's command ("$@") as the unprivileged agent user, without the work secret;
#   3. on SIGTERM/SIGINT (docker stop) or when the command ends: stops the command (SIGTERM, then
#      SIGKILL after MEMFS_AGENT_GRACE seconds), runs `memfs unmount` (final
#      sync, bounded by MEMFS_FLUSH_TIMEOUT; `memfs flush` if the daemon had died) and exits.
# Exit status: non-zero whenever a memory change is not on the store service (memfs's own status:
# 3 = changes staged, refused by the service or held back (not UTF-8), kept in the state dir and
# named in the log; 4 = the daemon did not answer `memfs unmount`) or the mount failed (78);
# otherwise the command's status, and 0 when the container was stopped with SIGTERM and every
# change reached the store service.
#
# Worker mode (MEMFS_MODE=worker, docs/SEMANTICS.md#d-worker): the command (default `memfs worker`) is the official
# EnvironmentWorker for one work item (ANTHROPIC_WORK_ID, ANTHROPIC_ENVIRONMENT_ID, ANTHROPIC_SESSION_ID,
# ANTHROPIC_WORK_SECRET, ANTHROPIC_BASE_URL = the platform). It runs as the agent user, keeps the work
# secret (and makes itself non-dumpable, so the agent's bash, its child, cannot read it from
# /proc/<worker>/environ; bash itself gets no ANTHROPIC_* variables), and reaches the daemon through
# the sync-only socket MEMFS_SYNC_SOCKET (/run/memfs-sync/sync.sock: sync and status, nothing else);
# the state dir and the full control socket stay root's. Its grace is MEMFS_AGENT_GRACE=40 s (its
# final sync is bounded by 30 s): stop the container with docker stop -t 75. A mount that fails
# force-stops the work item (`memfs worker --force-stop`) so it does not wait for its lease to expire.
#
# Environment: ANTHROPIC_BASE_URL, ANTHROPIC_SESSION_ID, ANTHROPIC_WORK_SECRET (or MEMFS_TOKEN) for
# memfs; MEMFS_STORE_URL (the memory store service when it is not ANTHROPIC_BASE_URL); MEMFS_ROOT (/mnt/memory), MEMFS_STATE_DIR (/var/lib/memfs/state), MEMFS_SYNC_INTERVAL (15),
# MEMFS_MOUNT_ARGS (more `memfs mount` flags), MEMFS_FLUSH_TIMEOUT (30), MEMFS_AGENT_GRACE (5),
# AGENT_UID / AGENT_GID (the `agent` user's, 1000), MEMFS_LOG_TO_STDERR (1: the daemon's log
# goes to the container's log), MEMFS_PRESTART (1: a standby daemon started first; 0: none).
set -uo pipefail

ROOT="${MEMFS_ROOT:-/mnt/memory}"
# First: a standby daemon that imports what the mount needs while the rest boots; `memfs mount`
# below hands it the session (docs/SEMANTICS.md#d-standby). Without it (MEMFS_PRESTART=0, or it
# failed) `memfs mount` forks its own daemon, as it always did.
if [ "${MEMFS_PRESTART:-1}" = 1 ]; then
    mkdir -p "$ROOT"
    memfs mount --prestart --root "$ROOT" --standby-timeout 600 >/dev/null \
        || echo "memfs-sandbox: no standby daemon; memfs mount starts its own" >&2
fi
STATE_DIR="${MEMFS_STATE_DIR:-/var/lib/memfs/state}"
FLUSH_TIMEOUT="${MEMFS_FLUSH_TIMEOUT:-30}"
MODE="${MEMFS_MODE:-agent}"
if [ "$MODE" = worker ]; then
    AGENT_GRACE="${MEMFS_AGENT_GRACE:-40}"
    export MEMFS_SYNC_SOCKET="${MEMFS_SYNC_SOCKET:-/run/memfs-sync/sync.sock}"
    mkdir -p "$(dirname "$MEMFS_SYNC_SOCKET")"
    chmod 0755 "$(dirname "$MEMFS_SYNC_SOCKET")"
else
    AGENT_GRACE="${MEMFS_AGENT_GRACE:-5}"
fi
AGENT_UID="${AGENT_UID:-$(id -u agent 2>/dev/null || echo 1000)}"
AGENT_GID="${AGENT_GID:-$(id -g agent 2>/dev/null || echo 1000)}"
EX_CONFIG=78

say() { echo "memfs-sandbox: $*" >&2; }

WORKER_DEFAULT=0
if [ $# -eq 0 ]; then
    if [ "$MODE" = worker ]; then WORKER_DEFAULT=1; else set -- sleep infinity; fi
fi

# Trapped from the start: as PID 1, bash would otherwise ignore a SIGTERM that comes during the mount.
STOPPING=0
AGENT_PID=""
on_signal() {
    STOPPING=1
    say "received $1: stopping the agent's command, then the final sync"
    if [ -n "$AGENT_PID" ]; then kill -TERM "$AGENT_PID" 2>/dev/null; fi
}
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGINT' INT

# -- 1. mount before anything of the agent's runs (a mount made later would not reach processes
#       that already started) -------------------------------------------------------------------
mkdir -p "$ROOT" "$STATE_DIR"
chmod 0700 "$STATE_DIR"
TAIL_PID=""
if [ "${MEMFS_LOG_TO_STDERR:-1}" = 1 ]; then
    touch "$STATE_DIR/memfs.log"
    tail -n 0 -F "$STATE_DIR/memfs.log" >&2 2>/dev/null &
    TAIL_PID=$!
fi
stop_tail() {
    if [ -n "$TAIL_PID" ]; then
        sleep 0.2  # let the last lines out
        kill "$TAIL_PID" 2>/dev/null
        wait "$TAIL_PID" 2>/dev/null
        TAIL_PID=""
    fi
}

# shellcheck disable=SC2086  # MEMFS_MOUNT_ARGS is a list of flags
memfs mount --root "$ROOT" --state-dir "$STATE_DIR" --uid "$AGENT_UID" --gid "$AGENT_GID" --allow-other \
    --sync-interval "${MEMFS_SYNC_INTERVAL:-15}" --flush-timeout "$FLUSH_TIMEOUT" \
    ${MEMFS_STORE_URL:+--base-url "$MEMFS_STORE_URL"} ${MEMFS_MOUNT_ARGS:-}
rc=$?
if [ $rc -ne 0 ]; then
    say "the memory stores could not be mounted (memfs mount exit $rc); not starting the agent without its memory"
    if [ "$MODE" = worker ]; then
        memfs worker --force-stop --root "$ROOT" || say "the work item could not be force-stopped"
    fi
    stop_tail
    exit $EX_CONFIG
fi

# -- 2. the agent's command, unprivileged, without the credentials ---------------------------------
groups_opt=(--clear-groups)
if getent passwd "$AGENT_UID" >/dev/null; then
    agent_name="$(getent passwd "$AGENT_UID" | cut -d: -f1)"
    agent_home="$(getent passwd "$AGENT_UID" | cut -d: -f6)"
    groups_opt=(--init-groups)
else
    agent_name="agent"
    agent_home="/tmp"
fi
if [ "$WORKER_DEFAULT" = 1 ]; then
    set -- memfs worker --root "$ROOT" --workdir "$agent_home"
fi
# The agent's command never gets the credentials; in worker mode the worker keeps the work secret
# (it is the process that needs it, and it shields it: see the header).
hide=(-u ANTHROPIC_WORK_SECRET -u MEMFS_TOKEN -u MEMFS_ADMIN_KEY)
if [ "$MODE" = worker ]; then hide=(-u MEMFS_TOKEN -u MEMFS_ADMIN_KEY); fi
run_agent() {
    env "${hide[@]}" \
        HOME="$agent_home" USER="$agent_name" LOGNAME="$agent_name" \
        setpriv --reuid "$AGENT_UID" --regid "$AGENT_GID" "${groups_opt[@]}" --no-new-privs -- "$@" &
    AGENT_PID=$!
    # `wait` returns early (status > 128) when a trapped signal arrives: wait again for the real end.
    local rc
    while :; do
        wait "$AGENT_PID"
        rc=$?
        if ! kill -0 "$AGENT_PID" 2>/dev/null; then
            break
        fi
        if [ "$STOPPING" = 1 ]; then
            # the command has had SIGTERM: MEMFS_AGENT_GRACE seconds, then SIGKILL
            for _ in $(seq $((AGENT_GRACE * 10))); do
                kill -0 "$AGENT_PID" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$AGENT_PID" 2>/dev/null; then
                say "the agent's command ignored SIGTERM for ${AGENT_GRACE}s: SIGKILL"
                kill -KILL "$AGENT_PID" 2>/dev/null
            fi
        fi
    done
    AGENT_PID=""
    return "$rc"
}

agent_rc=0
if [ "$STOPPING" = 1 ]; then
    say "stopped before the agent's command started"
else
    run_agent "$@"
    agent_rc=$?
    if [ "$STOPPING" = 1 ]; then
        say "the agent's command ended (status $agent_rc)"
    else
        say "the agent's command exited with status $agent_rc"
    fi
fi

# -- 3. final sync and unmount ---------------------------------------------------------------------
memfs unmount --root "$ROOT" --flush-timeout "$FLUSH_TIMEOUT"
unmount_rc=$?
if [ $unmount_rc -eq 1 ] && [ -f "$STATE_DIR/state.db" ]; then
    # the daemon was gone (crashed or killed): upload what it left staged
    say "the memfs daemon had died; uploading its staged changes with memfs flush"
    memfs flush --state-dir "$STATE_DIR" --flush-timeout "$FLUSH_TIMEOUT"
    unmount_rc=$?
fi
stop_tail
if [ $unmount_rc -ne 0 ]; then
    say "NOT every memory change reached the store service (status $unmount_rc); they are kept in $STATE_DIR"
    exit $unmount_rc
fi
say "every memory change is on the store service"
if [ "$STOPPING" = 1 ]; then
    exit 0
fi
exit "$agent_rc"
