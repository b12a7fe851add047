// examples/00_quickstart.cpp — the quick start for builds without nvcc: the same program as 00_quickstart.cu,
// compiled as C++, which runs the CPU host executor.
//
//   build/examples/00_quickstart
#include "00_quickstart.cu"
