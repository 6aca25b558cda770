# Shared by scripts/run and scripts/test: make this machine able to build and run memfs.
# Idempotent: a second run only checks. Sourced, not executed.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MEMFS_VENV:-$REPO/.venv}"

ensure_debian_packages() {
    # pyfuse3 builds from source against libfuse3; the mount needs fusermount3 at run time.
    local missing=()
    command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
    pkg-config --exists fuse3 2>/dev/null || missing+=(libfuse3-dev)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    command -v setfattr >/dev/null 2>&1 || missing+=(attr)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    # tests run tools as unprivileged users, who cannot reach a python under /root: Debian's python3
    [ -x /usr/bin/python3 ] || missing+=(python3)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" != 0 ]; then
            echo "memfs: missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
            exit 1
        fi
        echo "memfs: installing Debian packages: ${missing[*]}" >&2
        apt_install_without_starting "${missing[@]}" \
            || { echo "memfs: installing ${missing[*]} failed" >&2; exit 1; }
    fi
}

apt_install_without_starting() {
    # apt-get install, with no service started by the packages (haproxy's and postgresql's would
    # run until the machine stops): a policy-rc.d that forbids starts, unless one is there already
    # (a container's own, which stays as it was).
    export DEBIAN_FRONTEND=noninteractive
    local policy=/usr/sbin/policy-rc.d had_policy=0 rc=0
    [ -e "$policy" ] && had_policy=1
    if [ "$had_policy" = 0 ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
    fi
    { apt-get update -q >/dev/null && apt-get install -y -q "$@" >/dev/null; } || rc=$?
    [ "$had_policy" = 1 ] || rm -f "$policy"
    return "$rc"
}

ensure_python() {
    local py
    py="$(command -v python3 || true)"
    if [ -z "$py" ] || ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "memfs: needs Python >= 3.11 as python3" >&2
        exit 1
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        echo "memfs: creating virtualenv $VENV" >&2
        "$py" -m venv "$VENV"
    fi
    # Reinstall only when the project's dependencies changed since the last install.
    local stamp="$VENV/.memfs-installed" want
    # The editable install is setuptools' "compat" mode: a .pth line with the checkout's path. The
    # default mode installs an import finder whose module (pathlib, re, importlib.util…) every
    # Python start of the venv imports from site: ~20 ms of each `memfs sync` hook process here,
    # which an installed wheel does not pay either.
    # bin/memfs is installed as a copy (setuptools script-files), so its changes need a reinstall too.
    want="$(cat "$REPO/pyproject.toml" "$REPO/bin/memfs" | sha256sum | cut -d' ' -f1) editable-compat"
    if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
        echo "memfs: installing memfs and its dependencies into $VENV" >&2
        "$VENV/bin/pip" install -q --disable-pip-version-check \
            --config-settings editable_mode=compat -e "$REPO[test]" 2>&1 \
            | grep -v "^WARNING: Location" >&2 || true
        "$VENV/bin/python" -c 'import memfs, pyfuse3, trio, httpx, starlette, uvicorn' \
            || { echo "memfs: the install failed" >&2; exit 1; }
        echo "$want" >"$stamp"
    fi
    export PATH="$VENV/bin:$PATH"
}

ensure_sdk_oldest() {
    # The oldest anthropic memfs[worker] supports, for the seam tests (scripts/test): a small venv
    # under the main one with only that SDK (and its dependencies) of its own; a .pth adds the main
    # venv's site-packages behind it, so memfs, pytest and the rest come from there unchanged.
    local sdk="anthropic==2.10.0" venv="$VENV/sdk-oldest"
    if [ "$(cat "$venv/.memfs-sdk" 2>/dev/null || true)" = "$sdk" ]; then
        return 0
    fi
    echo "memfs: making $venv with $sdk (the seam tests' oldest SDK)" >&2
    rm -rf "$venv"
    "$VENV/bin/python" -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$sdk" 2>&1 | grep -v "^WARNING: Location" >&2 || true
    local main own
    main="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    own="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "import site; site.addsitedir('$main')" >"$own/zz-memfs-main-venv.pth"
    "$venv/bin/python" -c 'import anthropic, memfs, pytest; assert anthropic.__version__ == "2.10.0"' \
        || { echo "memfs: the oldest-SDK venv $venv does not work" >&2; exit 1; }
    echo "$sdk" >"$venv/.memfs-sdk"
}

ensure_node_worker() {
    # The TypeScript worker package (workers/typescript) and its end-to-end test: npm (Debian's node
    # and npm when missing), then the package's dependencies from its package-lock.json, again only
    # when the lock file changed. They include Node 22 (the npm package `node`): the SDK's agent
    # toolset needs it, and Debian's node may be older.
    if ! command -v npm >/dev/null 2>&1; then
        if [ "$(id -u)" != 0 ]; then
            echo "memfs: npm is missing (run as root, or: sudo apt-get install nodejs npm)" >&2
            exit 1
        fi
        echo "memfs: installing Debian's nodejs and npm (for the TypeScript worker's test)" >&2
        apt_install_without_starting nodejs npm || { echo "memfs: installing nodejs/npm failed" >&2; exit 1; }
    fi
    local pkg="$REPO/workers/typescript" want
    want="$(sha256sum "$pkg/package-lock.json" | cut -d' ' -f1)"
    if [ "$(cat "$pkg/node_modules/.memfs-installed" 2>/dev/null || true)" != "$want" ]; then
        echo "memfs: npm ci in workers/typescript" >&2
        (cd "$pkg" && npm ci --no-audit --no-fund --loglevel=error >&2) \
            || { echo "memfs: npm ci in workers/typescript failed" >&2; exit 1; }
        echo "$want" >"$pkg/node_modules/.memfs-installed"
    fi
}

ensure_haproxy() {
    # docs/OPERATIONS.md's load balancer, run by tests/service/test_operations_doc.py (in /usr/sbin);
    # the tests' only, so not in ensure_debian_packages (which scripts/run calls too).
    if [ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "memfs: haproxy is missing (run as root, or: sudo apt-get install haproxy)" >&2
        exit 1
    fi
    echo "memfs: installing Debian's haproxy (for the operations doc's test)" >&2
    apt_install_without_starting haproxy || { echo "memfs: installing haproxy failed" >&2; exit 1; }
}

ensure_tinyproxy() {
    # The real forward proxy that tests/e2e/test_proxy.py starts as an unprivileged user (the
    # mount reaching its store only through HTTP(S)_PROXY); the tests' only, as haproxy.
    if [ -x /usr/bin/tinyproxy ] || command -v tinyproxy >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "memfs: tinyproxy is missing (run as root, or: sudo apt-get install tinyproxy)" >&2
        exit 1
    fi
    echo "memfs: installing Debian's tinyproxy (for the proxy tests)" >&2
    apt_install_without_starting tinyproxy || { echo "memfs: installing tinyproxy failed" >&2; exit 1; }
}

ensure_postgresql() {
    # The PostgreSQL backend's tests start a throwaway cluster (tests/support/postgres.py) with
    # Debian's initdb/pg_ctl. Installing the package must not leave the system cluster running:
    # apt_install_without_starting forbids starting services during the install (the package
    # still creates its "main" cluster on disk; nothing here starts it).
    if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "memfs: PostgreSQL is missing (run as root, or: sudo apt-get install postgresql)" >&2
        exit 1
    fi
    echo "memfs: installing Debian's postgresql (for the PostgreSQL backend's tests)" >&2
    local rc=0
    apt_install_without_starting postgresql || rc=$?
    [ "$rc" = 0 ] || { echo "memfs: installing postgresql failed (apt-get exit $rc)" >&2; exit 1; }
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null \
        || { echo "memfs: installing postgresql did not provide initdb" >&2; exit 1; }
}

ensure_fuse_device() {
    if [ ! -e /dev/fuse ]; then
        echo "memfs: /dev/fuse is missing: this machine (or container) cannot mount FUSE filesystems" >&2
        exit 1
    fi
}

ensure_chromium() {
    # The console's browser tests drive Debian's chromium through Playwright (no browser download).
    command -v chromium >/dev/null 2>&1 && return 0
    if [ "$(id -u)" != 0 ]; then
        echo "memfs: chromium is missing (run as root, or: sudo apt-get install chromium)" >&2
        exit 1
    fi
    echo "memfs: installing Debian's chromium (for the console's browser tests)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q chromium >/dev/null
}
