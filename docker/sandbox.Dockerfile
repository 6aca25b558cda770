# The agent's sandbox: memfs mounts the session's memory stores at /mnt/memory, then the agent's
# command runs as the unprivileged user `agent` (docker/entrypoint.sh). See docs/OPERATIONS.md.
#
# Build context: the docker/ folder, holding dist/ with memfs's wheel (and, for an offline build,
# every dependency as a wheel or sdist):
#   pip wheel --no-deps -w docker/dist .
#   docker build -f docker/sandbox.Dockerfile -t memfs-sandbox docker/
# Build arguments:
#   BASE_IMAGE  any Debian bookworm image; Python >= 3.11 as python3 is used when the image has one
#               (python:3.11-slim-bookworm), else Debian's python3 (3.11) is installed (a bare
#               debootstrapped bookworm works).
#   PIP_OPTIONS  more options for pip: "--index-url URL" for a mirror, "--no-index" to install from
#               docker/dist/ alone (every dependency there; scripts/test-container builds so).
# Only Debian's apt and pip's index are contacted, and only while building. The legacy builder and
# BuildKit both build this file (no heredocs, no RUN --mount). Few instructions on purpose: with the
# vfs storage driver every instruction, even ENV, copies the whole image (about 20 s each).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# -- build: a virtualenv with memfs and pyfuse3 compiled against this base's Python and libfuse3.
#    Only what the sandbox uses: memfs (the mount, the client, the commands) and its `worker` extra
#    (the SDK, for the worker mode); not the store service's stack (`memfs[serve]`).
#    /wheels keeps every wheel used (pyfuse3's included): a later build may put them in dist/.
FROM ${BASE_IMAGE} AS build
RUN set -eu; \
    export DEBIAN_FRONTEND=noninteractive; \
    pkgs="gcc libc6-dev libfuse3-dev pkg-config"; \
    if ! python3 -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
        pkgs="$pkgs python3 python3-dev python3-venv"; \
    fi; \
    apt-get update -q; \
    apt-get install -y -q --no-install-recommends $pkgs; \
    rm -rf /var/lib/apt/lists/*
ARG PIP_OPTIONS=""
COPY dist/ entrypoint.sh /dist/
RUN set -eu; \
    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1; \
    python3 -m venv /opt/memfs; \
    wheel="$(ls /dist/memfs-*.whl | sort -V | tail -n 1)"; \
    /opt/memfs/bin/pip wheel -q $PIP_OPTIONS --find-links /dist -w /wheels "$wheel[worker]"; \
    /opt/memfs/bin/pip install -q --no-index --find-links /wheels "$wheel[worker]"; \
    /opt/memfs/bin/python -c 'import memfs, pyfuse3, trio, httpx, anthropic, memfs.worker.tools, memfs.session.commands'; \
    ! /opt/memfs/bin/python -c 'import starlette' 2>/dev/null; \
    /opt/memfs/bin/memfs --help >/dev/null; \
    install -m 0755 /dist/entrypoint.sh /opt/memfs/bin/memfs-sandbox-entrypoint

# -- the sandbox ----------------------------------------------------------------------------------
FROM ${BASE_IMAGE}
# fuse3: libfuse3 for pyfuse3 and fusermount3 (memfs clears a dead mount with it). python3 only when
# the base has none. user `agent` (uid/gid 1000) runs the agent's command. /var/lib/memfs holds the
# state dir (staged changes): root only; put a volume there to keep it across a crash.
RUN set -eu; \
    export DEBIAN_FRONTEND=noninteractive; \
    pkgs="fuse3"; \
    if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then pkgs="$pkgs python3"; fi; \
    apt-get update -q; \
    apt-get install -y -q --no-install-recommends $pkgs; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb; \
    groupadd --gid 1000 agent; \
    useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash agent; \
    mkdir -p /mnt/memory /var/lib/memfs; \
    chmod 0755 /mnt/memory; \
    chmod 0700 /var/lib/memfs; \
    ln -s /opt/memfs/bin/memfs /usr/local/bin/memfs
COPY --from=build /opt/memfs /opt/memfs
# No command given: the agent's command is `sleep infinity` (a worker then runs tool calls with
# docker exec). docker stop sends SIGTERM: the entrypoint stops the agent's command, runs the final
# sync and unmounts. Give it time: docker stop -t 40 (agent grace 5 s + final sync bounded by 30 s).
# Worker mode (MEMFS_MODE=worker; docker/spawn-worker-sandbox.sh starts one per work item): the
# command is `memfs worker`, the official EnvironmentWorker for one work item, run as `agent`; its
# final sync runs before the unmount's: stop timeout 75 s (worker grace 40 s + unmount 30 s).
ENTRYPOINT ["/opt/memfs/bin/memfs-sandbox-entrypoint"]
