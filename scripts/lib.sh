# SPDX-License-Identifier: GPL-2.0
# Shared settings for rodp's scripts: cache locations and the toolchain every step uses.

RODP_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RODP_CACHE=${RODP_CACHE:-/var/cache/rodp}
KVER_PKG=linux-source-7.3
LLVM_SUFFIX=-19
export RUSTC=/usr/bin/rustc
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '[rodp] %s\n' "$*" >&2; }
die() { printf '[rodp] error: %s\n' "$*" >&2; exit 1; }
