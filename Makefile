# zot-host build, test and benchmark entry points.
#
#   make build      release build of the library and the `zot` binary
#   make test       the test suite, after installing what it needs (.ci/setup)
#   make static     stripped, statically linked `zot` at target/zot-static,
#                   and without the default features at target/zot-static-minimal
#   make bench-ext  the native benchmark extension (fixtures/bench-ext)
#   make bench      all of the above in release mode, then the benchmark
#   make bench-pinned  the same, all of it pinned to one CPU (taskset -c 0)
#   make soak       bounded endurance run of the release zot (README: Soak)
#   make clean      cargo clean (also removes the fixture build)
#   make demo       the interactive session with the example extensions

CARGO ?= cargo

# Where the static binaries end up, whatever toolchain produced them:
# the default build, and the minimal one (--no-default-features).
STATIC_BIN := target/zot-static
STATIC_MINIMAL_BIN := target/zot-static-minimal
MUSL_TARGET := x86_64-unknown-linux-musl
GNU_TARGET := x86_64-unknown-linux-gnu

# The benchmark extension is its own crate (not a workspace member);
# its build goes under target/ so one `cargo clean` removes everything.
# It is built static for musl where that target is installed: glibc's
# start-up probes the CPU with dozens of CPUID instructions, each a trap
# on a virtual machine (about 20 us on the 2-vCPU VM of README
# Performance), so a glibc extension spent about 1.5 ms of CPU starting
# and startup20 timed mostly that. musl starts in a tenth of it; a call
# costs the same instructions in both.
BENCH_EXT_DIR := fixtures/bench-ext
BENCH_EXT_TARGET := target/bench-ext
BENCH_EXT_BIN := $(BENCH_EXT_TARGET)/release/zot-bench-ext

.PHONY: all build test static bench-ext bench bench-pinned soak loc clean

all: build

build:
	$(CARGO) build --release

# The suite needs more than Rust (python3, git, node, jq, the MCP SDKs):
# .ci/setup installs what is missing, as CI does, and prints where the
# SDKs are. The suite starts its library hosts inline (the test's calls
# run the loop); the files that start one (tests/common's start_host,
# through start, start_with, start_ready, start_one or both) then run again with
# ZOT_TEST_HOST=threaded, the loop on a thread of its own. The CLI tests
# do not start one: they run once.
HOST_START := (^|[^:.[:alnum:]_]|common::)(start|start_with|start_host|start_ready|start_one|both)\(
HOST_TESTS = $(shell grep -E '$(HOST_START)' tests/*.rs | grep -v 'fn ' | cut -d: -f1 | sort -u \
	| xargs -n1 basename -s .rs | sed 's/^/--test /')

test:
	@deps=$$(.ci/setup) && ZOT_MCP_DEPS="$$deps" $(CARGO) test && \
		ZOT_MCP_DEPS="$$deps" ZOT_TEST_HOST=threaded $(CARGO) test $(HOST_TESTS)

# Static binaries (the default build, then the minimal one), each with
# the first route that works here:
#   1. stable musl (`rustup target add` when the target is missing);
#   2. stable glibc with crt-static;
# both at opt-level z and non-PIE (relocation-model=static drops the
# self-relocation tables a static PIE carries), generated and linked for
# size as below. Before them, a nightly toolchain is tried when one is
# installed with rust-src and the musl target (STATIC_NIGHTLY=auto, the
# default; =yes installs what is missing, =no skips it): the musl target
# with std rebuilt for size (-Z build-std), which leaves out std's
# backtrace symbolizer and the unwinder that a stable std always links
# although a static build has no unwind tables to use them (about a fifth
# of the binary). Each route uses its own target dir so none disturbs
# `make build`; each says which built the binary. The release profile
# strips symbols.
# Whether the result is really static is reported by `make bench`
# (`bench binary static=... minimal_static=...`, read from the ELF headers),
# with the route that built each (`route=`, from target/zot-static*.route).
STATIC_NIGHTLY ?= auto
STATIC_OPT := --config 'profile.release.opt-level="z"'
# The unwind tables (.eh_frame, its index, .gcc_except_table: about
# 165 KB) serve only unwinding and backtraces; with panic = "abort"
# nothing unwinds, so the static builds drop them at link time (a
# panic's message is still printed, without a backtrace). crtbegin's
# and crtend's own entries stay: crtbegin refers to them. One segment
# per permission instead of page-aligned code separation saves the padding.
STATIC_LDSCRIPT := $(CURDIR)/target/static-no-unwind.ld
STATIC_LINK := -C link-arg=-Wl,--no-eh-frame-hdr -C link-arg=-Wl,-T,$(STATIC_LDSCRIPT) \
	-C link-arg=-Wl,-z,noseparate-code
# Code generation for size (the static builds are built for size, not
# speed): LLVM's machine outliner turns instruction sequences repeated
# across functions into shared calls (about 35 KB, a call and a return
# each time one runs), and loops are not padded to 16-byte boundaries
# (std's own code, compiled for speed, pads them: about 5 KB).
STATIC_CODEGEN := -C llvm-args=-enable-machine-outliner=always -C llvm-args=-align-loops=1
STATIC_RUSTFLAGS := -C relocation-model=static $(STATIC_LINK) $(STATIC_CODEGEN)
STATIC_STD := -Z build-std=std,panic_abort -Z build-std-features=optimize_for_size

# `lld_flags RUSTC...` prints the flags that link with the rust-lld of the
# toolchain that RUSTC... runs (every toolchain ships one): cc runs it with
# -fuse-ld=lld once -B points at its gcc-ld wrapper. It folds identical
# functions (--icf=all, about 10 KB) and, at -O2, merges string constants
# that are the tail of another (about 200 bytes); without it the default
# linker links.
static:
	@set -e; mkdir -p target; \
	lld_flags() { d="$$("$$@" --print sysroot)/lib/rustlib/$$("$$@" -vV | sed -n 's/^host: //p')/bin/gcc-ld"; \
		[ ! -x "$$d/ld.lld" ] || echo "-C link-arg=-B$$d -C link-arg=-fuse-ld=lld -C link-arg=-Wl,--icf=all -C link-arg=-Wl,-O2"; }; \
	printf '%s\n' 'SECTIONS { /DISCARD/ : { EXCLUDE_FILE(*crtbegin*.o *crtend*.o)' \
		'*(.eh_frame) *(.gcc_except_table*) } }' 'INSERT AFTER .text;' > $(STATIC_LDSCRIPT); \
	for build in full minimal; do \
		if [ $$build = full ]; then out=$(STATIC_BIN); features=; \
		else out=$(STATIC_MINIMAL_BIN); features=--no-default-features; fi; \
		rm -f $$out $$out.route; \
		if [ "$(STATIC_NIGHTLY)" = yes ] && rustup run nightly rustc --version >/dev/null 2>&1; then \
			rustup component list --toolchain nightly --installed | grep -q '^rust-src' || \
				rustup component add --toolchain nightly rust-src || true; \
			rustup target list --toolchain nightly --installed | grep -qx '$(MUSL_TARGET)' || \
				rustup target add --toolchain nightly $(MUSL_TARGET) || true; \
		fi; \
		if [ "$(STATIC_NIGHTLY)" != no ] && rustup run nightly rustc --version >/dev/null 2>&1 && \
			rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src' && \
			rustup target list --toolchain nightly --installed 2>/dev/null | grep -qx '$(MUSL_TARGET)'; then \
			if RUSTFLAGS="$(STATIC_RUSTFLAGS) $$(lld_flags rustup run nightly rustc)" $(CARGO) +nightly build --release --bin zot $$features \
				--target $(MUSL_TARGET) --target-dir target/static-nightly $(STATIC_OPT) $(STATIC_STD); then \
				cp target/static-nightly/$(MUSL_TARGET)/release/zot $$out; echo nightly-build-std > $$out.route; \
				echo "static: $$build built with nightly -Z build-std for $(MUSL_TARGET)"; \
			else echo "static: nightly build-std failed, trying stable"; fi; \
		fi; \
		if [ ! -f $$out ]; then \
			rustup target list --installed 2>/dev/null | grep -qx '$(MUSL_TARGET)' || \
				rustup target add $(MUSL_TARGET) || true; \
			if RUSTFLAGS="$(STATIC_RUSTFLAGS) $$(lld_flags rustc)" $(CARGO) build --release --bin zot $$features \
				--target $(MUSL_TARGET) --target-dir target/static $(STATIC_OPT); then \
				cp target/static/$(MUSL_TARGET)/release/zot $$out; echo stable-musl > $$out.route; \
				echo "static: $$build built with stable for $(MUSL_TARGET)"; \
			else echo "static: musl build failed, falling back to static glibc"; fi; \
		fi; \
		if [ ! -f $$out ]; then \
			RUSTFLAGS="-C target-feature=+crt-static $(STATIC_RUSTFLAGS) $$(lld_flags rustc)" $(CARGO) build --release --bin zot \
				$$features --target $(GNU_TARGET) --target-dir target/static $(STATIC_OPT); \
			cp target/static/$(GNU_TARGET)/release/zot $$out; echo stable-glibc > $$out.route; \
			echo "static: $$build built with stable for $(GNU_TARGET) (crt-static)"; \
		fi; \
	done; \
	ls -l $(STATIC_BIN) $(STATIC_MINIMAL_BIN)

bench-ext:
	@if rustup target list --installed 2>/dev/null | grep -qx '$(MUSL_TARGET)' && \
		$(CARGO) build --release --manifest-path $(BENCH_EXT_DIR)/Cargo.toml \
			--target $(MUSL_TARGET) --target-dir $(BENCH_EXT_TARGET); then \
		mkdir -p $(dir $(BENCH_EXT_BIN)) && \
		cp $(BENCH_EXT_TARGET)/$(MUSL_TARGET)/release/zot-bench-ext $(BENCH_EXT_BIN).tmp && \
		mv $(BENCH_EXT_BIN).tmp $(BENCH_EXT_BIN) && echo "bench-ext: static, $(MUSL_TARGET)"; \
	else \
		$(CARGO) build --release --manifest-path $(BENCH_EXT_DIR)/Cargo.toml \
			--target-dir $(BENCH_EXT_TARGET) && echo "bench-ext: $(GNU_TARGET) (no musl target)"; \
	fi

# `cargo bench` builds the benchmark program (fixtures/bench/host_bench.rs)
# with the release profile. It finds the extension and the static binary
# at the paths above (override with ZOT_BENCH_EXT / ZOT_STATIC_BIN /
# ZOT_STATIC_MINIMAL_BIN). `make bench` runs it unpinned; `make
# bench-pinned` runs the whole of it (the bench process with its hosts,
# every extension and the floor) on CPU 0, built first so that cargo
# does not build on one CPU.
BENCH_ENV := ZOT_BENCH_EXT=$(CURDIR)/$(BENCH_EXT_BIN) ZOT_STATIC_BIN=$(CURDIR)/$(STATIC_BIN) \
	ZOT_STATIC_MINIMAL_BIN=$(CURDIR)/$(STATIC_MINIMAL_BIN)

bench: build bench-ext static
	$(BENCH_ENV) ZOT_BENCH_PIN=none $(CARGO) bench --bench host

bench-pinned: build bench-ext static
	$(CARGO) bench --bench host --no-run
	$(BENCH_ENV) ZOT_BENCH_PIN=all taskset -c 0 $(CARGO) bench --bench host

# `cargo bench --bench soak` runs fixtures/soak/soak.rs: a million
# requests, 200 reloads and random SIGKILLs through the release `zot rpc`
# with the native extension; it stops by itself and prints one line per
# figure (exit 1 when a check fails).
soak: build bench-ext
	ZOT_SOAK_BIN=$(CURDIR)/target/release/zot ZOT_BENCH_EXT=$(CURDIR)/$(BENCH_EXT_BIN) \
		$(CARGO) bench --bench soak

# Code lines each build compiles (.ci/loc): the minimal build, then the
# default one. Blank lines, comments and what a cfg leaves out (tests
# too) are not counted.
loc:
	@printf 'minimal: ' && .ci/loc
	@printf 'default: ' && .ci/loc default

clean:
	$(CARGO) clean

# The interactive session (`zot`) with the example extensions in
# fixtures/examples and a stand-in agent, ignoring installed extensions.
# Needs only the Rust toolchain and python3. Ctrl-D or /quit leaves.
EXAMPLES := fixtures/examples

# `cargo run` finds the binary wherever it was built (CARGO_TARGET_DIR,
# build.target-dir), which a fixed ./target/release/zot did not.
.PHONY: demo
demo:
	$(CARGO) run --release --quiet --bin zot -- --no-ext \
		-e $(EXAMPLES)/hello-py -e $(EXAMPLES)/hello-sh \
		-e $(EXAMPLES)/weather -e $(EXAMPLES)/guard \
		--agent-cmd ./$(EXAMPLES)/fake-agent.sh
