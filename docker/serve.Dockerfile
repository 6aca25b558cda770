# The reference store service, `memfs serve`, on SQLite (default) or PostgreSQL. See docs/OPERATIONS.md.
#
# Same build context and arguments as docker/sandbox.Dockerfile:
#   pip wheel --no-deps -w docker/dist .
#   docker build -f docker/serve.Dockerfile -t memfs-serve docker/
#   docker run -d --name memfs-serve -p 127.0.0.1:8470:8470 -v memfs-data:/data \
#       -e MEMFS_ADMIN_KEY="$(cat admin-key)" memfs-serve
# The database: MEMFS_DB, a SQLite path (default /data/store.db, in the volume /data) or a
# PostgreSQL URL (-e MEMFS_DB=postgresql://memfs:PASSWORD@db/memfs; then /data holds nothing and
# any number of containers may share the database). More `memfs serve` flags go after the image
# name: `memfs-serve --rate-limit 20 --certfile /certs/tls.crt --keyfile /certs/tls.key`.
# The service does not mount anything, so it needs neither FUSE nor pyfuse3 (a compiler): memfs is
# installed without its pyfuse3 dependency. The process runs as the unprivileged user `memfs`
# (uid 1001).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
ARG PIP_OPTIONS=""
COPY dist/ /dist/
RUN set -eu; \
    export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1; \
    if ! python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
        apt-get update -q; \
        apt-get install -y -q --no-install-recommends python3 python3-venv; \
        rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb; \
    fi; \
    python3 -m venv /opt/memfs; \
    wheel="$(ls /dist/memfs-*.whl | sort -V | tail -n 1)"; \
    /opt/memfs/bin/pip install -q $PIP_OPTIONS --no-deps "$wheel"; \
    reqs="$(/opt/memfs/bin/python -c 'import importlib.metadata as m, re; print("\n".join(r.split(";")[0] for r in m.requires("memfs") if ("extra ==" not in r or "extra == \"serve\"" in r) and re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() != "pyfuse3"))')"; \
    echo "$reqs" | tr '\n' '\0' | xargs -0 /opt/memfs/bin/pip install -q $PIP_OPTIONS --find-links /dist; \
    /opt/memfs/bin/python -c 'import memfs.service.commands, starlette, uvicorn, trio, httpx'; \
    ln -s /opt/memfs/bin/memfs /usr/local/bin/memfs; \
    rm -rf /dist; \
    groupadd --gid 1001 memfs; \
    useradd --uid 1001 --gid 1001 --no-create-home --home-dir /data --shell /usr/sbin/nologin memfs; \
    mkdir -p /data; \
    chown memfs:memfs /data
USER memfs
ENV MEMFS_DB=/data/store.db
# --host 0.0.0.0 inside the container; publish the port on the host's loopback (or a private
# network) only. The admin key comes from MEMFS_ADMIN_KEY; without it one is generated and printed.
# `--db` is not given here: memfs serve reads MEMFS_DB (tests/service/test_operations.py runs this
# line, with a PostgreSQL URL, outside Docker).
ENTRYPOINT ["memfs", "serve", "--host", "0.0.0.0", "--port", "8470"]
