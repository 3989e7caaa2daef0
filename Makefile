# Makefile — the two entry points of a fresh machine (see README.md):
#   make train   builds hstu and trains the embedded default (synthetic data, ~1 min on 2 cores)
#   make test    builds everything and runs the whole test suite
# Both configure a CMake/Ninja build in build/ on first use. CUDA targets are added when nvcc is
# found (HSTU_CUDA=AUTO); pass CMAKE_ARGS="-DHSTU_CUDA=OFF" to skip them.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all build train test clean format

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

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)
