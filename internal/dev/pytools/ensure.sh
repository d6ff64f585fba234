#!/usr/bin/env bash
# The Python tools of requirements.txt (moto_server, cfn-lint) for make test:
# found on PATH or in the checkout's virtual environment (.local/venv, where
# internal/dev/testenv.PythonTool looks too); else installed there when the
# Python package index answers within a few seconds; else one line saying
# what to install.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
venv=$root/.local/venv
tools=(moto_server cfn-lint)
missing=()
for t in "${tools[@]}"; do
	command -v "$t" >/dev/null 2>&1 || [ -x "$venv/bin/$t" ] || missing+=("$t")
done
[ ${#missing[@]} -eq 0 ] && exit 0

need="${missing[*]} missing: pip install -r requirements.txt (moto[server]==5.2.1, cfn-lint==1.51.0)"
command -v python3 >/dev/null 2>&1 || { echo "$need, with Python 3 and pip installed first" >&2; exit 1; }
# The index pip would use: PIP_INDEX_URL, pip's configuration, or PyPI.
index=${PIP_INDEX_URL:-$(python3 -m pip config get global.index-url 2>/dev/null || true)}
index=${index:-https://pypi.org/simple/}
# A quick probe (5 s at most, DNS included): without an index, pip would
# retry for minutes before failing.
if ! timeout 5 python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=4)' "$index" >/dev/null 2>&1; then
	echo "$need (the Python package index $index does not answer, so make test cannot install them into .local/venv)" >&2
	exit 1
fi
echo "installing ${missing[*]} from requirements.txt into .local/venv" >&2
log=$root/.local/python-tools.log
mkdir -p "$root/.local"
if ! { python3 -m venv "$venv" && "$venv/bin/pip" install --disable-pip-version-check -r "$root/requirements.txt"; } >"$log" 2>&1; then
	echo "$need (installing them into .local/venv failed; see .local/python-tools.log; Debian needs python3-venv)" >&2
	exit 1
fi
