// cblas backend: the CpuNet interface (cblas_net.h) over its parts: vector kernels (cblas_kernels),
// workers (cblas_workers), forward (cblas_forward) and training (cblas_backward); what each
// version bought is in csrc/NOTES.md. Here: construction, the one-call-at-a-time lock, and fork().
// fork(): every live net's lock is taken before fork() (waiting for calls in other threads to
// finish) and released after it in both processes; in the child, the nets forget their helper
// threads (only the forking thread survives) and start new ones when next needed.
#include "cblas_net.h"

#include <cblas.h>
#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>

#include "cblas_impl.h"

namespace lenet {
using namespace cblas;

namespace {

const int BLAS_THREADS = scipy_openblas_get_num_threads();   // OpenBLAS's default, read at load

struct Registry {
    std::mutex mu;
    std::set<Net*> nets;
};
Registry& registry() {
    static Registry* r = new Registry;   // never destroyed: a net may outlive static destructors
    return *r;
}

void before_fork() {
    registry().mu.lock();
    for (auto* net : registry().nets) net->mu.lock();
}
void after_fork_in_parent() {
    for (auto* net : registry().nets) net->mu.unlock();
    registry().mu.unlock();
}
void after_fork_in_child() {
    for (auto* net : registry().nets) {
        net->workers.forget_helpers();
        net->mu.unlock();
    }
    registry().mu.unlock();
}

void enlist(Net* net) {
    static std::once_flag once;
    std::call_once(once, [] {
        if (pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) != 0)
            throw std::runtime_error("pthread_atfork failed");
    });
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().nets.insert(net);
}

void delist(Net* net) {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().nets.erase(net);
}

}  // namespace

namespace cblas {
Net::Net(int threads, const std::string& isa, Split split, bool balance)
    : k(kernels(isa)), split(split), workers(threads) {
    scipy_openblas_set_num_threads(1);   // the parallelism is ours
    single.balance.set_blocks({k.conv1_block, k.conv2_block, FC2_SEG}, {C1, C2, HID});
    single.balance.moving = balance;
}
}  // namespace cblas

CpuNet::CpuNet(const float* const params[NUM_TENSORS], int threads, const std::string& isa, const std::string& split,
               bool balance) {
    if (threads < 0 || threads > 256) throw std::invalid_argument("threads: expected 0 (OpenBLAS default) to 256");
    if (split != "auto" && split != "channels" && split != "rows")
        throw std::invalid_argument("split: expected auto, channels or rows, got '" + split + "'");
    const Split how = split == "auto" ? Split::automatic : split == "rows" ? Split::rows : Split::channels;
    impl_ = std::make_unique<Net>(threads > 0 ? threads : std::max(BLAS_THREADS, 1), isa, how, balance);
    if (how == Split::rows && !impl_->k.conv1_rows)
        throw std::invalid_argument(std::string("split: rows needs the avx512 kernels, not ") + impl_->k.isa);
    for (int t = 0; t < NUM_TENSORS; ++t) {
        const int len = size(t) / rows(t);
        impl_->p[t].assign(size_t(rows(t)) * stride(t), 0.0f);
        for (int r = 0; r < rows(t); ++r) std::copy_n(params[t] + r * len, len, impl_->p[t].data() + r * stride(t));
    }
    enlist(impl_.get());
}

CpuNet::~CpuNet() { delist(impl_.get()); }

int CpuNet::threads() const { return impl_->workers.slots(); }
const char* CpuNet::isa() const { return impl_->k.isa; }

namespace {
constexpr const char* CUT_NAMES[cblas::GROUPS] = {"conv1 channels", "conv2 channels", "fc1 rows"};
}

std::array<int, 3> CpuNet::cuts() {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const cblas::Balance& b = impl_->single.balance;
    std::array<int, 3> out;
    for (int g = 0; g < cblas::GROUPS; ++g) out[g] = b.items(g);
    return out;
}

void CpuNet::set_cuts(const std::array<int, 3>& cuts) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    cblas::Balance& b = impl_->single.balance;
    for (int g = 0; g < cblas::GROUPS; ++g) {   // all checked before any is set
        const int c = cuts[g], size = b.size[g], last = (b.blocks[g] - 1) * size;
        if (c % size || c < size || c > last)
            throw std::invalid_argument("cuts: " + std::string(CUT_NAMES[g]) + " expected a multiple of " +
                                        std::to_string(size) + " from " + std::to_string(size) + " to " +
                                        std::to_string(last) + " (" + impl_->k.isa + "), got " + std::to_string(c));
    }
    for (int g = 0; g < cblas::GROUPS; ++g) b.cut[g] = cuts[g] / b.size[g], b.kept[g] = 0;   // the old cut's samples go
}

void CpuNet::predict(const float* images, int n, float* logits) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->predict(images, n, logits);
}

double CpuNet::train_step(const float* images, const int32_t* labels, int n, float lr) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->train_step(images, labels, n, lr);
}

std::vector<std::pair<std::string, std::vector<double>>> CpuNet::layer_times(const float* image, int repeats,
                                                                             std::vector<double>& helper_starts,
                                                                             std::vector<bool>& by_rows) {
    std::vector<double> times[GROUPS];
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->time_one(image, repeats, times, helper_starts, by_rows);
    }
    std::vector<std::pair<std::string, std::vector<double>>> out;
    for (int g = 0; g < GROUPS; ++g) out.emplace_back(GROUP_NAMES[g], std::move(times[g]));
    return out;
}

void CpuNet::parameters(float* const out[NUM_TENSORS]) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (int t = 0; t < NUM_TENSORS; ++t) {
        const int len = size(t) / rows(t);
        for (int r = 0; r < rows(t); ++r) std::copy_n(impl_->p[t].data() + r * stride(t), len, out[t] + r * len);
    }
}

const char* blas_config() { return scipy_openblas_get_config(); }

}  // namespace lenet
