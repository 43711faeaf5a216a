# The two front-door commands: `make run` and `make test`. Everything else is set-up.
PYTHON ?= python3
VENV := .venv
PIP := $(VENV)/bin/pip
BUILD := build/dev
MINGW_BUILD := build/mingw
SOURCES := $(shell find src include python CMakeLists.txt pyproject.toml -type f -not -name '*.pyc' 2>/dev/null)

# What `make test` needs is a superset of what `make run` needs: tools/debian-packages.txt says which.
PREREQUISITES := $(if $(filter test test-%,$(MAKECMDGOALS)),test,run)
REQUIRE_TRACING := $(if $(filter 0,$(shell id -u)),MEMCOST_REQUIRE_TRACING=1)

.PHONY: run test test-cpp test-asan test-python cross-windows cross-arm64 clean setup prerequisites

run: setup
	$(VENV)/bin/memcost run

test: setup test-cpp test-asan cross-windows cross-arm64 test-python

setup: $(VENV)/.installed

# Installs missing Debian packages (as root, or with sudo -n), or stops with the command to run.
prerequisites:
	@bash tools/prerequisites $(PREREQUISITES)

$(VENV)/.deps: Makefile | prerequisites
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "scikit-build-core>=0.8" "rich>=13" "numpy>=1.24" "matplotlib>=3.7" "jinja2>=3.1" "scipy>=1.10" "prometheus_client>=0.16" "pytest>=7" "hypothesis>=6" "protobuf>=4"
	touch $@

# Reinstalled whenever a source changes; the wheel build directory keeps it incremental.
$(VENV)/.installed: $(VENV)/.deps $(SOURCES) | prerequisites
	$(PIP) install -q --no-build-isolation --no-deps .
	touch $@

test-cpp: | prerequisites
	cmake -S . -B $(BUILD) -G Ninja -DMEMCOST_BUILD_TESTS=ON
	cmake --build $(BUILD)
	cd $(BUILD) && $(REQUIRE_TRACING) ctest --output-on-failure

# big_array and its C API under AddressSanitizer (with LeakSanitizer) and UBSan, and the tracer's
# unwinder fed random and truncated stacks; then the trace tests, the interrupt stress and the
# programs of every runtime included, with the probe built the same way.
test-asan: setup
	cmake -S . -B build/asan -G Ninja -DMEMCOST_BUILD_TESTS=ON -DMEMCOST_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build/asan --target memcost_tests memcost_trace_tests memcost_tracer_tests memcost_fault_counter_tests memcost_pinned_tests memcost_got_hook_tests memcost_block_table_tests memcost_c_api_test memcost-probe memcost-preload
	cd build/asan && ctest --output-on-failure -R "BigArray|CApi|Attribution|Unwind|SymbolNames|SymbolTable|InlineScopes|PerfMap|FaultCounter\.|RecordReader|ProcessTree|PreloadReader|PythonFrames|GotHook|BlockTable|Raw\.|Workload|EventList|Pacing|FaultSources|TraceLoop|Pinned|RegistrationChunks|FaultMethod|RunEstimate|Rounds"
	MEMCOST_PROBE=$(CURDIR)/build/asan/memcost-probe $(REQUIRE_TRACING) $(VENV)/bin/pytest -q \
	  tests/python/e2e/test_trace.py tests/python/e2e/test_trace_processes.py tests/python/e2e/test_trace_runtimes.py

# The Windows back end, cross-built with mingw-w64: library, probe and the C++ tests
# (tests/python/e2e/test_windows.py runs them, and the probe, under Wine).
cross-windows: | prerequisites
	mkdir -p build/mingw-include
	ln -sfn /usr/include/nlohmann build/mingw-include/nlohmann
	ln -sfn /usr/include/CLI build/mingw-include/CLI
	cmake -S . -B $(MINGW_BUILD) -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64.cmake \
	  -DMEMCOST_THIRD_PARTY_INCLUDE=$(CURDIR)/build/mingw-include \
	  -DMEMCOST_BUILD_TESTS=ON -DMEMCOST_GTEST_SOURCE=/usr/src/googletest
	cmake --build $(MINGW_BUILD)
	@echo "Windows cross-build OK: $(MINGW_BUILD)/memcost-probe.exe"

# arm64 (Debian's g++-aarch64-linux-gnu): the library built, the probe and the tracer compiled, not
# linked or run (libdw and zlib for arm64 are not installed). This proves only that the code builds.
cross-arm64: | prerequisites
	mkdir -p build/arm64-include
	for header in nlohmann CLI elfutils libiberty gelf.h libelf.h nlist.h zlib.h zconf.h; do ln -sfn /usr/include/$$header build/arm64-include/$$header; done
	cmake -S . -B build/arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	  -DMEMCOST_THIRD_PARTY_INCLUDE=$(CURDIR)/build/arm64-include -DMEMCOST_COMPILE_ONLY=ON
	cmake --build build/arm64
	@echo "arm64 cross-build OK (compiled, not linked or run): build/arm64"

# MEMCOST_REQUIRE_WINE: the Windows tests fail, not skip, when Wine or the Windows build is missing.
# MEMCOST_REQUIRE_TRACING (as root): so do the tests that need perf events, tracepoints or tracefs.
# build/libc: other C libraries to run the preload library under (tools/foreign-libcs).
test-python: setup
	bash tools/foreign-libcs build/libc
	MEMCOST_REQUIRE_FOREIGN_LIBCS=1 MEMCOST_REQUIRE_WINE=1 $(REQUIRE_TRACING) $(VENV)/bin/pytest -q tests/python/unit tests/python/e2e

clean:
	rm -rf build $(VENV)
