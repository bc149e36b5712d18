// A program that uses a --with product of a cudaredist tree: compiled and linked with the tree's
// nvcc (tests/e2e/test_products_e2e.py), and run on a GPU machine by tests/gpu/products/product_check.sh.
// Without arguments it calls only the product's version function (no GPU needed); with "gpu" it
// also makes one real call of the library on the device.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#if defined(CHECK_CUDNN)
#include <cudnn.h>
static int check(bool gpu) {
    std::printf("cuDNN %zu (headers %d.%d.%d), built against CUDA runtime %zu\n", cudnnGetVersion(),
                CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, cudnnGetCudartVersion());
    if (!gpu) return 0;
    cudnnHandle_t handle;
    cudnnStatus_t st = cudnnCreate(&handle);
    if (st != CUDNN_STATUS_SUCCESS) { std::printf("cudnnCreate: %s\n", cudnnGetErrorString(st)); return 3; }
    // one real operation: y = relu(x) on a 1x1x2x2 tensor
    float host[4] = {-1.f, 2.f, -3.f, 4.f}, out[4] = {};
    float *x = nullptr, *y = nullptr;
    cudaMalloc(&x, sizeof host); cudaMalloc(&y, sizeof host);
    cudaMemcpy(x, host, sizeof host, cudaMemcpyHostToDevice);
    cudnnTensorDescriptor_t desc; cudnnCreateTensorDescriptor(&desc);
    cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 2, 2);
    cudnnActivationDescriptor_t act; cudnnCreateActivationDescriptor(&act);
    cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0);
    const float one = 1.f, zero = 0.f;
    st = cudnnActivationForward(handle, act, &one, desc, x, &zero, desc, y);
    cudaMemcpy(out, y, sizeof out, cudaMemcpyDeviceToHost);
    std::printf("cudnnActivationForward(relu): %s -> %g %g %g %g\n", cudnnGetErrorString(st),
                out[0], out[1], out[2], out[3]);
    cudnnDestroy(handle);
    return st == CUDNN_STATUS_SUCCESS && out[0] == 0.f && out[3] == 4.f ? 0 : 4;
}
#else
#include <cusparseLt.h>
static int check(bool gpu) {
    int major = -1, minor = -1, patch = -1;
    if (cusparseLtGetProperty(MAJOR_VERSION, &major) != CUSPARSE_STATUS_SUCCESS) return 2;
    cusparseLtGetProperty(MINOR_VERSION, &minor);
    cusparseLtGetProperty(PATCH_LEVEL, &patch);
    std::printf("cuSPARSELt %d.%d.%d\n", major, minor, patch);
    if (!gpu) return 0;
    cusparseLtHandle_t handle;
    cusparseStatus_t st = cusparseLtInit(&handle);
    if (st != CUSPARSE_STATUS_SUCCESS) { std::printf("cusparseLtInit: status %d\n", (int)st); return 3; }
    int version = 0;
    st = cusparseLtGetVersion(&handle, &version);
    std::printf("cusparseLtInit + cusparseLtGetVersion on the device: status %d, version %d\n", (int)st, version);
    cusparseLtDestroy(&handle);
    return st == CUSPARSE_STATUS_SUCCESS && version > 0 ? 0 : 4;
}
#endif

int main(int argc, char** argv) {
    return check(argc > 1 && std::strcmp(argv[1], "gpu") == 0);
}
