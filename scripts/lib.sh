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

# The Debian archive the machine's own apt configuration names (one-line or deb822 sources),
# security archives aside: scripts never write an address of their own.
debian_mirror() {
	local u
	u=$({ cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }'
	      cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '$1 == "URIs:" { print $2 }'
	    } | grep -v -- '-security' | head -1)
	[ -n "$u" ] || die "no Debian archive in the machine's apt configuration"
	echo "${u%/}"
}
