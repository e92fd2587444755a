# zot-host build, test and benchmark entry points.
#
#   make build      release build of the library and the `zot` binary
#   make test       the test suite
#   make static     stripped, statically linked `zot` at target/zot-static
#   make bench-ext  the native benchmark extension (fixtures/bench-ext)
#   make bench      all of the above in release mode, then the benchmark
#   make clean      cargo clean (also removes the fixture build)

CARGO ?= cargo

# Where the static binary ends up, whatever toolchain produced it.
STATIC_BIN := target/zot-static
MUSL_TARGET := x86_64-unknown-linux-musl
GNU_TARGET := x86_64-unknown-linux-gnu

# The benchmark extension is its own crate (not a workspace member);
# its build goes under target/ so one `cargo clean` removes everything.
BENCH_EXT_DIR := fixtures/bench-ext
BENCH_EXT_TARGET := target/bench-ext
BENCH_EXT_BIN := $(BENCH_EXT_TARGET)/release/zot-bench-ext

.PHONY: all build test static bench-ext bench clean

all: build

build:
	$(CARGO) build --release

test:
	$(CARGO) test

# Static binary: musl first (installing the Rust target with rustup when
# it is missing); if that fails, a glibc build with crt-static. The
# release profile strips symbols; `strip` runs again in case a fallback
# path left any. Whether the result is really static is reported by
# `make bench` (`bench binary static=...`), which reads the ELF headers.
static:
	@set -e; \
	if command -v rustup >/dev/null 2>&1 && \
	   ! rustup target list --installed | grep -qx '$(MUSL_TARGET)'; then \
		echo "static: installing Rust target $(MUSL_TARGET)"; \
		rustup target add $(MUSL_TARGET) || true; \
	fi; \
	if $(CARGO) build --release --bin zot --target $(MUSL_TARGET); then \
		cp target/$(MUSL_TARGET)/release/zot $(STATIC_BIN); \
		echo "static: $(STATIC_BIN) built for $(MUSL_TARGET)"; \
	else \
		echo "static: musl build failed, falling back to static glibc"; \
		RUSTFLAGS='-C target-feature=+crt-static' \
			$(CARGO) build --release --bin zot --target $(GNU_TARGET); \
		cp target/$(GNU_TARGET)/release/zot $(STATIC_BIN); \
		echo "static: $(STATIC_BIN) built for $(GNU_TARGET) (crt-static)"; \
	fi; \
	if command -v strip >/dev/null 2>&1; then strip $(STATIC_BIN); fi; \
	ls -l $(STATIC_BIN)

bench-ext:
	$(CARGO) build --release --manifest-path $(BENCH_EXT_DIR)/Cargo.toml \
		--target-dir $(BENCH_EXT_TARGET)

# `cargo bench` builds the benchmark program (fixtures/bench/host_bench.rs)
# with the release profile. It finds the extension and the static binary
# at the paths above (override with ZOT_BENCH_EXT / ZOT_STATIC_BIN).
bench: build bench-ext static
	ZOT_BENCH_EXT=$(CURDIR)/$(BENCH_EXT_BIN) ZOT_STATIC_BIN=$(CURDIR)/$(STATIC_BIN) \
		$(CARGO) bench --bench host

clean:
	$(CARGO) clean
