// sync.cpp: what threads meet at, strictly (runtime.cpp has the rules in its header):
// __syncthreads, the cluster barrier, warp shuffles, and the DSMEM mapping of a sibling's shared
// memory. A barrier or shuffle completes when its last thread arrives, which releases the others
// and runs on; a thread that arrives elsewhere, or after another exited, is a `sync` report.
#include <string>

#include "runtime.h"

using namespace cuemu;

namespace {

// a lane reaching a barrier must not be one its warp waits for at a shuffle
void not_awaited(const Fiber* f, const char* barrier, const Site& site) {
    const Warp& w = f->block->warps[f->linear / 32];
    uint32_t lane = f->linear % 32;
    if (w.arrived && (w.mask >> lane & 1) && !(w.arrived >> lane & 1))
        report(SYNC, "divergent shuffle: lanes of a warp wait at the shuffle at " + w.site.str() + " for " + who(f) +
               ", which reached the " + barrier + " at " + site.str(), 0, 0, true);
}

// one thread arrives at a barrier of `total` threads (`group`: its block or cluster); true for the
// last arrival, which then releases the others; the others wait here (in state `wait`)
bool arrive(const Site& site, const char* barrier, const char* group, uint32_t& waiting, Site& at, uint32_t exited,
            uint32_t total, State wait) {
    Fiber* f = cur.fiber;
    not_awaited(f, barrier, site);
    if (exited)
        report(SYNC, who(f) + " reaches the " + barrier + " at " + site.str() + " after " + std::to_string(exited) +
               " threads of its " + group + " exited", 0, 0, true);
    if (waiting == 0) at = site;
    else if (site != at)
        report(SYNC, who(f) + " reaches the " + barrier + " at " + site.str() + " while " + std::to_string(waiting) +
               " threads of its " + group + " wait at the one at " + at.str(), 0, 0, true);
    if (++waiting < total) {
        f->state = wait;
        fiber_yield();
        return false;
    }
    waiting = 0;
    return true;
}

void release(Block& b, State from) {
    for (uint32_t t = 0; t < cur.threads; ++t)
        if (b.fibers[t].state == from) {
            b.fibers[t].state = State::RUN;
            b.runnable.push_back(t);
        }
}

}  // namespace

extern "C" {

void cuemu_syncthreads_at(const char* file, int line) {
    Block& b = *cur.fiber->block;
    if (!arrive({file, line}, "__syncthreads", "block", b.bar_waiting, b.bar_site, b.exited, cur.threads, State::BAR))
        return;
    ++b.bep;
    release(b, State::BAR);
    refresh_who();
}

void cuemu_cluster_sync_at(const char* file, int line) {
    Cluster& c = *cur.cluster;
    if (!arrive({file, line}, "cluster barrier", "cluster", c.waiting, c.site, c.threads - c.live, c.threads, State::CBAR))
        return;
    ++c.cep;
    for (Block& b : c.blocks) {
        ++b.bep;
        release(b, State::CBAR);
    }
    refresh_who();
}

void* cuemu_map_shared_at(const void* local, unsigned rank, const char* file, int line) {
    Site site{file, line};
    size_t offset = static_cast<const char*>(local) - cur.shared_lo;
    if (offset >= cur.shared_size)
        report(DSMEM, "mapping " + std::to_string(uintptr_t(local)) + ", which is not shared memory, at " + site.str() +
               " by " + who(cur.fiber), 0, 0, true);
    if (rank >= cur.cluster->blocks.size())
        report(DSMEM, "mapping shared memory of cluster rank " + std::to_string(rank) + " of a cluster of " +
               std::to_string(cur.cluster->blocks.size()) + " at " + site.str() + " by " + who(cur.fiber), 0, 0, true);
    Block& owner = cur.cluster->blocks[rank];
    return &owner == cur.block ? const_cast<void*>(local) : owner.saved + offset;
}

uint64_t cuemu_shfl_at(int kind, unsigned mask, uint64_t bits, int arg, int width, const char* file, int line) {
    Site site{file, line};
    Fiber* f = cur.fiber;
    Block& b = *f->block;
    uint32_t lane = f->linear % 32, base = f->linear - lane;
    uint32_t present = std::min<uint32_t>(32, cur.threads - base);
    uint32_t lanes = present == 32 ? 0xffffffffu : (1u << present) - 1;
    Warp& w = b.warps[f->linear / 32];
    if (mask & ~lanes)
        report(SYNC, "shuffle with mask " + std::to_string(mask) + " in a partial warp of " + std::to_string(present) +
               " threads (lanes that do not exist) at " + site.str() + " by " + who(f), 0, 0, true);
    if (!(mask >> lane & 1))
        report(SYNC, "shuffle by a lane outside its own mask at " + site.str() + " by " + who(f), 0, 0, true);
    if (width < 1 || width > 32 || (width & (width - 1)))
        report(SYNC, "shuffle width " + std::to_string(width) + " is not a power of two <= 32 at " + site.str(), 0, 0, true);
    if (mask & w.exited)
        report(SYNC, "shuffle at " + site.str() + " by " + who(f) + " names lanes that have exited (mask " +
               std::to_string(mask) + ", exited " + std::to_string(w.exited) + ")", 0, 0, true);
    if (w.arrived == 0) w.site = site, w.mask = mask, w.kind = kind, w.width = width;
    else if (site != w.site || mask != w.mask || kind != w.kind || width != w.width)
        report(SYNC, "divergent shuffle: " + who(f) + " shuffles at " + site.str() + " while lanes of its warp wait at " +
               w.site.str(), 0, 0, true);
    f->shfl_bits = bits, f->shfl_arg = arg;
    w.arrived |= 1u << lane;
    if (w.arrived != mask) {
        f->state = State::SHFL;
        fiber_yield();
        return f->shfl_result;
    }
    for (uint32_t l = 0; l < 32; ++l) {
        if (!(mask >> l & 1)) continue;
        Fiber& t = b.fibers[base + l];
        uint32_t seg = l & ~uint32_t(width - 1), src = l;
        int a = t.shfl_arg;
        if (kind == 0) src = seg + (uint32_t(a) & uint32_t(width - 1));
        else if (kind == 1) src = l >= seg + uint32_t(a) ? l - a : l;
        else if (kind == 2) src = l + uint32_t(a) < seg + uint32_t(width) ? l + a : l;
        else src = (l ^ uint32_t(a)) < seg + uint32_t(width) ? l ^ a : l;
        if (!(mask >> src & 1))
            report(SYNC, "shuffle at " + site.str() + ": lane " + std::to_string(l) + " reads lane " + std::to_string(src) +
                   ", which is not in the mask (undefined)", 0, 0, true);
        t.shfl_result = b.fibers[base + src].shfl_bits;
    }
    w.arrived = 0;
    for (uint32_t l = 0; l < 32; ++l)
        if ((mask >> l & 1) && l != lane) {
            b.fibers[base + l].state = State::RUN;
            b.runnable.push_back(base + l);
        }
    return f->shfl_result;
}

}  // extern "C"
