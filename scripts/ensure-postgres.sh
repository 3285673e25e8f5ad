#!/bin/sh
# Make PostgreSQL's server programs available for the store tests (tests/store/: the same tests run
# against SQLite and a private PostgreSQL server the tests start on 127.0.0.1, tests/pg_server.py).
# Installs Debian's `postgresql` when initdb is missing and we are root; otherwise says so and exits 0,
# so `make test` carries on and the PostgreSQL half of the store tests skips with a clear reason.
# Debian keeps initdb and postgres in /usr/lib/postgresql/<version>/bin, off PATH: the tests look there.
set -eu

have_initdb() {
    command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

if have_initdb; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-postgres: initdb not found, installing Debian package 'postgresql' with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # The package's postinst creates a system cluster and starts it (invoke-rc.d ... start || exit 1):
    # where that start fails (no init system) the install fails, elsewhere a server stays on port 5432.
    # The tests never use it (they start their own), so a policy-rc.d that denies every service start is
    # in place during the install, as container images have one (one already there is kept).
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        trap 'rm -f "$policy"' EXIT
        trap 'exit 130' INT TERM
        printf '#!/bin/sh\n# ensure-postgres.sh: no service starts during its apt-get install\nexit 101\n' > "$policy"
        chmod 755 "$policy"
    fi
    # A failed install must not fail `make test` either.
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }; then
        echo "ensure-postgres: apt-get could not install postgresql"
    fi
    if have_initdb; then
        echo "ensure-postgres: installed $(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -n 1)"
    else
        echo "ensure-postgres: initdb still missing; the PostgreSQL store tests will be skipped"
    fi
    exit 0
fi

echo "ensure-postgres: initdb not found and not root (or no apt-get); the PostgreSQL store tests will be" \
     "skipped. Install it with: sudo apt-get install postgresql"
exit 0
