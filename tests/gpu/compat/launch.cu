// One kernel launch, and what the runtime said: built here with CUDA 13.5's nvcc twice, as SASS for
// sm_90 (runs on an R580 driver through minor-version compatibility) and as PTX only (compute_90:
// the driver must JIT 13.5's PTX, which an R580 driver cannot: cudaErrorUnsupportedPtxVersion, 222).
#include <cstdio>
#include <cuda_runtime.h>

__global__ void answer(int *p) { *p = 42; }

int main() {
  int runtime = 0, driver = 0, h = 0, *d = nullptr;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  cudaError_t e = cudaMalloc(&d, sizeof(int));
  if (e == cudaSuccess) {
    answer<<<1, 1>>>(d);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
  std::printf("runtime %d, driver %d: %s (%d)%s\n", runtime, driver, cudaGetErrorName(e), (int)e,
              e == cudaSuccess && h == 42 ? ", the kernel ran" : "");
  return e == cudaSuccess && h == 42 ? 0 : 1;
}
