# ampc: convenience targets around CMake.
#   make train   install what is missing, build, run the main job: ampc train
#                (a CNN on Fashion-MNIST in bf16, about a minute; ARGS="..." adds options)
#   make test    install what is missing, build, run every test (CTest), then
#                the CUDA backend's tests on cudaemu (make test-cuda-emu)
#   make asan    the tests again under AddressSanitizer + UBSan (the CUDA ones
#                on cudaemu too)
#   make test-cuda-emu  the CUDA backend's tests on cudaemu, the CUDA runtime
#                and cuBLASLt emulated on the CPU (tests/cuda_emu; no GPU needed)
#   make fuzz    the libFuzzer targets (fuzz/, clang + ASan + UBSan, in build-fuzz),
#                each for FUZZ_SECONDS (default 600); a crash, leak, hang or OOM fails
#   make bench   benchmarks beside PyTorch in one run (bench/run.sh): GEMMs
#                against PyTorch's matmul, the grad scaler, the training step
#                (ampc and PyTorch alternating, 3 rounds), the profiler's
#                overhead, the step under load; ARGS=--quick for a smoke
#                check. PyTorch: $AMPC_TORCH_PYTHON, python3 or .bench-venv
#   make bench-deps  PyTorch from PyPI into .bench-venv (scripts/bench-deps.sh)
#   make install PREFIX=/usr/local

BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release -DAMPC_WERROR=ON
FUZZ_SECONDS ?= 600

.PHONY: all deps build train test asan test-cuda-emu fuzz bench bench-deps install clean

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
	$(MAKE) --no-print-directory test-cuda-emu

asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DAMPC_SANITIZE=ON -DAMPC_WERROR=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 AMPC_TEST_QUICK=1 \
		UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)
	cmake -S . -B build-emu-asan -DCMAKE_BUILD_TYPE=Debug -DAMPC_SANITIZE=ON -DAMPC_WERROR=ON -DAMPC_CUDA=EMU
	cmake --build build-emu-asan -j $(JOBS) --target cuda_emu_tests
	cd build-emu-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 AMPC_TEST_QUICK=1 \
		UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -L cuda

test-cuda-emu: deps
	cmake -S . -B build-emu -DCMAKE_BUILD_TYPE=Release -DAMPC_WERROR=ON -DAMPC_CUDA=EMU
	cmake --build build-emu -j $(JOBS) --target cuda_emu_tests
	cd build-emu && ctest --output-on-failure -j $(JOBS) -L cuda

fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) scripts/fuzz.sh

bench: deps build
	bench/run.sh $(BUILD) $(ARGS)

bench-deps:
	scripts/bench-deps.sh

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-asan build-emu build-emu-asan build-fuzz
