/* Moved: the CPU backend owns its vector kernels (backend/cpu/simd.h). */
#include "backend/cpu/simd.h"
