# ampc: convenience targets around CMake.
#   make train   install what is missing, build, run the main job: ampc train
#                (a CNN on Fashion-MNIST in bf16, about a minute; ARGS="..." adds options)
#   make test    install what is missing, build, run every test (CTest)
#   make asan    the tests again under AddressSanitizer + UBSan
#   make bench   benchmarks: GEMM, grad scaler, training step beside PyTorch
#   make install PREFIX=/usr/local

BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DAMPC_WERROR=ON

.PHONY: all deps build train test asan bench install clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DCMAKE_INSTALL_PREFIX=$(PREFIX)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

train: deps build
	./$(BUILD)/ampc train $(ARGS)

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DAMPC_SANITIZE=ON -DAMPC_WERROR=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 AMPC_TEST_QUICK=1 \
		UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

bench: deps build
	bench/run.sh $(BUILD) $(ARGS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-asan
