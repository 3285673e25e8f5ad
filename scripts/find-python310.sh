#!/usr/bin/env bash
# Prints the path of a working CPython 3.10 interpreter, or explains what to install.
# MegEngine 1.13 ships wheels for CPython 3.6-3.10 only, so the project's venv must be 3.10.
set -u
works() { "$1" -c 'import sys, venv; sys.exit(0 if sys.version_info[:2] == (3, 10) else 1)' >/dev/null 2>&1; }

if [ -n "${LAR_PREC_PYTHON:-}" ]; then
  if works "$LAR_PREC_PYTHON"; then echo "$LAR_PREC_PYTHON"; exit 0; fi
  echo "Error: LAR_PREC_PYTHON=$LAR_PREC_PYTHON is not a working CPython 3.10 with venv" >&2; exit 1
fi
# A python3.10 on PATH may be a pyenv shim that refuses to run: resolve it to a real file first.
for cand in python3.10 /usr/bin/python3.10 /usr/local/bin/python3.10; do
  p=$(command -v "$cand" 2>/dev/null) || continue
  if works "$p"; then
    real=$("$p" -c 'import sys; print(sys.executable)' 2>/dev/null)
    echo "${real:-$p}"; exit 0
  fi
done
if command -v pyenv >/dev/null 2>&1; then
  for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.10(\.[0-9]+)?$' | sort -t. -k3,3nr); do
    prefix=$(pyenv prefix "$v" 2>/dev/null) || continue
    if works "$prefix/bin/python3.10"; then echo "$prefix/bin/python3.10"; exit 0; fi
  done
fi
for p in "$HOME"/.pyenv/versions/3.10*/bin/python3.10 /opt/python*/3.10*/bin/python3.10; do
  if [ -x "$p" ] && works "$p"; then echo "$p"; exit 0; fi
done
echo "Error: no working Python 3.10 found. MegEngine 1.13 wheels exist only for CPython 3.6-3.10; install 3.10 (e.g. 'pyenv install 3.10.13' or 'apt-get install python3.10 python3.10-venv') or set LAR_PREC_PYTHON=/path/to/python3.10" >&2
exit 1
