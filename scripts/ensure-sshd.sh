#!/bin/sh
# Make OpenSSH's server available for the remote-run tests (tests/remote/test_remote.py starts its own
# sshd on 127.0.0.1 with keys made for the test). Installs Debian's `openssh-server` when sshd is
# missing and we are root; otherwise says so and exits 0, so `make test` carries on and the ssh
# tests skip with a clear reason.
set -eu

# sshd lives in /usr/sbin, which is not on every PATH (e.g. a non-login root shell).
if command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-sshd: sshd not found, installing Debian package 'openssh-server' with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # The package's postinst may try to start a system sshd (no init here): the tests never use
    # it, they start their own server. A failed install must not fail `make test` either.
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends openssh-server >/dev/null; }; then
        echo "ensure-sshd: apt-get could not install openssh-server; the ssh tests will be skipped"
    fi
    exit 0
fi

echo "ensure-sshd: sshd not found and not root (or no apt-get); the ssh tests will be skipped." \
     "Install it with: sudo apt-get install openssh-server"
exit 0
