// y = a*x + y with thrust on the device; compiled only (no GPU needed to build).
#include <cuda_profiler_api.h>  // NVIDIA's samples (matrixMul, asyncAPI) include it: the nvcc profile has it
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>   // header-only NVTX (CMake's CUDA::nvtx3)
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/transform.h>

#include <cstdio>

struct saxpy {
    float a;
    __host__ __device__ float operator()(float x, float y) const { return a * x + y; }
};

int main() {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    std::printf("CUDA runtime %d\n", runtime);
    nvtxRangePushA("saxpy");
    cudaProfilerStart();
    thrust::device_vector<float> x(1 << 10, 1.0f), y(1 << 10, 2.0f);
    thrust::transform(x.begin(), x.end(), y.begin(), y.begin(), saxpy{3.0f});
    thrust::host_vector<float> h = y;
    cudaProfilerStop();
    nvtxRangePop();
    std::printf("y[0] = %f\n", static_cast<double>(h[0]));
    return h[0] == 5.0f ? 0 : 1;
}
