// A plain program against the tree's cuBLAS: SGEMM on the GPU, checked against the CPU.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#define CK(x) do { auto e = (x); if (e) { std::printf("%s failed: %d\n", #x, (int)e); return 1; } } while (0)
int main() {
  const int n = 512; std::vector<float> A(n*n), B(n*n), C(n*n), R(n*n, 0.f);
  for (int i = 0; i < n*n; ++i) { A[i] = (i % 7) * 0.25f; B[i] = (i % 5) * 0.5f - 1.f; }
  for (int i = 0; i < n; ++i) for (int k = 0; k < n; ++k) for (int j = 0; j < n; ++j) R[i + j*n] += A[i + k*n] * B[k + j*n];
  float *a, *b, *c; CK(cudaMalloc(&a, n*n*4)); CK(cudaMalloc(&b, n*n*4)); CK(cudaMalloc(&c, n*n*4));
  CK(cudaMemcpy(a, A.data(), n*n*4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(b, B.data(), n*n*4, cudaMemcpyHostToDevice));
  cublasHandle_t h; CK(cublasCreate(&h)); int v; CK(cublasGetVersion(h, &v));
  float one = 1, zero = 0; CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
  CK(cudaMemcpy(C.data(), c, n*n*4, cudaMemcpyDeviceToHost));
  double err = 0; for (int i = 0; i < n*n; ++i) err = std::fmax(err, std::fabs(C[i] - R[i]));
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0)); int rt; CK(cudaRuntimeGetVersion(&rt));
  std::printf("cuBLAS %d on %s (sm_%d%d), cudart %d: %dx%d SGEMM max |gpu - cpu| = %g\n", v, p.name, p.major, p.minor, rt, n, n, err);
  cublasDestroy(h); return err < 1e-2 ? 0 : 1;
}
