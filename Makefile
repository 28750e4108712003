# SPDX-License-Identifier: GPL-2.0
# rodp: `make` builds rodp.ko against KDIR (default: the cached test kernel); `make run` boots a
# guest with rodp0; `make check` runs every test in the guest.

# Evaluated once, on first use: asking scripts/kernel.sh builds the kernel if it is missing.
ifeq ($(origin KDIR),undefined)
KDIR = $(eval KDIR := $$(shell scripts/kernel.sh))$(KDIR)
endif
LLVM ?= -19
RUSTC ?= /usr/bin/rustc
export PATH := $(HOME)/.cargo/bin:$(PATH)
KMAKE = $(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) RUSTC=$(RUSTC)

.PHONY: all modules clean setup kernel rootfs selftests run check bench fmt fmt-check

all: modules

modules:
	@test -n "$(KDIR)" || { echo "no kernel: run 'make setup kernel' or pass KDIR=" >&2; exit 1; }
	$(KMAKE) modules

clean:
	@test -z "$(KDIR)" || $(KMAKE) clean
	$(MAKE) -C selftests clean

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

# A benchmark, not a test: perftest on rxe then rodp in one guest boot, with ratios.
bench:
	scripts/run.sh bench
