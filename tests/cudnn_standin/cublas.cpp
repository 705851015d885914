// The stand-in cuBLAS: handle, stream, workspace, math mode and Sgemm in BLAS column-major semantics.
// Argument rules from the cuBLAS documentation (cublasSgemm: CUBLAS_STATUS_INVALID_VALUE "if m, n, k < 0
// or if transa, transb != CUBLAS_OP_N, CUBLAS_OP_C, CUBLAS_OP_T or if lda < max(1, m) if transa ==
// CUBLAS_OP_N and lda < max(1, k) otherwise or if ldb < max(1, k) if transb == CUBLAS_OP_N and
// ldb < max(1, n) otherwise or if ldc < max(1, m)"), i.e. the reference BLAS xerbla checks.
#include <algorithm>
#include <vector>

#include "standin.h"

struct cublasContext {
    cudaStream_t stream = nullptr;
    void* workspace = nullptr;   // user-owned (cublasSetWorkspace), or none: cuBLAS' own pool
    size_t workspace_bytes = 0;
};

using namespace lenet::emu;

namespace {
constexpr int INVALID = CUBLAS_STATUS_INVALID_VALUE;

cublasContext& context(cublasHandle_t h) {
    need_alive(h, "cublasHandle", CUBLAS_STATUS_NOT_INITIALIZED, "handle");
    return *h;
}
}  // namespace

const char* cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        default: return "CUBLAS_STATUS_(other)";
    }
}
const char* cublasGetStatusString(cublasStatus_t s) { return describe(s, cublasGetStatusName(s), true); }

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
    return create_object<cublasStatus_t>(h, "cublasHandle", "cublasCreate", INVALID);
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    return destroy_object<cublasStatus_t>(h, "cublasHandle", "cublasDestroy", CUBLAS_STATUS_NOT_INITIALIZED);
}

// "cublasSetStream ... resets the user-provided workspace to the default workspace pool"
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    return api<cublasStatus_t>("cublasSetStream", [&] {
        cublasContext& c = context(h);
        need_stream(s, INVALID);
        c.stream = s;
        c.workspace = nullptr;
        c.workspace_bytes = 0;
    });
}

// "The workspace pointer has to be aligned to at least 256 bytes, otherwise CUBLAS_STATUS_INVALID_VALUE"
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* ws, size_t bytes) {
    return api<cublasStatus_t>("cublasSetWorkspace", [&] {
        cublasContext& c = context(h);
        require(reinterpret_cast<uintptr_t>(ws) % 256 == 0, INVALID, "workspace is not aligned to 256 bytes");
        if (bytes) need_device(ws, bytes, INVALID, "workspace");
        c.workspace = ws;
        c.workspace_bytes = bytes;
    });
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    return api<cublasStatus_t>("cublasSetMathMode", [&] {
        context(h);
        require(mode == CUBLAS_DEFAULT_MATH || mode == CUBLAS_PEDANTIC_MATH, CUBLAS_STATUS_NOT_SUPPORTED,
                "the stand-in implements FP32 math (CUBLAS_DEFAULT_MATH, CUBLAS_PEDANTIC_MATH) only");
    });
}

// C = alpha op(A) op(B) + beta C, column-major; "when beta is zero, C need not be set on input" (BLAS).
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
    return api<cublasStatus_t>("cublasSgemm", [&] {
        cublasContext& c = context(h);
        const auto op_ok = [](cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; };
        require(op_ok(ta), INVALID, "transa: not CUBLAS_OP_N, _T or _C");
        require(op_ok(tb), INVALID, "transb: not CUBLAS_OP_N, _T or _C");
        require(m >= 0 && n >= 0 && k >= 0, INVALID, "m, n, k must not be negative");
        const bool na = ta == CUBLAS_OP_N, nb = tb == CUBLAS_OP_N;
        const int rows_a = na ? m : k, cols_a = na ? k : m, rows_b = nb ? k : n, cols_b = nb ? n : k;
        const auto ld = [](const char* name, int got, int rows, const char* rows_name) {
            require(got >= std::max(1, rows), INVALID,
                    std::string(name) + " = " + std::to_string(got) + " < max(1, " + rows_name + " = " +
                        std::to_string(rows) + ")");
        };
        ld("lda", lda, rows_a, na ? "m (transa = N)" : "k (transa = T)");
        ld("ldb", ldb, rows_b, nb ? "k (transb = N)" : "n (transb = T)");
        ld("ldc", ldc, m, "m");
        const float a = host_scalar(alpha, INVALID, "alpha"), b = host_scalar(beta, INVALID, "beta");
        if (m == 0 || n == 0) return;   // quick return, as the reference BLAS
        const size_t a_bytes = (size_t(lda) * (cols_a - 1) + rows_a) * 4 * (k > 0),
                     b_bytes = (size_t(ldb) * (cols_b - 1) + rows_b) * 4 * (k > 0),
                     c_bytes = (size_t(ldc) * (n - 1) + m) * 4;
        if (a_bytes) need_device(A, a_bytes, INVALID, "A (" + std::to_string(rows_a) + " x " + std::to_string(cols_a) +
                                                         ", lda " + std::to_string(lda) + ")");
        if (b_bytes) need_device(B, b_bytes, INVALID, "B (" + std::to_string(rows_b) + " x " + std::to_string(cols_b) +
                                                         ", ldb " + std::to_string(ldb) + ")");
        need_device(C, c_bytes, INVALID, "C (" + std::to_string(m) + " x " + std::to_string(n) + ", ldc " +
                                             std::to_string(ldc) + ")");
        // BLAS: an output argument must not be associated with any other argument (Fortran aliasing rule)
        require(!(a_bytes && overlap(C, c_bytes, A, a_bytes)) && !(b_bytes && overlap(C, c_bytes, B, b_bytes)), INVALID,
                "C overlaps A or B: BLAS outputs must not alias inputs");
        // cuBLAS, CUDA graphs support: capture uses the workspace set by cublasSetWorkspace, else cuBLAS
        // would allocate its default workspace pool during the capture
        if (capturing(c.stream))
            require(c.workspace != nullptr, CUBLAS_STATUS_NOT_SUPPORTED,
                    "captured without a user workspace (cublasSetWorkspace after cublasSetStream)");
        enqueue(c.stream, [=] {
            if (a_bytes) {
                need_device(A, a_bytes, cudaErrorIllegalAddress, "A (at execution)");
                for (int col = 0; col < cols_a; ++col) need_written(A + size_t(col) * lda, size_t(rows_a), cudaErrorLaunchFailure, "A");
            }
            if (b_bytes) {
                need_device(B, b_bytes, cudaErrorIllegalAddress, "B (at execution)");
                for (int col = 0; col < cols_b; ++col) need_written(B + size_t(col) * ldb, size_t(rows_b), cudaErrorLaunchFailure, "B");
            }
            need_device(C, c_bytes, cudaErrorIllegalAddress, "C (at execution)");
            if (b != 0.0f)
                for (int col = 0; col < n; ++col)
                    need_written(C + size_t(col) * ldc, size_t(m), cudaErrorLaunchFailure, "C (read because beta != 0)");
            std::vector<double> acc(static_cast<size_t>(m));
            for (int j = 0; j < n; ++j) {
                const auto bv = [&](int p) -> double { return nb ? B[p + size_t(j) * ldb] : B[j + size_t(p) * ldb]; };
                std::fill(acc.begin(), acc.end(), 0.0);
                if (na)   // columns of A, contiguous
                    for (int p = 0; p < k; ++p)
                        for (int i = 0; i < m; ++i) acc[size_t(i)] += A[i + size_t(p) * lda] * bv(p);
                else      // rows of op(A) are columns of A: dot products
                    for (int i = 0; i < m; ++i)
                        for (int p = 0; p < k; ++p) acc[size_t(i)] += A[p + size_t(i) * lda] * bv(p);
                float* cj = C + size_t(j) * ldc;
                for (int i = 0; i < m; ++i)
                    cj[i] = b == 0.0f ? a * float(acc[size_t(i)]) : a * float(acc[size_t(i)]) + b * cj[i];
                mark_written(cj, size_t(m) * sizeof(float));
            }
        }, "cublasSgemm");
    });
}
