#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Builds the test kernel once per (source version, config, compiler) and prints its build dir.
# Base: allnoconfig + kvm_guest.config + selftests/config, every requested option verified.
#   scripts/kernel.sh          the test kernel (KASAN, lockdep and the other debug options)
#   scripts/kernel.sh bench    the same without the debug options, for `make bench`
#   scripts/kernel.sh --lookup [test|bench]
#                              only looks: prints the build dir if that kernel is built, else
#                              nothing (status 0 either way); never builds (`make clean`)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

lookup=0
if [ "${1:-}" = --lookup ]; then
	lookup=1
	shift
fi
flavor=${1:-test}
case $flavor in
test|bench) ;;
*) die "usage: kernel.sh [--lookup] [test|bench]" ;;
esac
# The config fragment of this flavor, applied on top of kvm_guest.config.
fragment() {
	case $flavor in
	test) cat "$RODP_TOP/selftests/config" ;;
	bench) grep -Ev '^CONFIG_(KASAN[A-Z_]*|PROVE_LOCKING|DEBUG_KERNEL|DEBUG_ATOMIC_SLEEP|DEBUG_LIST|DEBUG_OBJECTS[A-Z_]*|SLUB_DEBUG|DEBUG_KMEMLEAK[A-Z_]*)=' \
		"$RODP_TOP/selftests/config" ;;
	esac
}

src=$(ls -d "$RODP_CACHE"/src/linux-source-* 2>/dev/null | head -1) || true
if [ ! -d "$src" ]; then
	[ $lookup -eq 0 ] || exit 0
	die "no kernel source; run scripts/setup.sh"
fi
if ! key=$( { head -5 "$src/Makefile"; cat "$src/kernel/configs/kvm_guest.config"; fragment;
	      /usr/bin/rustc --version; clang-19 --version | head -1; bindgen --version; } |
	    sha256sum | cut -c1-16); then
	[ $lookup -eq 0 ] || exit 0
	die "toolchain incomplete (rustc, clang-19, bindgen); run scripts/setup.sh"
fi
prefix=kbuild-
[ "$flavor" = test ] || prefix=kbuild-$flavor-
out="$RODP_CACHE/$prefix$key"
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi
[ $lookup -eq 0 ] || exit 0

exec 9>"$RODP_CACHE/kernel.lock"
flock 9 # never two kernel builds at once
if [ -f "$out/.done" ]; then echo "$out"; exit 0; fi

frag="$RODP_CACHE/config.$flavor"
fragment > "$frag"
log "building kernel in $out (cold build, about 20 min on 2 cores)"
mkdir -p "$out"
kmake=(make -C "$src" O="$out" LLVM="$LLVM_SUFFIX" RUSTC="$RUSTC" -j"$(nproc)")
cat "$src/kernel/configs/kvm_guest.config" "$frag" > "$out/allno.config"
KCONFIG_ALLCONFIG="$out/allno.config" "${kmake[@]}" -s allnoconfig >&2
bad=0
while IFS= read -r line; do
	case "$line" in CONFIG_*=*) ;; *) continue ;; esac
	grep -qx -- "$line" "$out/.config" || { log "config: $line did not hold"; bad=1; }
done < "$frag"
[ $bad -eq 0 ] || die "kernel config incomplete (see above)"
start=$(date +%s)
"${kmake[@]}" bzImage modules >&2
"${kmake[@]}" -s INSTALL_MOD_PATH="$out/modinst" modules_install >&2
log "kernel built in $(( $(date +%s) - start )) s"
touch "$out/.done"
# Keep only the newest build of each flavor so the cache does not grow without bound.
for old in "$RODP_CACHE/$prefix"*; do
	case ${old#"$RODP_CACHE/$prefix"} in *-*) continue ;; esac
	[ "$old" = "$out" ] || rm -rf "$old"
done
echo "$out"
