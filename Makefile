# lmtrain — build, test, run.   make | make test | make run | make deps
#
# Tools and flags first, then sources by folder (wildcards: a new file in a folder needs no edit
# here), then targets. EXTRA_CXXFLAGS adds flags (e.g. -I.deps/root/usr/include on machines where
# TOML++ was unpacked by hand); EXTRA_NVCCFLAGS adds nvcc flags (dev/tune_flash.py's tile
# candidates).

CXX        := mpicxx
CXXFLAGS   := -std=c++20 -O2 -g -Wall -Wextra -Werror -Iinclude -MMD -MP -DOMPI_SKIP_MPICXX=1 $(EXTRA_CXXFLAGS)
LDLIBS     :=
CUDA_HOME  ?= /usr/local/cuda
NVCC       := $(CUDA_HOME)/bin/nvcc
# Real targets for A100 (sm_80) and H100/H200 (sm_90a: Hopper's own instructions, wgmma, which
# the FlashAttention kernels of cuda/attention/flash_sm90_*.cu use).
CUDA_ARCHS := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a
NVCCFLAGS  := -std=c++20 -O3 -Iinclude $(CUDA_ARCHS) -MMD -MP $(addprefix -Xcompiler ,$(EXTRA_CXXFLAGS)) \
              $(EXTRA_NVCCFLAGS)
# With the CUDA toolkit present the build links CUDA and NCCL (GPU selection, NCCL bootstrap);
# without it lmtrain is CPU-only and the GPU tests are skipped.
ifneq ($(wildcard $(NVCC)),)
CXXFLAGS   += -DLMTRAIN_CUDA -isystem $(CUDA_HOME)/include
CUPTI_LIB  := $(CUDA_HOME)/extras/CUPTI/lib64
LDLIBS     += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -L$(CUPTI_LIB) -Wl,-rpath,$(CUPTI_LIB) \
              -lnccl -lcublasLt -lcupti -lcudart
endif

# Open MPI refuses root unless told; CI and the GPU machines run as root. --oversubscribe lets
# the 4-rank tests run on a 2-core machine.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_btl_vader_single_copy_mechanism := none
MPIRUN     := mpirun -q --oversubscribe
PYTHON     := /usr/bin/python3

BUILD      := build
LIB_SRCS   := $(filter-out src/main.cpp,$(wildcard src/*.cpp src/*/*.cpp))
CUDA_SRCS  := $(if $(wildcard $(NVCC)),$(wildcard cuda/*.cu cuda/*/*.cu))
# A test binary per tier of tests/ (tests/run_all.sh): unit (in-process, CPU), gpu (skipped
# without a GPU), e2e (whole runs of build/lmtrain), each with tests/main.cpp; mpi has its own.
LIB_OBJS   := $(LIB_SRCS:%.cpp=$(BUILD)/obj/%.o) $(CUDA_SRCS:%.cu=$(BUILD)/obj/%.o)
tier_objs   = $(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard tests/$(1)/*.cpp))
TEST_MAIN  := $(BUILD)/obj/tests/main.o
# The host compiler's flags and the libraries, as this build last used them: when they change (a
# toolkit found or gone, CUDA_HOME, EXTRA_CXXFLAGS) every object is rebuilt, rather than objects of
# a CPU-only build linked with a CUDA one's. nvcc's own flags are left out: dev/tune_flash.py
# rebuilds one kernel's object under other EXTRA_NVCCFLAGS and CUDA_ARCHS.
FLAGS      := $(BUILD)/flags
FLAGS_NOW  := $(CXX) $(CXXFLAGS) $(LDLIBS)
$(shell mkdir -p $(BUILD) && [ "$$(cat $(FLAGS) 2>/dev/null)" = '$(FLAGS_NOW)' ] || \
        echo '$(FLAGS_NOW)' > $(FLAGS))
# The checkout's `git describe` (-dirty where files differ from the commit; "unknown" outside git),
# which --version prints: written to build/version when it changes, so that only src/version.cpp
# is compiled again.
VERSION    := $(BUILD)/version
VERSION_NOW := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(shell [ "$$(cat $(VERSION) 2>/dev/null)" = '$(VERSION_NOW)' ] || echo '$(VERSION_NOW)' > $(VERSION))
$(BUILD)/obj/src/version.o: $(VERSION)
$(BUILD)/obj/src/version.o: CXXFLAGS += -DLMT_VERSION='"$(VERSION_NOW)"'

# Debian packages: to build, to test (PyTorch is the independent reference; matplotlib draws
# the sweeps' PNGs). tests/slurm/run.sh installs munge and Slurm itself.
DEPS       := build-essential openmpi-bin libopenmpi-dev libtomlplusplus-dev doctest-dev
TEST_DEPS  := python3-torch python3-numpy python3-matplotlib

.PHONY: all test run deps clean
all: $(BUILD)/lmtrain $(BUILD)/tests $(BUILD)/tests_gpu $(BUILD)/tests_e2e $(BUILD)/tests_mpi

$(BUILD)/liblmtrain.a: $(LIB_OBJS)
	ar rcs $@ $^

$(BUILD)/lmtrain: $(BUILD)/obj/src/main.o $(BUILD)/liblmtrain.a
	$(CXX) -o $@ $^ $(LDLIBS)

$(BUILD)/tests: $(TEST_MAIN) $(call tier_objs,unit) $(BUILD)/liblmtrain.a
	$(CXX) -o $@ $^ $(LDLIBS)

$(BUILD)/tests_gpu: $(TEST_MAIN) $(call tier_objs,gpu) $(BUILD)/liblmtrain.a
	$(CXX) -o $@ $^ $(LDLIBS)

$(BUILD)/tests_e2e: $(TEST_MAIN) $(call tier_objs,e2e) $(BUILD)/liblmtrain.a
	$(CXX) -o $@ $^ $(LDLIBS)

$(BUILD)/tests_mpi: $(call tier_objs,mpi) $(BUILD)/liblmtrain.a
	$(CXX) -o $@ $^ $(LDLIBS)

$(BUILD)/obj/%.o: %.cpp $(FLAGS) | $(BUILD)/.deps-ok
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu $(FLAGS) | $(BUILD)/.deps-ok
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# Installs only what is missing (apt-get, through sudo when not root); the build needs DEPS, the
# tests TEST_DEPS too.
deps:
	@scripts/install_deps.sh $(DEPS) $(TEST_DEPS)

$(BUILD)/.deps-ok:
	@scripts/install_deps.sh $(DEPS)
	@mkdir -p $(BUILD) && touch $@

test: all
	@scripts/install_deps.sh $(TEST_DEPS)
	MPIRUN="$(MPIRUN)" PYTHON=$(PYTHON) tests/run_all.sh

run: $(BUILD)/lmtrain
	$(MPIRUN) -np 2 $(BUILD)/lmtrain --config configs/train.toml

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
