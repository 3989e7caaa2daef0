# Makefile — the two entry points of a fresh machine (see README.md):
#   make train   builds hstu and trains the embedded default (synthetic data, ~1 min on 2 cores)
#   make test    builds everything and runs the whole test suite
#   make test-sanitize  the CPU build and test suite under ASan + UBSan, in build-sanitize/
#   make fuzz    builds the libFuzzer targets (clang) in build-fuzz/ and runs each FUZZ_SECONDS
#                (FUZZ_PARALLEL targets at once, default 1)
# Both configure a CMake/Ninja build in build/ on first use. CUDA targets are added when nvcc is
# found (HSTU_CUDA=AUTO); pass CMAKE_ARGS="-DHSTU_CUDA=OFF" to skip them.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

SANITIZE_BUILD ?= build-sanitize
# GCC's flow analysis under -fsanitize reports std::regex / std::function members as "maybe
# uninitialized" (false positives, libstdc++ 12); -Werror would stop the build on them.
SANITIZE_FLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SANITIZE_CXX_FLAGS = $(SANITIZE_FLAGS) -Wno-maybe-uninitialized
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 300
FUZZ_PARALLEL ?= 1

.PHONY: all build train test test-sanitize fuzz clean format

all: build

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS)

train: $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS) hstu
	./$(BUILD)/hstu train

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# ASan + UBSan: any report fails its test (UBSan does not recover; ASan aborts on the first error).
$(SANITIZE_BUILD)/build.ninja:
	cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA=OFF \
	  -DCMAKE_CXX_FLAGS="$(SANITIZE_CXX_FLAGS)" -DCMAKE_EXE_LINKER_FLAGS="$(SANITIZE_FLAGS)" \
	  $(CMAKE_ARGS)

test-sanitize: $(SANITIZE_BUILD)/build.ninja
	ninja -C $(SANITIZE_BUILD) -j $(JOBS)
	cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# libFuzzer targets (fuzz/*.cpp; clang, HSTU_FUZZ=ON), each run for FUZZ_SECONDS on its corpus.
fuzz:
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_PARALLEL=$(FUZZ_PARALLEL) JOBS=$(JOBS) ./tools/fuzz_smoke.sh $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(FUZZ_BUILD)
