// cblas backend: the forward pass (cblas_impl.h), run by the workers (cblas_workers.h).
// One image: three groups (conv1+pool1, conv2+pool2, fc1+ReLU+fc2), each cut into two parts, one
// per thread: of the output channels, each group reading all of the previous one, or, with AVX-512
// where that is faster here (SplitChoice), of the output rows (one_image); each cut moves to the
// thread that runs faster (Balance; split by rows only fc1's); with AVX-512 fc1 reads a copy of its
// weights by halves of its inputs (make_single_weights). Each unit of fc1 also multiplies its rows'
// outputs into fc2's sums over their fixed segments, and the calling thread adds the segments in
// order (fc2's inputs never cross cores: the same bits wherever the cut lies). Batches of more than
// SMALL images, CHUNK at a time: the convolutions one image per unit, then fc1 in parts() units of
// its rows (each unit reads only its share of the 1.6 MB of weights), then fc2 on the calling thread.
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <cblas.h>
#include <x86intrin.h>

#include "cblas_impl.h"

namespace lenet::cblas {
namespace {

// Where fc1's output rows go: row `first` (a unit's first row) on a line's start.
float* hidden_from(Single& a, int first) { return a.hidden + (16 - first % 16) % 16; }

// Unit u's part of the `total` items of group g: unit 0's the first j.cut[g] (Balance); with one
// unit all of them.
struct Part {
    int begin, end;
};
Part part_of(const Single::Job& j, int g, int u, int total) {
    const int cut = j.units == 2 ? j.cut[g] : total;
    return u == 0 ? Part{0, cut} : Part{cut, total};
}

// One unit's part of group g of the image in m.single.job (one_image): of its output channels, or
// split by rows of its output rows; returns the ticks it waited inside (split by rows, fc1), if
// the image is sampled.
uint64_t run_group(Net& m, int g, int u) noexcept {   // a throw here would leave the other unit waiting
    Single& a = m.single;
    const Single::Job& j = a.job;
    const Params& p = m.p;
    const Kernels& k = m.k;
    const auto [r0, r1] = part_of(j, GROUPS - 1, u, HID);   // its rows of fc1
    float* hidden = hidden_from(a, r0);
    float* x = a.x[u];   // each unit pads its own copy: none of its lines crosses cores
    uint64_t waited = 0;
    if (g == 0) std::memcpy(x, j.image, IMG * sizeof(float));
    if (g == 0 && u == 0) a.finite = all_finite(x, IMG);   // the caller, after the job went out: Net::predict
    if (j.rows && g == 0) {
        k.conv1_rows(p[W1].data(), p[B1].data(), x, 4 * u, 4 * u + 8, a.pool1_rows[u]);
    } else if (j.rows && g == 1) {
        k.conv2_rows(p[W2].data(), p[B2].data(), a.pool1_rows[u], u, a.conv2[u], a.pool2_rows[u]);
    } else if (j.rows) {   // fc1 over the unit's own half of flat, then, once the other has it, the other's
        k.fc1_half(m.fc1_halves.data(), p[FB1].data(), a.pool2_rows[u], u, r0, r1, a.fc1_part[u], hidden, false,
                   j.down);
        const uint64_t before = j.sampled ? __rdtsc() : 0;
        spin_until(a.progress[1 - u].groups, j.before + 2);
        if (j.sampled) waited = __rdtsc() - before;
        k.fc1_half(m.fc1_halves.data(), p[FB1].data(), a.pool2_rows[1 - u], 1 - u, r0, r1, a.fc1_part[u], hidden,
                   true, j.down);
    } else if (g == 0) {
        const auto [o0, o1] = part_of(j, 0, u, C1);
        k.conv1_pool(p[W1].data(), p[B1].data(), x, o0, o1, a.conv1, a.pool1, nullptr);
    } else if (g == 1) {
        const auto [o0, o1] = part_of(j, 1, u, C2);
        k.conv2_pool(p[W2].data(), p[B2].data(), a.pool1, o0, o1, a.conv2[u], a.flat, nullptr);
    } else if (k.fc1_both) {   // AVX-512: by halves of flat (Net::make_single_weights), every other image backwards
        k.fc1_both(m.fc1_halves.data(), p[FB1].data(), a.flat, r0, r1, hidden, j.down);
    } else {
        k.fc1_relu(p[F1].data(), p[FB1].data(), a.flat, 1, r0, r1, hidden, j.down);   // every other image backwards
    }
    // The unit's rows of fc1 into fc2's sums over their segments, in both splits.
    if (g == GROUPS - 1)
        for (int s = r0 / FC2_SEG; s < r1 / FC2_SEG; ++s)
            k.fc2_part(m.fc2_rows.data(), hidden, s * FC2_SEG, (s + 1) * FC2_SEG, a.part[s]);
    return waited;
}

// run_group, and in a sampled image the ticks the unit spent computing it (Balance).
void run_counted(Net& m, int g, int u) noexcept {
    Single& a = m.single;
    if (!a.job.sampled) {
        run_group(m, g, u);
        return;
    }
    const uint64_t start = __rdtsc();
    const uint64_t waited = run_group(m, g, u);
    a.ticks[u].busy[g] = __rdtsc() - start - waited;
}

// Before group g a unit waits for the other's group g - 1; split by rows, conv2 waits for nothing
// and fc1 only before the other's half of its inputs (run_group).
bool waits(const Single::Job& j, int g) { return g > 0 && !j.rows; }

// The single-image forward as one job of two units, unit 0 on the calling thread and unit 1 on a
// helper, each running its half of the three groups in turn and waiting, before each group, only
// until the other has finished its half of the one before (the units' progress counts): no job is
// published between groups, so no helper has to see one and claim it (csrc/NOTES.md v22). If no
// helper has claimed unit 1 by the time the caller has finished its half of conv1 (the helpers
// asleep or descheduled), the caller claims it, runs its conv1 half too, and the later groups go
// out as jobs of their own, so that a helper that wakes meanwhile can take their second halves.
// The halves are of the output channels, or, split by rows (SplitChoice), of the output rows:
// each unit then computes the 8 pool1 rows its 4 conv2 rows need, so pool1 never crosses cores and
// conv2 waits for nothing, for a third more conv1; fc1 sums over the unit's own half of flat first
// and waits only for the other's half (csrc/NOTES.md v29, v31). The helper reads the forward from
// m.single.job, never the caller's stack, whose lines the caller keeps writing (csrc/NOTES.md v26).
// With TIMED, each group's wall time (µs) as the caller sees it is appended to times[group], to
// starts, if a helper took unit 1, how long after the forward began it started, and to by_rows its
// form (a separate instantiation: the untimed path reads the clock only in the forwards whose time
// SplitChoice records).
template <bool TIMED>
void one_image(Net& m, const float* image, float* logits, std::vector<double>* times, std::vector<double>* starts,
               std::vector<bool>* by_rows) {
    using clock = std::chrono::steady_clock;
    using us = std::chrono::duration<double, std::micro>;
    Single& a = m.single;
    Single::Job& j = a.job;
    j.image = image;
    j.units = std::min(m.workers.slots(), 2);
    const bool choosing = j.units == 2 && m.k.conv1_rows && m.split == Split::automatic;
    const SplitChoice::Form form =
        choosing ? a.choice.next(a.images) : SplitChoice::Form{j.units == 2 && m.split == Split::rows, false};
    j.rows = form.rows;
    j.down = a.images % 2;
    j.before = a.images * GROUPS;
    j.sampled = j.units == 2 && a.balance.sampled(a.images);
    for (int g = 0; g < GROUPS; ++g) j.cut[g] = a.balance.items(g);
    m.make_single_weights();
    [[maybe_unused]] clock::time_point end[GROUPS + 1];   // end[0]: the forward's start
    clock::time_point start;
    if (TIMED || form.timed) start = clock::now();
    if constexpr (TIMED) end[0] = start;
    bool alone = false;   // the caller claimed unit 1
    m.workers.run(j.units, [&m, &alone, &end](int u, int) {
        Single& s = m.single;
        const Single::Job& j = s.job;
        if (u == 1) {
            if constexpr (TIMED) s.helper_start = clock::now();
            for (int g = 0; g < GROUPS; ++g) {
                if (waits(j, g)) spin_until(s.progress[0].groups, j.before + g);
                run_counted(m, g, 1);
                if (g + 1 < GROUPS) s.progress[1].groups.store(j.before + g + 1, std::memory_order_release);
            }
            return;
        }
        for (int g = 0; g < GROUPS; ++g) {
            run_counted(m, g, 0);
            if (g + 1 == GROUPS) break;   // run() returns once unit 1 has finished
            s.progress[0].groups.store(j.before + g + 1, std::memory_order_release);
            if (j.units == 2 && g == 0 && m.workers.claim(1)) {
                run_group(m, 0, 1);
                alone = true;
            } else if (j.units == 2 && waits(j, g + 1)) {
                spin_until(s.progress[1].groups, j.before + g + 1);
            }
            if constexpr (TIMED) end[g + 1] = clock::now();
            if (alone) break;
        }
    });
    for (int g = 1; alone && g < GROUPS; ++g) {
        m.workers.run(j.units, [&m, g](int u, int) { run_group(m, g, u); });
        if (g + 1 < GROUPS)   // split by rows, fc1 waits on these
            for (auto& progress : a.progress) progress.groups.store(j.before + g + 1, std::memory_order_release);
        if constexpr (TIMED) end[g + 1] = clock::now();
    }
    const int units = j.units;
    for (int o = 0; o < OUT; ++o) {
        float sum = m.p[FB2][o];
        for (int s = 0; s < SEGS; ++s) sum += a.part[s][o];
        logits[o] = sum;
    }
    if (j.sampled && !alone)   // split by rows only fc1 follows the cut
        for (int g = j.rows ? GROUPS - 1 : 0; g < GROUPS; ++g)
            a.balance.after(g, a.ticks[0].busy[g], a.ticks[1].busy[g]);
    const auto stop = TIMED || form.timed ? clock::now() : start;
    if (choosing) a.choice.after(a.images, form, form.timed && !alone, us(stop - start).count());
    ++a.images;
    if constexpr (TIMED) {
        if (units == 2 && !alone) starts->push_back(us(a.helper_start - start).count());
        end[GROUPS] = stop;
        for (int g = 0; g < GROUPS; ++g) times[g].push_back(us(end[g + 1] - end[g]).count());
        by_rows->push_back(j.rows);
    }
}

}  // namespace

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
    scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                      a, lda, b, ldb, beta, c, ldc);
}

void Net::make_single_weights() {
    if (!single_stale) return;
    if (k.fc1_half) {
        fc1_halves.resize(size_t(HID) * FLAT);
        for (int h = 0; h < 2; ++h)
            for (int r = 0; r < HID; ++r) {
                const int q = r / 2, block = q - q % FC1_BLOCK;   // its pair, its block's first pair
                float* to =
                    fc1_halves.data() + (size_t(h) * HID / 2 + block) * C2 * 16 + q % FC1_BLOCK * 16 + r % 2 * 8;
                const float* from = p[F1].data() + size_t(r) * FLAT + h * 8;
                for (int c = 0; c < C2; ++c) std::memcpy(to + c * FC1_BLOCK * 16, from + c * 16, 8 * sizeof(float));
            }
    }
    fc2_rows.assign(size_t(HID) * 16, 0.0f);
    for (int o = 0; o < OUT; ++o)
        for (int h = 0; h < HID; ++h) fc2_rows[size_t(h) * 16 + o] = p[F2][size_t(o) * HID + h];
    single_stale = false;
}

void Net::forward_one(const float* x, float* logits) {
    one_image<false>(*this, x, logits, nullptr, nullptr, nullptr);
}

void Net::time_one(const float* x, int repeats, std::vector<double> times[GROUPS], std::vector<double>& starts,
                   std::vector<bool>& by_rows) {
    float logits[OUT];
    for (int g = 0; g < GROUPS; ++g) times[g].reserve(times[g].size() + repeats);
    starts.reserve(starts.size() + repeats);
    by_rows.reserve(by_rows.size() + repeats);
    for (int r = 0; r < repeats; ++r) one_image<true>(*this, x, logits, times, &starts, &by_rows);
}

Batch& Net::batch_buffers() {
    if (!batch) {
        batch = std::make_unique<Batch>();
        scratch.resize(workers.slots());
    }
    return *batch;
}

void Net::predict(const float* x, int n, float* logits) {
    // One image is checked on the calling thread after its helper has the job, so that reading it
    // from memory overlaps the hand-off (−0.2 µs a call, csrc/NOTES.md v30); the logits of a refused
    // image are never returned. A batch is checked before any work.
    if (n == 1) {
        forward_one(x, logits);
        if (!single.finite) throw std::invalid_argument(std::string("images: ") + NOT_FINITE);
        return;
    }
    if (!all_finite(x, size_t(n) * IMG)) throw std::invalid_argument(std::string("images: ") + NOT_FINITE);
    if (n <= SMALL) {
        for (int b = 0; b < n; ++b) forward_one(x + size_t(b) * IMG, logits + size_t(b) * OUT);
        return;
    }
    for (int b = 0; b < n; b += CHUNK)
        forward_chunk(x + size_t(b) * IMG, std::min(CHUNK, n - b), logits + size_t(b) * OUT, false);
}

void Net::forward_chunk(const float* x, int n, float* logits, bool train) {
    Batch& a = batch_buffers();
    workers.run(n, [&](int b, int slot) {                              // conv1+pool1, conv2+pool2
        Scratch& s = scratch[slot];
        float* pool1 = a.pool1.data() + size_t(b) * POOL1S;
        std::memcpy(s.x.data(), x + size_t(b) * IMG, IMG * sizeof(float));
        k.conv1_pool(p[W1].data(), p[B1].data(), s.x.data(), 0, C1, s.conv1.data(), pool1,
                     train ? a.arg1.data() + size_t(b) * POOL1 : nullptr);
        k.conv2_pool(p[W2].data(), p[B2].data(), pool1, 0, C2, s.conv2.data(), a.flat.data() + size_t(b) * FLAT,
                     train ? a.arg2.data() + size_t(b) * FLAT : nullptr);
    });
    const int parts = std::min(this->parts(), HID / 4);
    workers.run(parts, [&](int u, int) {                               // fc1 + ReLU, by rows
        k.fc1_relu(p[F1].data(), p[FB1].data(), a.flat.data(), n, u * HID / parts, (u + 1) * HID / parts, a.hid.data(),
                   false);
    });
    k.fc2(p[F2].data(), p[FB2].data(), a.hid.data(), n, 0, OUT, logits);   // fc2
}

}  // namespace lenet::cblas
