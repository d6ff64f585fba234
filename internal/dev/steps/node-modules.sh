#!/usr/bin/env bash
# node_modules from the committed lock (npm ci), once per machine: the tree
# npm ci builds for a given package.json, package-lock.json and platform is
# kept outside the clone (ONEJOB_CACHE_DIR, else the user's cache directory
# /onejob, as the Runtime Interface Emulator's cache) and copied into a fresh
# clone, which then skips the 20-40 s of unpacking. The key is the two files'
# content and the platform, so a changed lock always runs npm ci again; a
# cache entry appears only whole (written beside, then renamed), and nothing
# reads it in place, so no tool can change it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
npm=${NPM:-npm}
key=$(cat package.json package-lock.json | sha256sum | cut -c1-16)
base=${ONEJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/onejob}/node_modules
entry=$base/$key-$(uname -s)_$(uname -m)
if [ -f "$entry/complete" ]; then
	rm -rf node_modules
	cp -a "$entry/node_modules" node_modules.new
	mv node_modules.new node_modules
	# Newer than the lock, so make does not copy it again.
	touch node_modules/.package-lock.json
	echo "node_modules: npm ci's tree for this lock, from $entry"
else
	"$npm" ci --no-audit --no-fund --loglevel=error
	# Storing is best effort: a full or read-only cache costs only speed.
	if mkdir -p "$base" 2>/dev/null && tmp=$(mktemp -d "$base/.new.XXXXXX" 2>/dev/null); then
		if cp -a node_modules "$tmp/node_modules" && touch "$tmp/complete" && mv -T "$tmp" "$entry" 2>/dev/null; then
			echo "node_modules: kept in $entry for the next clone"
		else
			rm -rf "$tmp"
		fi
	fi
fi
# The go.mod marker keeps `go ... ./...` out of node_modules.
echo 'module ignored' > node_modules/go.mod
