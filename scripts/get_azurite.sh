#!/usr/bin/env bash
# Installs Azurite (the Azure Storage emulator, from npm) for the as:// repository tests, outside the
# repository: ${INFERD_AZURITE_DIR:-${TMPDIR:-/tmp}/inferd-azurite}. The tests find it there (or
# azurite-blob on PATH) and skip, saying why, when it is missing. Needs node and npm.
set -euo pipefail
dir="${INFERD_AZURITE_DIR:-${TMPDIR:-/tmp}/inferd-azurite}"
if [ -x "$dir/node_modules/.bin/azurite-blob" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "get_azurite.sh: npm not found: the Azure Blob repository tests will skip" >&2
  exit 1
fi
mkdir -p "$dir"
cd "$dir"
npm install --no-audit --no-fund --loglevel=error azurite@3 >&2
echo "Azurite installed in $dir" >&2
