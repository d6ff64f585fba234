#!/usr/bin/env bash
# The one place that installs the browser the browser tests drive: Debian's
# chromium (playwright-core drives it; `playwright install` cannot download a
# browser here). As root it installs the package with apt when missing;
# otherwise it fails with one line naming what is missing.
set -euo pipefail
bin=${ONEJOB_CHROMIUM:-/usr/bin/chromium}
if [ -x "$bin" ]; then
	exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ -z "${ONEJOB_CHROMIUM:-}" ]; then
	echo "installing Debian's chromium for the browser tests (apt-get install chromium)" >&2
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q chromium >/dev/null; then
		apt-get update -q >/dev/null
		apt-get install -y -q chromium >/dev/null
	fi
	[ -x "$bin" ] && exit 0
fi
echo "the browser tests need Chromium at $bin: install Debian's chromium package (apt-get install chromium, as root) or point ONEJOB_CHROMIUM at one" >&2
exit 1
