// Stands in for the CUDA Toolkit's <cuda_runtime.h> when a module is compiled as C++ for the
// CPU emulation (common/emulation/cuda_emulation.h says what that is). This folder comes
// first on the include path of the emulated targets only; the GPU build never sees it.
#pragma once

#include "common/emulation/cuda_emulation.h"
