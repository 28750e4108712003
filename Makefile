# SPDX-License-Identifier: GPL-2.0
# rodp: `make` builds rodp.ko against KDIR (default: the cached test kernel); `make run` boots a
# guest with rodp0; `make check` runs every test in the guest, then the two-guest tests.

# Evaluated once, on first use: asking scripts/kernel.sh builds the kernel if it is missing.
# KDIR_BUILT only looks (empty when that kernel is not built): for what must never start a
# kernel build (clean).
ifeq ($(origin KDIR),undefined)
KDIR = $(eval KDIR := $$(shell scripts/kernel.sh))$(KDIR)
KDIR_BUILT = $(eval KDIR_BUILT := $$(shell scripts/kernel.sh --lookup))$(KDIR_BUILT)
else
KDIR_BUILT = $(KDIR)
endif
LLVM ?= -19
RUSTC ?= /usr/bin/rustc
# The module always builds under the kernel's clippy (CLIPPY=1; Kbuild's -Dwarnings denies its
# warnings): the driver of the same toolchain as RUSTC (Debian's rust-web-clippy).
CLIPPY_DRIVER ?= /usr/bin/clippy-driver
export PATH := $(HOME)/.cargo/bin:$(PATH)
kmake = $(MAKE) -C $(1) M=$(CURDIR) LLVM=$(LLVM) RUSTC=$(RUSTC) CLIPPY=1 \
	CLIPPY_DRIVER=$(CLIPPY_DRIVER)
KMAKE = $(call kmake,$(KDIR))
# What a module build leaves in this tree (.gitignore lists the same): without a kernel build
# to run Kbuild's clean, clean removes these by name.
MODULE_OUTPUTS := *.o *.ko *.mod *.mod.c *.cmd *.a *.d modules.order Module.symvers \
	bindings_generated.rs helpers_generated.rs
clean_module = $(if $(KDIR_BUILT),$(call kmake,$(KDIR_BUILT)) clean,find . -name .git -prune \
	-o -name selftests -prune -o -type f \( $(foreach f,$(MODULE_OUTPUTS),-name '$(f)' -o) \
	-false \) -exec rm -f {} +)

.PHONY: all modules clean setup kernel rootfs selftests run check check2 bench fmt fmt-check

all: modules

modules:
	@test -n "$(KDIR)" || { echo "no kernel: run 'make setup kernel' or pass KDIR=" >&2; exit 1; }
	$(KMAKE) modules

clean:
	$(clean_module)
	$(MAKE) -C selftests KDIR=$(KDIR_BUILT) clean

setup:
	scripts/setup.sh

kernel: setup
	scripts/kernel.sh

rootfs: setup
	scripts/rootfs.sh

selftests:
	$(MAKE) -C selftests KDIR=$(KDIR)

fmt:
	scripts/fmt.sh $(KDIR)

fmt-check:
	scripts/fmt.sh --check $(KDIR)

run:
	scripts/run.sh demo

check:
	scripts/run.sh check

# Only the two-guest phase of check (two QEMU guests linked by one virtio-net NIC each).
check2:
	scripts/run.sh check2

# A benchmark, not a test: perftest on rxe then rodp in one guest boot, with ratios.
bench:
	scripts/run.sh bench
