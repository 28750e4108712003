#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# rustfmt over the module's own Rust files with the kernel's .rustfmt.toml.
#   scripts/fmt.sh [--check] [KDIR]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
mode=()
if [ "${1:-}" = --check ]; then mode=(--check); shift; fi
kdir=${1:-$("$RODP_TOP/scripts/kernel.sh")}
src=$(readlink -f "$kdir/source" 2>/dev/null || echo "$kdir")
files=$(cd "$RODP_TOP" && git ls-files 'rust/*.rs' 'rust/**/*.rs' | grep -v generated)
cd "$RODP_TOP"
# The kernel formats with the nightly options of its .rustfmt.toml; stable rustfmt ignores
# those it does not know.
if rustfmt --edition 2021 --config-path "$src/.rustfmt.toml" "${mode[@]}" $files 2>/tmp/rodp-fmt.err; then
	if [ ${#mode[@]} -eq 0 ]; then log "rustfmt: formatted"; else log "rustfmt: clean"; fi
else
	grep -v '^Warning' /tmp/rodp-fmt.err >&2 || true
	die "rustfmt: files need formatting (run 'make fmt')"
fi
