// Asks the CUDA runtime for devices: under qemu-user there is no driver, so it fails cleanly.
#include <cuda_runtime.h>

#include <cstdio>

__global__ void touch(int *p) { *p = 1; }

int main() {
    int runtime = 0, devices = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaError_t err = cudaGetDeviceCount(&devices);
    std::printf("CUDA runtime %d; cudaGetDeviceCount: %s (%d): %s\n", runtime, cudaGetErrorName(err),
                static_cast<int>(err), cudaGetErrorString(err));
    return err == cudaSuccess ? 0 : 3;
}
