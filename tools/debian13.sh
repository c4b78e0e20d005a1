#!/usr/bin/env bash
# Debian 13 (trixie) roots: tools/debian-root.sh trixie ARGS (see its header). Kept so that older
# command lines (tools/debian13.sh cpu --shell, ...) keep working.
exec "$(dirname "$0")/debian-root.sh" trixie "$@"
