#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Installs what rodp needs on a Debian 12 machine, idempotently: Debian packages, bindgen-cli
# and the linux-source-7.3 tree (fetched with a private apt state, leaving the machine's
# sources alone). Prints each tool's version once.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

pkgs=(rustc-web rust-web-src rust-web-clippy clang-19 lld-19 llvm-19 libclang-19-dev
      build-essential bc bison flex libelf-dev libssl-dev cpio kmod xz-utils pahole
      qemu-system-x86 mmdebstrap libibverbs-dev librdmacm-dev pkg-config rsync)

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# rustc-web must be the 1.96 pair (the kernel tree is built with it); an old one needs upgrading.
if [ ${#missing[@]} -eq 0 ] && ! /usr/bin/rustc --version | grep -q '^rustc 1\.9[6-9]'; then
	missing+=(rustc-web rust-web-src rust-web-clippy)
fi
if [ ${#missing[@]} -gt 0 ]; then
	log "installing Debian packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

# bindgen-cli: the kernel needs >= 0.71.1.
bg_ok() { command -v bindgen >/dev/null && bindgen --version | awk '{split($2,v,"."); exit !(v[1]>0 || v[2]>71 || (v[2]==71 && v[3]>=1))}'; }
if ! bg_ok; then
	log "installing bindgen-cli 0.72.1 from crates.io"
	cargo install --locked bindgen-cli --version 0.72.1 >/dev/null 2>&1 || die "cargo install bindgen-cli failed"
fi

# Kernel source from trixie-backports without touching /etc/apt.
src_root="$RODP_CACHE/src"
if [ ! -f "$src_root/.done" ]; then
	log "fetching $KVER_PKG from trixie-backports"
	apt_dir="$RODP_CACHE/apt"
	rm -rf "$apt_dir" "$src_root"
	mkdir -p "$apt_dir"/{state/lists/partial,cache/archives/partial,etc/preferences.d} "$src_root"
	cat >"$apt_dir/etc/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(debian_mirror) trixie-backports main
SRC
	aopt=(-o Dir::State="$apt_dir/state" -o Dir::Cache="$apt_dir/cache"
	      -o Dir::Etc::SourceList="$apt_dir/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
	      -o Dir::Etc::Preferences="$apt_dir/etc/preferences" -o Dir::Etc::PreferencesParts="$apt_dir/etc/preferences.d"
	      -o APT::Architecture=amd64 -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
	apt-get "${aopt[@]}" update -qq
	(cd "$apt_dir" && apt-get "${aopt[@]}" download "$KVER_PKG" >/dev/null)
	dpkg -x "$apt_dir"/"$KVER_PKG"_*.deb "$apt_dir/x"
	tar -C "$src_root" -xf "$apt_dir"/x/usr/src/"$KVER_PKG".tar.xz
	rm -rf "$apt_dir/x"
	touch "$src_root/.done"
fi

if [ ! -f "$RODP_CACHE/.versions-printed" ]; then
	/usr/bin/rustc --version
	bindgen --version
	clang-19 --version | head -1
	qemu-system-x86_64 --version | head -1
	mmdebstrap --version
	ls -d "$src_root"/linux-source-*
	touch "$RODP_CACHE/.versions-printed"
fi
