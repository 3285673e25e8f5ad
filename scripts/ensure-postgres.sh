#!/bin/sh
# Make PostgreSQL's server programs available for the store tests (tests/store/: the same tests run
# against SQLite and a private PostgreSQL server the tests start on 127.0.0.1, tests/store_fixtures.py).
# Installs Debian's `postgresql` when initdb is missing and we are root; otherwise says so and exits 0,
# so `make test` carries on and the PostgreSQL half of the store tests skips with a clear reason.
# Debian keeps initdb and postgres in /usr/lib/postgresql/<version>/bin, off PATH: the fixture looks there.
set -eu

if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-postgres: initdb not found, installing Debian package 'postgresql' with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # The package's postinst creates and tries to start a system cluster (no init here): the tests never
    # use it, they start their own server. A failed install must not fail `make test` either.
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }; then
        echo "ensure-postgres: apt-get could not install postgresql; the PostgreSQL store tests will be skipped"
    fi
    exit 0
fi

echo "ensure-postgres: initdb not found and not root (or no apt-get); the PostgreSQL store tests will be" \
     "skipped. Install it with: sudo apt-get install postgresql"
exit 0
