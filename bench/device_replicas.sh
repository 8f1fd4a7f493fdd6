#!/usr/bin/env bash
# bench/bench_replicas.py on a bigger machine that has Python but not this project's dependencies:
# install the wheels carried in .whl/ into a private directory, make the checkout importable as
# `openfunctions` (the package-dir mapping of pyproject.toml, as symlinks), start a private PostgreSQL
# (pgserver's bundled binaries; as root, pgserver runs them as a system user `pgserver` it creates) and
# run the bench with 1, 2, 4 and 8 replicas. Everything it prints goes to $OUT too (bench.log, the
# markdown table in replicas.md, the machine in machine.txt).
#
#     bash bench/device_replicas.sh                      # the defaults below, about 4-5 minutes
#     bash bench/device_replicas.sh --replicas 1,2 --rounds 1 --seconds 1 --procs 2 --clients 4   # a smoke run
#
# Environment: OUT (default /tmp/of-device-out), OF_PYTHON (default python3), OF_WHEELS (default .whl),
# OF_SITE (where the wheels go, default /tmp/site), OF_SKIP_INSTALL=1 (use OF_PYTHON's own packages, e.g. a virtualenv
# that has them: OF_PYTHON=.venv/bin/python OF_SKIP_INSTALL=1), OF_TIMEOUT (seconds, default 540).
# Arguments replace the bench's defaults given here (later ones win).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${OF_PYTHON:-python3}
SITE=${OF_SITE:-/tmp/site}
OUT=${OUT:-/tmp/of-device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

if [ -z "${OF_SKIP_INSTALL:-}" ]; then
    WHEELS=${OF_WHEELS:-.whl}
    ls "$WHEELS"/*.whl >/dev/null  # the carried wheels (run with carry: [".whl"])
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl
    SITE_PATH="$SITE"
else
    SITE_PATH=""
fi

# `openfunctions.<part>` -> <checkout>/<part>, as pyproject.toml's [tool.setuptools.package-dir] maps them.
PKG=$(mktemp -d /tmp/ofpkg.XXXXXX)
mkdir "$PKG/openfunctions"
for part in core artifacts work servers adapters agents store memory rag providers workflows chat; do
    ln -s "$REPO/$part" "$PKG/openfunctions/$part"
done
export PYTHONPATH="$PKG${SITE_PATH:+:$SITE_PATH}${PYTHONPATH:+:$PYTHONPATH}"

# pgserver creates its system user with useradd when run as root; give it one where useradd is missing.
if [ "$(id -u)" = 0 ] && ! id pgserver >/dev/null 2>&1 && ! command -v useradd >/dev/null 2>&1; then
    echo "pgserver:x:1999:1999:pgserver:/tmp:/bin/sh" >>/etc/passwd
    echo "pgserver:x:1999:" >>/etc/group
fi

{
    echo "date: $(date -u +%FT%TZ)"
    echo "cores: $(nproc)"
    echo "python: $("$PY" -c 'import sys; print(sys.version.split()[0])')"
    uname -a
    "$PY" -c 'import openfunctions.servers, pydantic, mcp, psycopg, pgserver; print("imports ok: pydantic", pydantic.VERSION, "psycopg", psycopg.__version__)'
} 2>&1 | tee "$OUT/machine.txt"

set -o pipefail
timeout "${OF_TIMEOUT:-540}" "$PY" bench/bench_replicas.py --replicas 1,2,4,8 --procs 8 --clients 64 \
    --seconds 4 --warmup 1 --rounds 3 --out "$OUT/replicas.md" "$@" 2>&1 | tee "$OUT/bench.log"
rm -rf "$PKG"
