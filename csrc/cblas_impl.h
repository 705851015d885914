// cblas backend, internal: what a net holds (parameters, kernels, workers, buffers), and the
// forward (cblas_forward.cpp) and training (cblas_backward.cpp) passes over it.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "cblas_kernels.h"
#include "cblas_net.h"
#include "cblas_workers.h"

namespace lenet::cblas {

// Allocates arrays on cache lines (64 bytes: a vector load of an aligned row never splits a
// line, which halved sparse_rows' time, csrc/NOTES.md v15), and those of 1 MB or more on 2 MB
// boundaries with a transparent huge page asked for (madvise; a hint the kernel may ignore): fc1's
// 1.6 MB of weights then lie in physically contiguous memory, so each core's half spreads evenly
// over the sets of its L2. With 4 KB pages some sets overflowed and fc1 read part of its half
// from L3 (v11).
template <class T>
struct AlignedAllocator {
    using value_type = T;
    static constexpr size_t LINE = 64, LARGE = size_t(1) << 20, HUGE = size_t(2) << 20;
    AlignedAllocator() = default;
    template <class U>
    AlignedAllocator(const AlignedAllocator<U>&) {}
    static size_t rounded(size_t n, size_t to) { return (n * sizeof(T) + to - 1) / to * to; }
    T* allocate(size_t n) {
        const size_t align = n * sizeof(T) >= LARGE ? HUGE : LINE, bytes = rounded(n, align);
        void* p = std::aligned_alloc(align, bytes);
        if (!p) throw std::bad_alloc();
        if (align == HUGE) madvise(p, bytes, MADV_HUGEPAGE);
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) { std::free(p); }
    template <class U>
    bool operator==(const AlignedAllocator<U>&) const { return true; }
    template <class U>
    bool operator!=(const AlignedAllocator<U>&) const { return false; }
};

template <class T>
using Array = std::vector<T, AlignedAllocator<T>>;
using Params = Array<float>[NUM_TENSORS];

constexpr int CHUNK = 64;    // a batch is processed CHUNK images at a time
constexpr int SMALL = 4;     // batches up to this size are predicted image by image

// The fused groups of one single-image forward, in order (layer_times).
constexpr int GROUPS = 3;
constexpr std::array<const char*, GROUPS> GROUP_NAMES = {"conv1+pool1", "conv2+pool2", "fc1+fc2"};

// Parameter tensor t here: rows of its canonical layout, each padded to stride(t) floats (the conv
// weights, for whole vectors in the kernels; the padding stays zero).
constexpr int rows(int t) { return SHAPES[t][0]; }
constexpr int stride(int t) { return t == W1 ? W1S : t == W2 ? W2S : size(t) / rows(t); }
constexpr size_t stored(int t) { return size_t(rows(t)) * stride(t); }

// Split::automatic (AVX-512, two threads): each image's form, by the times of both forms on this
// machine, in this process (csrc/NOTES.md v33). Every SAMPLE_EVERY-th image of the form in use is
// timed; from image FIRST_TRIAL on, every TRIAL_EVERY images the other form runs TRIAL images in a
// row, timed after the first TRIAL_SKIP (each form's data come back into the caches after a
// switch: the form in use is not timed either for TRIAL_SKIP images after a trial). At a trial's end the
// other form wins if the median of its last KEEP times is lower than the form in use's; after WINS
// wins in a row it is the form in use. A net starts by channels. Only forwards whose second half a
// helper took are recorded (one thread's time says nothing of the split).
struct SplitChoice {
    static constexpr int SAMPLE_EVERY = 8, KEEP = 16, TRIAL = 24, TRIAL_SKIP = 4, WINS = 2;
    static constexpr uint64_t FIRST_TRIAL = KEEP * SAMPLE_EVERY, TRIAL_EVERY = 4096;
    struct Form {
        bool rows, timed;
    };
    // Image n's form (n counts the net's single images from 0), and whether to time it.
    Form next(uint64_t n) const {
        const uint64_t k = in_trial(n);
        if (k < TRIAL) return {!rows, k >= TRIAL_SKIP};
        return {rows, n % SAMPLE_EVERY == 0 && k >= TRIAL + TRIAL_SKIP};
    }
    // After image n: its time (µs) in form f, where timed and a helper took its second half.
    void after(uint64_t n, Form f, bool record, double us) {
        if (record) times[f.rows][kept[f.rows]++ % KEEP] = us;
        if (in_trial(n) != TRIAL - 1 || !kept[0] || !kept[1]) return;
        wins = median(!rows) < median(rows) ? wins + 1 : 0;
        if (wins == WINS) {
            rows = !rows;
            wins = 0;
        }
    }
    static uint64_t in_trial(uint64_t n) {   // image n's place in its trial; TRIAL_EVERY: none
        return n >= FIRST_TRIAL ? (n - FIRST_TRIAL) % TRIAL_EVERY : TRIAL_EVERY;
    }
    double median(bool form) const {
        const int n = int(std::min<uint64_t>(kept[form], KEEP));
        double t[KEEP];
        std::copy_n(times[form], n, t);
        std::nth_element(t, t + n / 2, t + n);
        return t[n / 2];
    }
    bool rows = false;            // the form in use
    int wins = 0;                 // the other form's wins in a row
    double times[2][KEEP] = {};   // each form's last KEEP recorded times, a ring
    uint64_t kept[2] = {0, 0};    // times recorded per form (64 bits: an int overflows within days)
};

// fc2 over one image's hidden units in SEGS fixed segments of FC2_SEG, each segment's sums kept
// apart and added in segment order: the same bits however the segments fall to the units.
constexpr int FC2_SEG = 50, SEGS = HID / FC2_SEG;
static_assert(HID % FC2_SEG == 0 && FC2_SEG % (2 * FC1_BLOCK) == 0, "whole segments of whole fc1 blocks");

// Where one image's work is cut between its two units (csrc/NOTES.md v46): of each group g, unit 0
// takes the first cut[g] of blocks[g] blocks (conv1's and conv2's output channels in their kernels'
// channel blocks, fc1's rows by FC2_SEG), unit 1 the rest; both start at half. The split by rows
// cuts only fc1 this way. In every SAMPLE_EVERY-th image each unit counts the ticks it spent
// computing each group, its waits left out; after KEEP such images of a group its cut moves by one
// block if, at the median of the units' speed ratios, the slower unit would then finish more than
// GAIN sooner. A vCPU that the host slows (its hyperthread sibling busy) so hands work to the
// other, and takes it back once it runs at full speed again.
// With `moving` false the cuts stay where they are set (CpuNet::set_cuts).
struct Balance {
    static constexpr int SAMPLE_EVERY = 8, KEEP = 8;
    static constexpr double GAIN = 0.03;
    bool sampled(uint64_t image) const { return moving && image % SAMPLE_EVERY == SAMPLE_EVERY / 2; }
    // The ticks unit 0 and unit 1 computed group g of a sampled image in, with the cut in force.
    void after(int g, uint64_t ticks0, uint64_t ticks1) {
        const int n = blocks[g], k = cut[g];
        if (!ticks0 || !ticks1) return;
        ratio[g][kept[g]++] = double(k) / double(ticks0) * double(ticks1) / double(n - k);
        if (kept[g] < KEEP) return;
        kept[g] = 0;
        std::nth_element(ratio[g], ratio[g] + KEEP / 2, ratio[g] + KEEP);
        const double speed = ratio[g][KEEP / 2];   // unit 0's blocks per tick over unit 1's
        auto span = [&](int c) { return std::max(c / speed, double(n - c)); };   // in unit 1's block times
        if (k + 1 < n && span(k + 1) < (1 - GAIN) * span(k)) ++cut[g];
        else if (k > 1 && span(k - 1) < (1 - GAIN) * span(k)) --cut[g];
    }
    int items(int g) const { return cut[g] * size[g]; }   // unit 0's channels or rows of group g
    // Group g's `items` (channels, rows) in blocks of block[g] items, cut at half.
    void set_blocks(const int (&block)[GROUPS], const int (&items)[GROUPS]) {
        for (int g = 0; g < GROUPS; ++g) size[g] = block[g], blocks[g] = items[g] / block[g], cut[g] = blocks[g] / 2;
    }
    bool moving = true;
    int size[GROUPS] = {1, 1, 1};   // items a block
    int blocks[GROUPS] = {2, 2, 2};
    int cut[GROUPS] = {1, 1, 1};
    double ratio[GROUPS][KEEP] = {};
    int kept[GROUPS] = {};
};

// One image's activations for the single-image forward (split over two workers).
struct Single {
    alignas(64) float x[2][XPAD] = {};   // one padded copy of the image per unit of conv1
    alignas(64) float conv1[CONV1S], pool1[POOL1], flat[FLAT];
    alignas(64) float hidden[HID + 16];  // each unit's rows on lines of its own (one_image)
    alignas(64) float conv2[2][CONV2S];  // one scratch per unit of conv2, after the rest (csrc/NOTES.md v21)
    // split by rows: each unit's own pool1 (its 8 rows), pool2 half (C2, 8: its half of flat) and
    // fc1's sums over that half (8 per row, Kernels::fc1_half)
    alignas(64) float pool1_rows[2][POOL1], pool2_rows[2][C2 * 8];
    alignas(64) float fc1_part[2][HID * 8];
    struct alignas(64) Progress {        // groups a unit has finished, counted over all images
        std::atomic<uint64_t> groups{0};
    } progress[2];
    uint64_t images = 0;                 // images forwarded (the caller's count)
    bool finite = true;                  // the last image had no NaN or infinity (checked by the caller)
    SplitChoice choice;                  // Split::automatic
    // The forward in progress as the helper reads it, written by the caller before the job goes out;
    // the helper's start; each unit's share of fc2 (its rows of fc1 are its inputs of fc2): each on
    // lines of its own, none written by both cores (csrc/NOTES.md v26).
    struct alignas(64) Job {
        const float* image;
        uint64_t before;                 // both units' progress counts before this image
        int units;
        bool rows;                       // split by rows
        bool down;                       // fc1's weights read last to first (every other image: Kernels::fc1_half)
        bool sampled;                    // each unit counts its ticks per group (Balance)
        int cut[GROUPS];                 // unit 0's channels or rows of each group (Balance)
    } job;
    alignas(64) std::chrono::steady_clock::time_point helper_start;
    struct alignas(64) Ticks {           // a unit's ticks computing each group, in sampled images
        uint64_t busy[GROUPS];
    } ticks[2];
    Balance balance;
    alignas(64) float part[SEGS][16];    // fc2's sums over each segment of fc1's rows, a line each
};

// One worker's scratch for one image at a time (stays in its L1/L2).
struct Scratch {
    std::vector<float> x = std::vector<float>(XPAD), conv1 = std::vector<float>(CONV1S);
    std::vector<float> conv2 = std::vector<float>(CONV2S), dpool1 = std::vector<float>(POOL1S);
    std::vector<float> back = std::vector<float>(BACK2_SCRATCH), dflat = std::vector<float>(FLAT);
};

// The convolutions' gradient sums of one group of images (layouts as the parameters).
struct ConvGrads {
    std::vector<float> w1 = std::vector<float>(stored(W1)), b1 = std::vector<float>(C1);
    std::vector<float> w2 = std::vector<float>(stored(W2)), b2 = std::vector<float>(C2);
};

// fc1's nonzero ReLU gradients (Kernels::sparse_rows' terms) as `rows` rows of up to `cap`.
struct Nonzeros {
    Array<int> idx, count;
    Array<float> val;
    Nonzeros(int rows, int cap) : idx(size_t(rows) * cap), count(rows), val(size_t(rows) * cap) {}
};

// A batch's buffers, for up to CHUNK images at a time: what the backward needs of the forward,
// the gradients flowing back, and the gradient sums over the batch.
struct Batch {
    std::vector<float> pool1 = std::vector<float>(CHUNK * POOL1S);   // per image
    std::vector<uint8_t> arg1 = std::vector<uint8_t>(CHUNK * POOL1), arg2 = std::vector<uint8_t>(CHUNK * FLAT);
    Array<float> flat = Array<float>(CHUNK * FLAT), hid = Array<float>(CHUNK * HID);
    std::vector<float> logits = std::vector<float>(CHUNK * OUT), dlogits = std::vector<float>(CHUNK * OUT);
    Array<float> dhid = Array<float>(CHUNK * HID);
    Array<float> dflat;                                 // fc1's data gradient, a share per thread: train_step sizes it
    Nonzeros by_image = Nonzeros(CHUNK, HID), by_unit = Nonzeros(HID, CHUNK);   // dhid's, both ways
    std::vector<ConvGrads> conv;                        // one per group of images
    Array<float> f1;                                    // only for batches of more than CHUNK
    std::vector<float> f2 = std::vector<float>(OUT * HID), fb1 = std::vector<float>(HID), fb2 = std::vector<float>(OUT);
};

// How one image is split over two threads: by output channels, by output rows, or by whichever of
// the two its recent images took less time in (SplitChoice, csrc/NOTES.md v33).
enum class Split { channels, rows, automatic };

struct Net {
    Params p;                           // parameters, rows padded to stride(t)
    const Kernels& k;
    const Split split;
    Workers workers;
    Single single;
    Array<float> fc1_halves;            // AVX-512, one image: fc1's weights as Kernels::fc1_half reads them, 1.6 MB
    Array<float> fc2_rows;              // one image: fc2's weights by input, as Kernels::fc2_part reads them
    bool single_stale = true;           // those two: made on the first image and after each step
    std::vector<Scratch> scratch;       // one per worker slot, made with the batch buffers
    std::unique_ptr<Batch> batch;       // made on first use
    std::mutex mu;                      // one call at a time per net; held across fork() (cblas_net.cpp)

    Net(int threads, const std::string& isa, Split split, bool balance);

    // cblas_forward.cpp
    void forward_one(const float* x, float* logits);   // one image, split over up to two workers
    void make_single_weights();         // fc1_halves (AVX-512) and fc2_rows from p, if stale
    // `repeats` forwards of one image; times[group] gets each group's wall time (µs) per repeat,
    // starts a helper's start delay (µs) in each forward whose second half it took, by_rows whether
    // each was split by rows.
    void time_one(const float* x, int repeats, std::vector<double> times[GROUPS], std::vector<double>& starts,
                  std::vector<bool>& by_rows);
    void predict(const float* x, int n, float* logits);
    // The batch forward of n <= CHUNK images into batch->hid and logits; with `train`, keeping
    // the pools' maxima for the backward.
    void forward_chunk(const float* x, int n, float* logits, bool train);
    // cblas_backward.cpp
    double train_step(const float* x, const int32_t* labels, int n, float lr);

    Batch& batch_buffers();
    int parts() const { return 2 * workers.slots(); }   // units a layer's rows are cut into
};

// C (m, n) = alpha·op(A)·op(B) + beta·C, row-major with leading dimensions, OpenBLAS.
void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc);

}  // namespace lenet::cblas
