# Makefile -- builds libquant, its tests, benches and demo. `make check` proves (and replays every
# fuzzing corpus of tests/fuzz/), `make check-asan` and `make check-tsan` prove again under
# AddressSanitizer + UBSan and ThreadSanitizer (SANITIZE=1, SANITIZE=thread, in build-asan/ and
# build-tsan/), `make bench` measures, `make soak` runs quantd under a mixed load for a minute
# watching its memory, `make fuzz FUZZ_SECONDS=N` runs each libFuzzer harness N seconds (clang),
# `make run` starts the main program. V=1 shows commands, WERROR=1 makes warnings errors.
# SPDX-License-Identifier: Apache-2.0

CC      ?= cc
BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
WERROR  ?= 0
V       ?= 0

ifeq ($(V),1)
Q :=
else
Q := @
endif

ARCH := $(shell $(CC) -dumpmachine | cut -d- -f1)

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
        -Wundef -Wformat=2
ifeq ($(WERROR),1)
WARN += -Werror
endif

# KERNEL_CFLAGS: more flags for the x86 SIMD kernel files only (`make fuzz` builds them without
# sanitizers: clang 14 takes minutes over them instrumented, and the harnesses run the scalar ones).
# -ffp-contract=off: never fuse a*b+c; every result must equal the formula bit for bit.
CFLAGS   ?= -O2 -g
ALL_CFLAGS := -std=c11 $(WARN) -fPIC -ffp-contract=off -fno-math-errno $(CFLAGS) $(EXTRA_CFLAGS)
CPPFLAGS += -D_POSIX_C_SOURCE=200809L -Ilib/include -Ilib/common
LDLIBS   += -lm -lpthread

ifeq ($(SANITIZE),1)
ALL_CFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS    += -fsanitize=address,undefined
endif
ifeq ($(SANITIZE),thread)
ALL_CFLAGS += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS    += -fsanitize=thread
endif

# ---- libquant --------------------------------------------------------------------------------
LIB_SRCS := $(wildcard lib/common/*.c lib/quant/*.c lib/arch/generic/*.c)
ifeq ($(ARCH),x86_64)
LIB_SRCS += lib/arch/x86/kernels_avx2.c
CPPFLAGS += -DQUANT_BUILD_AVX2
$(BUILD)/obj/lib/arch/x86/kernels_avx2.o: ISA_CFLAGS := -mavx2 -mfma -mf16c $(KERNEL_CFLAGS)
ifneq ($(wildcard lib/arch/x86/kernels_avx512.c),)
LIB_SRCS += lib/arch/x86/kernels_avx512.c
CPPFLAGS += -DQUANT_BUILD_AVX512
$(BUILD)/obj/lib/arch/x86/kernels_avx512.o: ISA_CFLAGS := -mavx512f -mavx512bw -mavx512vl \
    -mavx512dq -mavx2 -mfma -mf16c $(KERNEL_CFLAGS)
endif
endif
ifeq ($(ARCH),aarch64)
ifneq ($(wildcard lib/arch/arm/kernels_neon.c),)
LIB_SRCS += lib/arch/arm/kernels_neon.c
CPPFLAGS += -DQUANT_BUILD_NEON
endif
endif
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)

LIB_A  := $(BUILD)/lib/libquant.a
LIB_SO := $(BUILD)/lib/libquant.so

# ---- libquant-checkpoint: safetensors, rule sets, the pipeline (jansson, PCRE2, nettle) ----------
CK_PKGS   := jansson libpcre2-8 nettle
CK_CFLAGS  = $(shell pkg-config --cflags $(CK_PKGS) 2>/dev/null) -DPCRE2_CODE_UNIT_WIDTH=8
CK_LIBS    = $(shell pkg-config --libs $(CK_PKGS) 2>/dev/null)
CK_SRCS   := $(wildcard lib/checkpoint/*.c)
CK_OBJS   := $(CK_SRCS:%.c=$(BUILD)/obj/%.o)
CK_A      := $(BUILD)/lib/libquant-checkpoint.a

# ---- the quant command -------------------------------------------------------------------------
CLI_SRCS  := $(wildcard cli/*.c)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
QUANT_BIN := $(BUILD)/bin/quant

# ---- quantd: the daemon (libmicrohttpd, SQLite, libpq, inih, nettle, GnuTLS, jansson, libarchive) -----
QD_PKGS    := libmicrohttpd sqlite3 libpq inih nettle gnutls jansson libpcre2-8 libarchive
QD_CFLAGS   = $(shell pkg-config --cflags $(QD_PKGS) 2>/dev/null) -DPCRE2_CODE_UNIT_WIDTH=8
QD_LIBS     = $(shell pkg-config --libs $(QD_PKGS) 2>/dev/null)
QD_DIRS    := app config http routes jobs store stats
QD_INC     := -Idaemon $(QD_DIRS:%=-Idaemon/%)
QD_SRCS    := $(wildcard $(QD_DIRS:%=daemon/%/*.c))
QD_OBJS    := $(QD_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/migrations.o \
    $(BUILD)/obj/gen/migrations_pg.o
QD_A       := $(BUILD)/lib/libquantd.a
QUANTD_BIN := $(BUILD)/bin/quantd
# The release: one number for quant, quantd and their man pages (the .TH lines of man/*.1 and
# man/*.8 carry it, with one date; the cli suite checks that they agree with this line).
VERSION    := 0.3.0
QD_VERSION := $(VERSION)
MIGRATIONS := $(sort $(wildcard migrations/*.sql))
PG_MIGRATIONS := $(sort $(wildcard migrations/postgresql/*.sql))

# ---- tests, bench, demo ----------------------------------------------------------------------
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   = $(shell pkg-config --libs check 2>/dev/null)
TEST_SRCS := $(wildcard tests/unit/*.c tests/unit/lib/*.c)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/obj/%.o)
UNIT_BIN  := $(BUILD)/tests/unit-tests
CKTEST_SRCS := $(wildcard tests/ckpt/*.c)
CKTEST_OBJS := $(CKTEST_SRCS:%.c=$(BUILD)/obj/%.o)
CKTEST_BIN  := $(BUILD)/tests/ckpt-tests
QDTEST_SRCS := $(wildcard tests/daemon/*.c)
QDTEST_OBJS := $(QDTEST_SRCS:%.c=$(BUILD)/obj/%.o)
QDTEST_BIN  := $(BUILD)/tests/daemon-tests
# The test kit (tests/kit/kit.c, libc only): linked by the ckpt and daemon suites and the benches.
KIT_OBJ     := $(BUILD)/obj/tests/kit/kit.o
BENCH_BIN := $(BUILD)/bin/quant-bench
DEMO_BIN  := $(BUILD)/bin/quant-demo

# ---- fuzzing: tests/fuzz/fuzz_TARGET.c, one libFuzzer harness per parser ------------------------
# Each harness is linked twice: with tests/fuzz/replay.c by the normal compiler (replay-TARGET,
# run by `make check` over tests/fuzz/corpus/TARGET/) and with libFuzzer by `make fuzz`
# (FUZZ_BUILD/fuzz/fuzz-TARGET; clang, -fsanitize=fuzzer,address,undefined).
FUZZ_SRCS    := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_TARGETS := $(FUZZ_SRCS:tests/fuzz/fuzz_%.c=%)
FUZZ_OBJS    := $(FUZZ_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/tests/fuzz/util.o \
    $(BUILD)/obj/tests/fuzz/replay.o
FUZZ_REPLAYS := $(FUZZ_TARGETS:%=$(BUILD)/tests/fuzz/replay-%)
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
# -max_len per target (bytes; 4096 when not listed): whole files for the safetensors and GGUF
# readers.
FUZZ_MAX_LEN_st_read     := 65536
FUZZ_MAX_LEN_ct_read     := 65536
FUZZ_MAX_LEN_gguf_read   := 65536
FUZZ_MAX_LEN_stats_st    := 65536
FUZZ_MAX_LEN_stats_json  := 16384
FUZZ_MAX_LEN_router      := 1024
FUZZ_MAX_LEN_source      := 1024
FUZZ_MAX_LEN_http        := 65536

.PHONY: all lib check check-asan check-tsan check-arm64 check-llamacpp test bench soak run demo deps \
    deps-run install \
    verify-unit clean format lint-lib fuzz fuzz-bins

all: lib $(CK_A) $(QUANT_BIN) $(QUANTD_BIN)

lib: $(LIB_A) $(LIB_SO)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(ISA_CFLAGS) -MMD -MP -c $< -o $@

$(LIB_OBJS): ALL_CFLAGS += -fvisibility=hidden

# cpu.c's QUANT_BUILD_* flags follow which kernel files exist: rebuild it when they change.
$(BUILD)/obj/lib/common/cpu.o: $(wildcard lib/arch/*/*.c)

$(LIB_A): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(LIB_SO): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(CK_OBJS): ALL_CFLAGS += -fvisibility=hidden $(CK_CFLAGS)
$(CK_OBJS) $(CLI_OBJS) $(CKTEST_OBJS): CPPFLAGS += -Ilib/checkpoint

$(CK_A): $(CK_OBJS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(CLI_OBJS): ALL_CFLAGS += $(CK_CFLAGS)
$(CLI_OBJS) $(CKTEST_OBJS): CPPFLAGS += -DQUANT_RELEASE='"$(VERSION)"'

$(QUANT_BIN): $(CLI_OBJS) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CLI_OBJS) $(CK_A) $(LIB_A) $(CK_LIBS) $(LDLIBS)

# The migrations are compiled into the binary: quantd never depends on where SQL files live.
$(BUILD)/gen/migrations.c: $(MIGRATIONS) scripts/embed-migrations
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q)scripts/embed-migrations $(MIGRATIONS) > $@.tmp && mv $@.tmp $@

# The PostgreSQL engine's own migrations, embedded the same way (daemon/store/store_pg.c).
$(BUILD)/gen/migrations_pg.c: $(PG_MIGRATIONS) scripts/embed-migrations
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q)scripts/embed-migrations --array qd_pg_migrations $(PG_MIGRATIONS) > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(QD_INC) $(ALL_CFLAGS) -c $< -o $@

$(QD_OBJS) $(BUILD)/obj/daemon/main.o $(QDTEST_OBJS): CPPFLAGS += -Ilib/checkpoint $(QD_INC) \
    -DQD_VERSION='"$(QD_VERSION)"'
$(QD_OBJS) $(BUILD)/obj/daemon/main.o: ALL_CFLAGS += $(QD_CFLAGS)

$(QD_A): $(QD_OBJS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(QUANTD_BIN): $(BUILD)/obj/daemon/main.o $(QD_A) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(QD_A) $(CK_A) $(LIB_A) $(QD_LIBS) $(LDLIBS)

$(QDTEST_OBJS): ALL_CFLAGS += $(CHECK_CFLAGS) $(QD_CFLAGS) -Itests/daemon -Itests/kit

$(QDTEST_BIN): $(QDTEST_OBJS) $(KIT_OBJ) $(QD_A) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(QDTEST_OBJS) $(KIT_OBJ) $(QD_A) $(CK_A) $(LIB_A) $(CHECK_LIBS) \
	    $(QD_LIBS) -lcurl $(LDLIBS)

$(TEST_OBJS): ALL_CFLAGS += $(CHECK_CFLAGS) -Itests/unit
$(CKTEST_OBJS): ALL_CFLAGS += $(CHECK_CFLAGS) $(CK_CFLAGS) -Itests/ckpt -Itests/kit

$(CKTEST_BIN): $(CKTEST_OBJS) $(KIT_OBJ) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CKTEST_OBJS) $(KIT_OBJ) $(CK_A) $(LIB_A) $(CHECK_LIBS) $(CK_LIBS) $(LDLIBS)

$(UNIT_BIN): $(TEST_OBJS) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(TEST_OBJS) $(LIB_A) $(CHECK_LIBS) $(LDLIBS)

$(BUILD)/bin/%: $(BUILD)/obj/bench/%.o $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB_A) $(LDLIBS)

# The harnesses see the daemon's and the checkpoint library's internal headers. A harness may
# define the libFuzzer entry point without tests/fuzz/fuzz.h's prototype.
$(FUZZ_OBJS): CPPFLAGS += -Ilib/checkpoint $(QD_INC) -Itests/fuzz -Itests/kit
$(FUZZ_OBJS): ALL_CFLAGS += $(QD_CFLAGS) $(CK_CFLAGS) -Wno-missing-prototypes

$(BUILD)/tests/fuzz/replay-%: $(BUILD)/obj/tests/fuzz/replay.o $(BUILD)/obj/tests/fuzz/fuzz_%.o \
    $(BUILD)/obj/tests/fuzz/util.o $(KIT_OBJ) $(QD_A) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(QD_A) $(CK_A) $(LIB_A) $(QD_LIBS) $(LDLIBS)

$(BUILD)/fuzz/fuzz-%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/util.o $(KIT_OBJ) \
    $(QD_A) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $(filter %.o,$^) $(QD_A) $(CK_A) $(LIB_A) \
	    $(QD_LIBS) $(LDLIBS)

# Reached only through the pattern rules above: keep them (make would delete them as
# intermediate files).
.SECONDARY: $(FUZZ_OBJS)

# $(call fuzz_replay,BUILD): every harness of BUILD over its corpus, one line each.
fuzz_replay = for t in $(FUZZ_TARGETS); do d=tests/fuzz/corpus/$$t; [ -d $$d ] || d=; \
    $(1)/tests/fuzz/replay-$$t $$d || exit 1; done

# Installs what is missing (only when pkg-config cannot find it, or when neither python3 nor
# /usr/bin/python3 imports numpy: the examples suite's interpreters, tests/daemon/test_examples.c;
# or when there is no PostgreSQL server for tests/daemon/pgtest.c's cluster, or torch: the torch
# suite's, tests/daemon/test_torch.c, unless QUANT_SKIP_TORCH=1).
deps:
	@command -v pkg-config >/dev/null 2>&1 && pkg-config --exists check libcurl $(CK_PKGS) \
	    $(QD_PKGS) || scripts/install-deps
	@{ python3 -c 'import numpy' || /usr/bin/python3 -c 'import numpy'; } >/dev/null 2>&1 || \
	    scripts/install-deps
	@command -v curl >/dev/null 2>&1 || scripts/install-deps
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ -n "$$QUANT_TEST_PG_BINDIR" ] || \
	    scripts/install-deps
	@[ "$${QUANT_SKIP_TORCH:-}" = 1 ] || { /usr/bin/python3 -c 'import torch' || \
	    python3 -c 'import torch'; } >/dev/null 2>&1 || scripts/install-deps

# What building quant and quantd needs (make run): the compiler and the libraries, not Check,
# curl, clang, valgrind, NumPy or PyTorch.
deps-run:
	@command -v pkg-config >/dev/null 2>&1 && pkg-config --exists $(CK_PKGS) $(QD_PKGS) || \
	    scripts/install-deps --run

# The library must never print or exit: no stdio output calls, no exit/abort.
lint-lib:
	@if grep -nE '\b(printf|fprintf|puts|fputs|putchar|perror|exit|abort)[[:space:]]*\(|\b(stdout|stderr)\b' \
	    $$(find lib -name '*.[ch]'); then echo "lib/ must not print or exit (see above)"; exit 1; fi

# The README's C example, extracted and run, so the documented code cannot rot.
$(BUILD)/tests/readme-example: README.md tests/readme_main.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(Q)awk '/^```c$$/ {f = 1; next} /^```$$/ {if (f) exit} f' README.md > $@.c
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -Wno-missing-prototypes -o $@ $@.c tests/readme_main.c \
	    $(LIB_A) $(LDFLAGS) $(LDLIBS)

check: deps lint-lib
	$(Q)$(MAKE) --no-print-directory $(UNIT_BIN) $(CKTEST_BIN) $(QUANT_BIN) $(QUANTD_BIN) \
	    $(QDTEST_BIN) $(BUILD)/tests/readme-example $(FUZZ_REPLAYS)
	$(Q)$(BUILD)/tests/readme-example
	$(Q)CK_DEFAULT_TIMEOUT=600 $(UNIT_BIN)
	$(Q)CK_DEFAULT_TIMEOUT=600 QUANT_BIN=$(QUANT_BIN) $(CKTEST_BIN)
	$(Q)CK_DEFAULT_TIMEOUT=600 QUANT_BIN=$(QUANT_BIN) QUANTD_BIN=$(QUANTD_BIN) $(QDTEST_BIN)
	$(Q)$(call fuzz_replay,$(BUILD))

test: check

check-asan: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan SANITIZE=1 CFLAGS="-O1 -g" \
	    build-asan/tests/unit-tests build-asan/tests/ckpt-tests build-asan/bin/quant \
	    build-asan/bin/quantd build-asan/tests/daemon-tests \
	    $(FUZZ_TARGETS:%=build-asan/tests/fuzz/replay-%)
	$(Q)CK_DEFAULT_TIMEOUT=1200 CK_FORK=no ASAN_OPTIONS=detect_leaks=1 \
	    UBSAN_OPTIONS=print_stacktrace=1 build-asan/tests/unit-tests
	$(Q)CK_DEFAULT_TIMEOUT=1200 CK_FORK=no ASAN_OPTIONS=detect_leaks=1 \
	    UBSAN_OPTIONS=print_stacktrace=1 QUANT_BIN=build-asan/bin/quant build-asan/tests/ckpt-tests
	$(Q)CK_DEFAULT_TIMEOUT=1200 CK_FORK=no ASAN_OPTIONS=detect_leaks=1 \
	    UBSAN_OPTIONS=print_stacktrace=1 QUANT_BIN=build-asan/bin/quant \
	    QUANTD_BIN=build-asan/bin/quantd build-asan/tests/daemon-tests
	$(Q)export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1; \
	    $(call fuzz_replay,build-asan)

# The ThreadSanitizer lane: quant, quantd and the daemon tests built with -fsanitize=thread in
# build-tsan/, then the suites that drive quantd's threads (the job queue and workers, the
# statistics writer and its delta log, checkpoint uploads quantized while they arrive, the
# waiter pool, the connection guard, kill -9 and restarts). quantd runs as a child of the tests
# and exits 0 at SIGTERM whatever TSan saw, so every process writes its reports under
# build-tsan/tsan-logs/ (log_path) and the lane fails when any is there;
# halt_on_error and exitcode=66 also end a racing process at once (the test then sees quantd
# gone, or exit 66 instead of 0). No suppressions: none were needed. The store suites add the
# job store's concurrent claims and the PostgreSQL engine's racing openers (libpq itself is not
# instrumented; the engine's own locking is).
TSAN_SUITES  := api stats_store stats_api stats_log inputs limits faults conns store store_pg
TSAN_LOGS    := build-tsan/tsan-logs
TSAN_OPTS    := halt_on_error=1 exitcode=66 second_deadlock_stack=1 log_path=$(CURDIR)/$(TSAN_LOGS)/tsan
check-tsan: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-tsan SANITIZE=thread CFLAGS="-O1 -g" \
	    build-tsan/bin/quant build-tsan/bin/quantd build-tsan/tests/daemon-tests
	$(Q)nm build-tsan/bin/quantd | grep -q __tsan_init || \
	    { echo "build-tsan/bin/quantd is not built with ThreadSanitizer"; exit 1; }
	$(Q)rm -rf $(TSAN_LOGS) && mkdir -p $(TSAN_LOGS)
	$(Q)failed=; for s in $(TSAN_SUITES); do \
	    CK_RUN_SUITE=$$s CK_DEFAULT_TIMEOUT=1200 CK_TIMEOUT_MULTIPLIER=4 \
	    TSAN_OPTIONS="$(TSAN_OPTS)" QUANT_BIN=build-tsan/bin/quant \
	    QUANTD_BIN=build-tsan/bin/quantd build-tsan/tests/daemon-tests || failed="$$failed $$s"; \
	done; \
	if ls $(TSAN_LOGS)/tsan.* >/dev/null 2>&1; then \
	    cat $(TSAN_LOGS)/tsan.*; echo "check-tsan: ThreadSanitizer reports above ($(TSAN_LOGS))"; \
	    exit 1; fi; \
	if [ -n "$$failed" ]; then echo "check-tsan: failed suites:$$failed"; exit 1; fi

# The NEON lane: cross-compile with Debian's aarch64 gcc, run the suite under qemu-user
# (QUANT_TEST_QUICK: an eighth of the random iterations, emulation being slow). The binary
# finds the multiarch arm64 loader and libc installed by install-deps; QEMU_LD_PREFIX must
# stay unset (the cross toolchain's loader with the system's arm64 libc hangs on fork).
ARM64_ENV := PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig
check-arm64:
	$(Q)scripts/install-deps --cross-arm64
	$(Q)$(ARM64_ENV) $(MAKE) --no-print-directory CC=aarch64-linux-gnu-gcc BUILD=build-arm64 \
	    build-arm64/tests/unit-tests
	$(Q)env -u QEMU_LD_PREFIX CK_DEFAULT_TIMEOUT=3000 QUANT_TEST_QUICK=1 \
	    qemu-aarch64 build-arm64/tests/unit-tests

# The llama.cpp lane: llama.cpp's own prebuilt libraries (npm's @node-llama-cpp/linux-x64, cached
# under $XDG_CACHE_HOME/quantd-llamacpp) read, dequantize, run and themselves write the GGUF files
# quant writes, by tests/llamacpp/run (which says what it proves). The harnesses dlopen() the
# libraries; nothing of llama.cpp is built. STORIES15M: the F32 GGUF of the 15M Llama it needs.
STORIES15M ?= ../shared/data/stories15M/stories15M-f32.gguf
LLC_DIR    := $(BUILD)/tests/llamacpp
LLC_BINS   := $(LLC_DIR)/llamacpp-tensors $(LLC_DIR)/llamacpp-decode $(LLC_DIR)/llamacpp-synth \
    $(LLC_DIR)/llamacpp-quantize $(LLC_DIR)/llamacpp-same $(LLC_DIR)/llamacpp-imatrix
LLC_LOADER := $(BUILD)/obj/tests/llamacpp/loader.o
$(BUILD)/obj/tests/llamacpp/%.o: CPPFLAGS += -Itests/llamacpp

LLC_OBJ    := $(BUILD)/obj/tests/llamacpp
$(LLC_DIR)/llamacpp-tensors: $(LLC_OBJ)/check_tensors.o
$(LLC_DIR)/llamacpp-quantize: $(LLC_OBJ)/quantize.o $(LLC_OBJ)/imatrix_read.o
$(LLC_DIR)/llamacpp-tensors $(LLC_DIR)/llamacpp-quantize: $(LLC_LOADER) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CK_A) $(LIB_A) $(CK_LIBS) -ldl $(LDLIBS)

$(LLC_DIR)/llamacpp-decode: $(BUILD)/obj/tests/llamacpp/decode.o $(LLC_LOADER)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -ldl $(LDLIBS)

LLC_CK_BINS := $(LLC_DIR)/llamacpp-synth $(LLC_DIR)/llamacpp-same $(LLC_DIR)/llamacpp-imatrix
$(LLC_DIR)/llamacpp-same: $(LLC_OBJ)/imatrix_read.o $(LLC_OBJ)/weighted.o
$(LLC_CK_BINS): $(LLC_DIR)/llamacpp-%: $(LLC_OBJ)/%.o $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CK_A) $(LIB_A) $(CK_LIBS) $(LDLIBS)

check-llamacpp:
	$(Q)scripts/install-deps --run --llamacpp
	$(Q)$(MAKE) --no-print-directory $(QUANT_BIN) $(LLC_BINS)
	$(Q)QUANT_BIN=$(QUANT_BIN) LLAMACPP_BIN=$(LLC_DIR) STORIES15M=$(STORIES15M) tests/llamacpp/run

# Each harness for FUZZ_SECONDS on a copy of its corpus (new inputs never land in the tree),
# built with clang and libFuzzer in FUZZ_BUILD; stops at the first crash, leak, sanitizer report
# or timeout, naming the input kept under FUZZ_BUILD/artifacts/ (tests/fuzz/README.md).
fuzz: deps
	$(Q)command -v $(FUZZ_CC) >/dev/null 2>&1 || { echo "make fuzz needs clang with libFuzzer" \
	    "(FUZZ_CC=$(FUZZ_CC) not found; scripts/install-deps installs it)" >&2; exit 1; }
	$(Q)mkdir -p $(FUZZ_BUILD) && echo 'int LLVMFuzzerTestOneInput(const char *d, long n)' \
	    '{ return d && n < 0; }' > $(FUZZ_BUILD)/probe.c && \
	    $(FUZZ_CC) -fsanitize=fuzzer,address,undefined $(FUZZ_BUILD)/probe.c \
	    -o $(FUZZ_BUILD)/probe 2>/dev/null || { echo "make fuzz: $(FUZZ_CC) cannot link" \
	    "-fsanitize=fuzzer: the libFuzzer runtime is missing (Debian: libclang-rt-dev;" \
	    "scripts/install-deps installs it)" >&2; exit 1; }
	$(Q)$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) SANITIZE=1 \
	    CFLAGS="-O1 -g" EXTRA_CFLAGS=-fsanitize=fuzzer-no-link KERNEL_CFLAGS=-fno-sanitize=all \
	    fuzz-bins
	$(Q)$(foreach t,$(FUZZ_TARGETS),tests/fuzz/run $(FUZZ_BUILD) $(t) $(FUZZ_SECONDS) \
	    $(or $(FUZZ_MAX_LEN_$(t)),4096) &&) true

fuzz-bins: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz-%)

# The benches below share bench/benchutil.c and the test kit, tests/kit/kit.c (both libc only).
BENCH_UTIL := $(BUILD)/obj/bench/benchutil.o $(KIT_OBJ)
$(BUILD)/obj/bench/%.o: ALL_CFLAGS += -Itests/kit

PIPE_BENCH := $(BUILD)/bin/pipeline-bench
$(BUILD)/obj/bench/pipeline-bench.o: ALL_CFLAGS += $(CK_CFLAGS)
$(PIPE_BENCH): $(BUILD)/obj/bench/pipeline-bench.o $(BENCH_UTIL) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BENCH_UTIL) $(CK_A) $(LIB_A) $(CK_LIBS) $(LDLIBS)

DAEMON_BENCH := $(BUILD)/bin/daemon-bench
$(BUILD)/obj/bench/daemon-bench.o: ALL_CFLAGS += $(CK_CFLAGS)
$(DAEMON_BENCH): $(BUILD)/obj/bench/daemon-bench.o $(BENCH_UTIL) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BENCH_UTIL) $(CK_A) $(LIB_A) $(CK_LIBS) -lcurl $(LDLIBS)

GGUF_BENCH := $(BUILD)/bin/gguf-bench
$(BUILD)/obj/bench/gguf-bench.o: ALL_CFLAGS += $(CK_CFLAGS)
$(GGUF_BENCH): $(BUILD)/obj/bench/gguf-bench.o $(BENCH_UTIL) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BENCH_UTIL) $(CK_A) $(LIB_A) $(CK_LIBS) $(LDLIBS)

STATS_BENCH := $(BUILD)/bin/stats-bench
$(STATS_BENCH): $(BUILD)/obj/bench/stats-bench.o $(BENCH_UTIL)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BENCH_UTIL) $(LDLIBS)

# The soak (make soak): quantd under a mixed load for SOAK_SECONDS (default 60), RSS watched.
SOAK_BIN := $(BUILD)/bin/soak
$(BUILD)/obj/bench/soak.o: ALL_CFLAGS += $(CK_CFLAGS)
$(SOAK_BIN): $(BUILD)/obj/bench/soak.o $(BENCH_UTIL) $(CK_A) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BENCH_UTIL) $(CK_A) $(LIB_A) $(CK_LIBS) -lcurl $(LDLIBS)

soak: deps $(SOAK_BIN) $(QUANTD_BIN)
	$(Q)$(SOAK_BIN) $(QUANTD_BIN)

# QUANT_BENCH_PIPELINE_MIB sizes the pipeline bench's checkpoint (default 2048),
# QUANT_BENCH_DAEMON_MIB the daemon bench's shard (default 1024), QUANT_BENCH_STATS_SECONDS the
# stats bench's run per load (default 30).
bench: lib $(BENCH_BIN) $(PIPE_BENCH) $(QUANT_BIN) $(DAEMON_BENCH) $(QUANTD_BIN) $(STATS_BENCH) \
    $(GGUF_BENCH)
	$(Q)$(BENCH_BIN)
	$(Q)$(PIPE_BENCH) $(QUANT_BIN)
	$(Q)$(GGUF_BENCH) $(QUANT_BIN)
	$(Q)$(DAEMON_BENCH) $(QUANTD_BIN) $(QUANT_BIN)
	$(Q)$(STATS_BENCH) $(QUANTD_BIN)

# `make run` starts quantd with its embedded defaults (127.0.0.1:8080, data in ./var), after
# installing only what building quant and quantd needs (install-deps --run: no test tools).
run: deps-run all
	$(Q)$(QUANTD_BIN)

demo: lib $(DEMO_BIN)
	$(Q)$(DEMO_BIN)

# /etc for the system prefixes, else under the prefix (PREFIX=/opt/quantd: /opt/quantd/etc); the
# unit names the file it installs with --config, whatever the directory.
SYSCONFDIR       ?= $(if $(filter /usr /usr/local,$(PREFIX)),/etc,$(PREFIX)/etc)
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8 \
	    $(DESTDIR)$(PREFIX)/share/quantd/migrations/postgresql $(DESTDIR)$(SYSTEMD_UNIT_DIR) \
	    $(DESTDIR)$(SYSCONFDIR)/quantd
	install -m 644 $(LIB_A) $(CK_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 lib/include/*.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(QUANT_BIN) $(QUANTD_BIN) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 man/quant.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/quantd.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 644 $(MIGRATIONS) $(DESTDIR)$(PREFIX)/share/quantd/migrations/
	install -m 644 $(PG_MIGRATIONS) $(DESTDIR)$(PREFIX)/share/quantd/migrations/postgresql/
	sed -e '/^#/!s|@BINDIR@|$(PREFIX)/bin|g' -e '/^#/!s|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	    systemd/quantd.service > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/quantd.service
	chmod 644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/quantd.service
	test -e $(DESTDIR)$(SYSCONFDIR)/quantd/quantd.conf || \
	    install -m 644 systemd/quantd.conf $(DESTDIR)$(SYSCONFDIR)/quantd/quantd.conf

# The unit as installed, checked by systemd-analyze when the machine has it (CI does).
verify-unit: $(QUANTD_BIN)
	$(Q)if command -v systemd-analyze >/dev/null 2>&1; then \
	    rm -rf $(BUILD)/unit && $(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/$(BUILD)/unit \
	        PREFIX=/usr >/dev/null && \
	    sed -i 's|ExecStart=/usr/bin/quantd|ExecStart=$(CURDIR)/$(BUILD)/unit/usr/bin/quantd|' \
	        $(BUILD)/unit/usr/lib/systemd/system/quantd.service && \
	    MANPATH=$(CURDIR)/$(BUILD)/unit/usr/share/man systemd-analyze verify \
	        $(BUILD)/unit/usr/lib/systemd/system/quantd.service && \
	    echo "systemd-analyze verify: ok"; \
	else echo "systemd-analyze not available: unit not verified"; fi

format:
	clang-format -i $$(find lib tests bench cli daemon -name '*.[ch]')

clean:
	rm -rf build build-asan build-*

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
